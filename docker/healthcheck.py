#!/usr/bin/python3
"""The images' health checks: exit 0 when the service answers its own protocol, else 1.

    tierproxy-healthcheck kafka HOST:PORT           a broker answers ApiVersions v0
    tierproxy-healthcheck http URL                  an HTTP endpoint answers 200
    tierproxy-healthcheck seaweedfs MASTER_URL S3_URL
                                                    a volume server has registered with free
                                                    slots, and the S3 gateway answers

Standard library only, because it runs in every image, the broker's included, which holds no
tierproxy: the broker check is one hand-encoded ApiVersions v0 round trip (the oldest version,
which every broker answers; a JVM running Kafka's own tool would cost a core-second per
check). A Kafka broker in KRaft mode opens its listeners only once it has caught up with the
metadata log and is unfenced, so an answer means it serves clients. The S3 gateway counts as up
when it answers at all (an unsigned request gets 403); without a volume server the first
upload would fail, hence the master check.

Commands and arguments contain no spaces: Podman 4.3's Docker-compatible API splits a
health check's arguments at spaces.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import urllib.error
import urllib.request

_TIMEOUT_S = 3.0
_API_VERSIONS = 18
_CLIENT_ID = b"tierproxy-healthcheck"
_CORRELATION_ID = 1


def kafka(address: str) -> None:
    """A broker at ``host:port`` answers ApiVersions v0 without an error code."""
    host, _, port = address.rpartition(":")
    header = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION_ID, len(_CLIENT_ID))
    request = header + _CLIENT_ID
    with socket.create_connection((host, int(port)), timeout=_TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", _read(sock, 4))
        response = _read(sock, min(size, 6))
    correlation_id, error_code = struct.unpack(">ih", response)
    if correlation_id != _CORRELATION_ID or error_code != 0:
        raise RuntimeError(f"ApiVersions answered error code {error_code}")


def http(url: str) -> None:
    """``url`` answers 200."""
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}")


def seaweedfs(master_url: str, s3_url: str) -> None:
    """The master has a volume server with free slots, and the S3 gateway answers."""
    with urllib.request.urlopen(f"{master_url}/dir/status", timeout=_TIMEOUT_S) as response:
        free = int(json.load(response)["Topology"]["Free"])
    if free < 1:
        raise RuntimeError("no volume server with free slots has registered yet")
    try:
        urllib.request.urlopen(s3_url, timeout=_TIMEOUT_S).close()
    except urllib.error.HTTPError as answered:  # 403 for an unsigned request: it answers
        answered.close()


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the connection closed mid-response")
        data += chunk
    return data


def main(argv: list[str]) -> int:
    checks = {"kafka": kafka, "http": http, "seaweedfs": seaweedfs}
    if not argv or argv[0] not in checks:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        checks[argv[0]](*argv[1:])
    except (OSError, ValueError, KeyError, RuntimeError, struct.error) as err:
        print(f"{argv[0]}: not ready: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
