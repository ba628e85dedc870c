"""The supervisor's side of a worker's endpoint: HTTP GETs over the worker's Unix socket."""

from __future__ import annotations

import dataclasses
import http.client
import socket

__all__ = ["Answer", "ask"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A worker's HTTP answer."""

    status: int
    body: bytes
    content_type: str


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("worker", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def ask(path: str, resource: str, *, timeout: float, accept: str = "") -> Answer:
    """GET ``resource`` from the endpoint on the Unix socket ``path``.

    :raises OSError: when the worker does not answer within ``timeout`` (not listening yet,
        gone, stuck).
    :raises http.client.HTTPException: for an answer that is not HTTP.
    """
    connection = _UnixConnection(path, timeout)
    try:
        connection.request("GET", resource, headers={"Accept": accept} if accept else {})
        response = connection.getresponse()
        return Answer(
            status=response.status,
            body=response.read(),
            content_type=response.getheader("Content-Type", ""),
        )
    finally:
        connection.close()
