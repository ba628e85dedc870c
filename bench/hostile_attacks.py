"""Malformed Kafka input, sent over loopback, for ``bench/hostile.py`` and its integration test.

Seven categories, each what a broken client, a scanner or an attacker really sends:

- ``random_bytes``: 1-512 random bytes, size prefix included;
- ``truncated``: a valid request frame cut anywhere, then the client closes;
- ``absurd_lengths``: size prefixes of 2**31-1, -1, -2**31 or just above the proxy's limit,
  and well-framed bodies whose first array or string claims two billion entries;
- ``garbage_bodies``: a valid header of a known API and version, then random bytes;
- ``unknown_versions``: known API keys at versions nobody defines (99, 32767, -1, Fetch v0-3);
- ``slowloris``: half a frame, then one byte a second, never finished;
- ``drop_mid_response``: a Fetch of the tiered range, then a reset, at once or once the
  answer starts.

Each one-frame category sends its frame on a new connection and half-closes it; the proxy
must then close the connection itself (``closed_by_proxy``). Slowloris connections are held
until the proxy cuts them. Work is bounded by a frame count and a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
import socket
import struct
from collections import Counter
from collections.abc import Callable
from typing import Final

from protocol.errors import RemoteProtocolError
from protocol.frames import encode_frame
from protocol.headers import encode_request_header
from protocol.messages import ApiKey, request_class

__all__ = ["CATEGORIES", "Tally", "Target", "attack"]

ONE_SHOT: Final = (
    "random_bytes",
    "truncated",
    "absurd_lengths",
    "garbage_bodies",
    "unknown_versions",
    "drop_mid_response",
)
CATEGORIES: Final = (*ONE_SHOT, "slowloris")

# How long a one-frame connection waits for the proxy to close it: the proxy answers at once,
# or after the broker refused what it forwarded; slower than this counts as left open.
CLOSE_WAIT_S: Final = 15.0
TRICKLE_S: Final = 1.0
_SIZE: Final = struct.Struct(">i")
_KNOWN_KEYS: Final = (0, 1, 2, 3, 8, 9, 10, 11, 12, 18, 19, 21, 23, 32, 60)
_ABSURD_VERSIONS: Final = (99, 1000, 32767, -1)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The proxy under attack."""

    host: str
    port: int
    max_request_bytes: int
    fetch_frame: bytes
    """A whole framed Fetch of tiered data, for ``drop_mid_response``."""


@dataclasses.dataclass(slots=True)
class Tally:
    """What was sent, per category, and what the proxy did with the connections."""

    frames: Counter[str] = dataclasses.field(default_factory=Counter)
    closed_by_proxy: Counter[str] = dataclasses.field(default_factory=Counter)
    left_open: Counter[str] = dataclasses.field(default_factory=Counter)
    connect_failed: int = 0

    def add(self, other: Tally) -> None:
        self.frames.update(other.frames)
        self.closed_by_proxy.update(other.closed_by_proxy)
        self.left_open.update(other.left_open)
        self.connect_failed += other.connect_failed

    def as_dict(self) -> dict[str, object]:
        return {
            "frames": dict(self.frames),
            "frames_total": sum(self.frames.values()),
            "closed_by_proxy": dict(self.closed_by_proxy),
            "left_open": dict(self.left_open),
            "connect_failed": self.connect_failed,
        }


def _valid_versions() -> list[tuple[int, int]]:
    found = []
    for key in _KNOWN_KEYS:
        for version in range(20):
            with contextlib.suppress(RemoteProtocolError):
                request_class(key, version)
                found.append((key, version))
    return found


_VALID: Final = _valid_versions()


def _header(rng: random.Random, key: int, version: int) -> bytes:
    return encode_request_header(key, version, rng.randrange(2**31), "hostile")


def random_bytes(rng: random.Random, _target: Target) -> bytes:
    return rng.randbytes(rng.randint(1, 512))


def truncated(rng: random.Random, target: Target) -> bytes:
    key, version = rng.choice(_VALID)
    whole = encode_frame(_header(rng, key, version) + rng.randbytes(rng.randint(0, 64)))
    if rng.random() < 0.2:
        whole = target.fetch_frame
    return whole[: rng.randint(1, len(whole) - 1)]


def absurd_lengths(rng: random.Random, target: Target) -> bytes:
    choice = rng.randrange(6)
    if choice < 4:
        size = (2**31 - 1, -1, -(2**31), target.max_request_bytes + 1)[choice]
        return _SIZE.pack(size) + rng.randbytes(16)
    if choice == 4:  # non-flexible Metadata v4: an int32 topic count of two billion
        return encode_frame(_header(rng, ApiKey.METADATA, 4) + b"\x7f\xff\xff\xff")
    # flexible Metadata v12: a compact-array count (unsigned varint) of two billion
    return encode_frame(_header(rng, ApiKey.METADATA, 12) + b"\xff\xff\xff\xff\x07\x00")


def garbage_bodies(rng: random.Random, _target: Target) -> bytes:
    key, version = rng.choice(_VALID)
    return encode_frame(_header(rng, key, version) + rng.randbytes(rng.randint(0, 256)))


def unknown_versions(rng: random.Random, _target: Target) -> bytes:
    key = rng.choice(_KNOWN_KEYS)
    version = (
        rng.choice((*_ABSURD_VERSIONS, *range(4))) if key == 1 else rng.choice(_ABSURD_VERSIONS)
    )
    header = struct.pack(">hhih", key, version, rng.randrange(2**31), 7) + b"hostile\x00"
    return encode_frame(header + rng.randbytes(rng.randint(0, 32)))


_PAYLOADS: Final[dict[str, Callable[[random.Random, Target], bytes]]] = {
    "random_bytes": random_bytes,
    "truncated": truncated,
    "absurd_lengths": absurd_lengths,
    "garbage_bodies": garbage_bodies,
    "unknown_versions": unknown_versions,
}


async def _closed_by_peer(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Read and drop until EOF or a reset; False if still open after ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


async def _connect(
    target: Target, tally: Tally
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.open_connection(target.host, target.port)
    except OSError:
        tally.connect_failed += 1
        return None


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a killed client does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def one_shot(category: str, rng: random.Random, target: Target, tally: Tally) -> None:
    """One connection, one malformed frame (or a dropped Fetch), then wait for the close."""
    connection = await _connect(target, tally)
    if connection is None:
        return
    reader, writer = connection
    tally.frames[category] += 1
    try:
        if category == "drop_mid_response":
            writer.write(target.fetch_frame)
            # Half reset before the answer is ready (a remote read takes a while), half
            # once its first bytes arrived (the rest may be in flight or still buffered).
            if rng.random() < 0.5:
                with contextlib.suppress(TimeoutError, OSError):
                    async with asyncio.timeout(CLOSE_WAIT_S):
                        await reader.read(rng.randint(1, 4096))
            _reset(writer)
            return
        writer.write(_PAYLOADS[category](rng, target))
        with contextlib.suppress(OSError):
            writer.write_eof()
        closed = await _closed_by_peer(reader, CLOSE_WAIT_S)
        (tally.closed_by_proxy if closed else tally.left_open)[category] += 1
    finally:
        writer.transport.abort()


async def slowloris(target: Target, tally: Tally, patience_s: float) -> None:
    """Half a frame, then a byte a second until the proxy closes (or ``patience_s`` ends)."""
    connection = await _connect(target, tally)
    if connection is None:
        return
    reader, writer = connection
    tally.frames["slowloris"] += 1
    writer.write(_SIZE.pack(4096) + b"\x00\x03")
    loop = asyncio.get_running_loop()
    give_up = loop.time() + patience_s
    try:
        while loop.time() < give_up:
            if await _closed_by_peer(reader, TRICKLE_S):
                tally.closed_by_proxy["slowloris"] += 1
                return
            writer.write(b"\x00")
        tally.left_open["slowloris"] += 1
    except OSError:
        tally.closed_by_proxy["slowloris"] += 1
    finally:
        writer.transport.abort()


async def attack(
    target: Target,
    *,
    frames: int,
    seconds: float,
    attackers: int = 8,
    slowloris_connections: int = 16,
    slowloris_patience_s: float = 60.0,
    seed: int = 0,
) -> Tally:
    """Send up to ``frames`` one-frame attacks for up to ``seconds``, from ``attackers``
    concurrent connections, while ``slowloris_connections`` trickle; returns once every
    connection is closed (slowloris ones by the proxy, within ``slowloris_patience_s``)."""
    tally = Tally()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    sequence = itertools.count()
    finished = asyncio.Event()

    async def attacker(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        while loop.time() < deadline and (number := next(sequence)) < frames:
            await one_shot(ONE_SHOT[number % len(ONE_SHOT)], rng, target, tally)

    async def loris() -> None:
        while not finished.is_set():
            await slowloris(target, tally, slowloris_patience_s)

    lorises = [asyncio.create_task(loris()) for _ in range(slowloris_connections)]
    try:
        await asyncio.gather(*(attacker(index) for index in range(attackers)))
    finally:
        finished.set()
        await asyncio.gather(*lorises)
    return tally
