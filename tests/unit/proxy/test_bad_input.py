"""Bad client input closes only that connection, and the proxy keeps serving everyone else.

The proxy and its scripted fake broker run on a uvloop loop in a thread (as in production),
so these tests use plain blocking sockets, and hypothesis can drive them. A loop exception
handler records anything that escapes a protocol callback: there must be none.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import KafkaError
from protocol.frames import encode_frame
from protocol.messages import ApiKey, decode_response
from proxy.config import ProxyConfig
from proxy.server import ProxyServer
from tests.conditions import GENEROUS_S
from tests.fakes.frame_client import api_versions_frame, metadata_frame
from tests.fakes.wire_broker import WireBroker, raw_request

MAX_REQUEST = 1024 * 1024


class ThreadedProxy:
    """A fake broker and a proxy on their own uvloop event loop in a thread."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self.errors: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda _loop, context: self.errors.append(context))
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.broker: WireBroker | None = None
        self.proxy: ProxyServer | None = None
        self.address: tuple[str, int] = ("", 0)

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    async def _start(self) -> None:
        self.broker = await WireBroker().start()
        config = ProxyConfig(
            bootstrap_servers=f"127.0.0.1:{self.broker.port}",
            listeners="127.0.0.1:0",
            socket_request_max_bytes=MAX_REQUEST,
        )
        self.proxy = ProxyServer(config)
        await self.proxy.start()
        route = self.proxy.routes[0].advertised
        self.address = (route.host, route.port)

    async def _stop(self) -> None:
        assert self.proxy is not None and self.broker is not None
        await self.proxy.close(1)
        await self.broker.close()

    def __enter__(self) -> ThreadedProxy:
        self._thread.start()
        self._run(self._start())
        return self

    def __exit__(self, *_: object) -> None:
        self._run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def connect(self) -> socket.socket:
        return socket.create_connection(self.address, timeout=GENEROUS_S)


@pytest.fixture(scope="module")
def threaded() -> Iterator[ThreadedProxy]:
    with ThreadedProxy() as running:
        yield running
    assert running.errors == []


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    return read_exactly(sock, size)


def read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def closed_by_proxy(sock: socket.socket) -> bool:
    """Read until EOF (or reset); False if the proxy keeps it open for the socket's timeout
    (``GENEROUS_S``: the proxy runs in a thread of this busy process)."""
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


def round_trip_works(sock: socket.socket, correlation_id: int) -> bool:
    sock.sendall(raw_request(correlation_id, b"still here"))
    answer = read_frame(sock)
    return answer == struct.pack(">i", correlation_id) + b"echo:still here"


@pytest.fixture
def bystander(threaded: ThreadedProxy) -> Iterator[socket.socket]:
    """A well-behaved client connected the whole time."""
    with threaded.connect() as sock:
        assert round_trip_works(sock, 1)
        yield sock
        assert round_trip_works(sock, 2)


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(struct.pack(">i", MAX_REQUEST + 1) + b"x" * 100, id="frame-over-limit"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(encode_frame(b"\x00\x03\x00"), id="shorter-than-a-header"),
        pytest.param(
            encode_frame(struct.pack(">hhih", ApiKey.METADATA, 99, 1, 2) + b"ab"),
            id="intercepted-api-unknown-version",
        ),
        pytest.param(
            # Header v2 whose tagged-field count is a varint that never ends.
            encode_frame(struct.pack(">hhih", ApiKey.METADATA, 12, 1, 0) + b"\xff" * 6),
            id="intercepted-api-unparsable-header",
        ),
        pytest.param(
            encode_frame(struct.pack(">hhih", ApiKey.FETCH, 2, 1, 0) + b"\x00\x00"),
            id="intercepted-api-version-below-range",
        ),
    ],
)
def test_bad_input_closes_only_that_connection(
    threaded: ThreadedProxy, bystander: socket.socket, garbage: bytes
) -> None:
    with threaded.connect() as offender:
        offender.sendall(garbage)
        assert closed_by_proxy(offender)


def test_too_new_api_versions_is_answered_not_closed(
    threaded: ThreadedProxy, bystander: socket.socket
) -> None:
    with threaded.connect() as client:
        request = struct.pack(">hhih", ApiKey.API_VERSIONS, 77, 5, -1) + b"\x00from the future"
        client.sendall(struct.pack(">i", len(request)) + request)
        answer = read_frame(client)
        assert struct.unpack_from(">i", answer)[0] == 5
        body = decode_response(ApiKey.API_VERSIONS, 0, answer[4:])
        assert body.error_code == KafkaError.UNSUPPORTED_VERSION
        # The client retries at a version from the answer, on the same connection.
        client.sendall(api_versions_frame(6, version=int(body.api_keys[0].max_version)))
        assert struct.unpack_from(">i", read_frame(client))[0] == 6
        client.sendall(metadata_frame(7))
        assert struct.unpack_from(">i", read_frame(client))[0] == 7


VALID_FRAMES = [
    raw_request(3, b"fine"),
    api_versions_frame(4),
    metadata_frame(5),
    metadata_frame(6, version=1),
]

junk = st.one_of(
    st.binary(max_size=256),
    # A valid frame cut short, possibly with random bytes after the cut.
    st.tuples(st.sampled_from(VALID_FRAMES), st.integers(0, 200), st.binary(max_size=32)).map(
        lambda parts: parts[0][: parts[1]] + parts[2]
    ),
    # A valid frame header with a random body.
    st.tuples(st.sampled_from(VALID_FRAMES), st.binary(max_size=64)).map(
        lambda parts: (
            struct.pack(">i", len(parts[0]) - 4 + len(parts[1])) + parts[0][4:12] + parts[1]
        )
    ),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chunks=st.lists(junk, min_size=1, max_size=4))
def test_random_and_truncated_frames_never_hurt_the_proxy(
    threaded: ThreadedProxy, chunks: list[bytes]
) -> None:
    with threaded.connect() as bystander:
        assert round_trip_works(bystander, 10)
        with threaded.connect() as fuzz:
            # The proxy may close the connection at the first bad byte: sending then fails.
            with contextlib.suppress(OSError):
                for chunk in chunks:
                    fuzz.sendall(chunk)
                fuzz.shutdown(socket.SHUT_WR)
            # Whatever it sent, once the client stops sending the proxy answers what it
            # could and closes.
            assert closed_by_proxy(fuzz)
        assert round_trip_works(bystander, 11)
    assert threaded.errors == []
