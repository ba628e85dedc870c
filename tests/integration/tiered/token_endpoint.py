"""An OAuth 2 token endpoint for OAUTHBEARER tests, issuing the unsecured JWTs that Apache
Kafka's default OAUTHBEARER validator (``OAuthBearerUnsecuredValidatorCallbackHandler``)
accepts.

It answers the client credentials grant (RFC 6749 section 4.4) as an identity provider would:
the client authenticates with HTTP basic authentication, and gets ``access_token`` and
``expires_in``. The token is a JWS with ``alg: none`` and an empty signature, whose ``sub``
is the client id and whose ``exp`` is ``lifetime_s`` from now, so the broker's principal is
``User:<client id>`` and its sessions end with the token (KIP-368).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs

__all__ = ["TokenEndpoint", "unsecured_jwt"]


def unsecured_jwt(claims: dict[str, Any]) -> str:
    """``claims`` as an unsecured JWS in compact serialization (RFC 7515, RFC 7519)."""

    def part(document: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(document).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}."


class TokenEndpoint:
    """The endpoint on a free loopback port; ``secrets`` are the clients it knows."""

    def __init__(self, secrets: dict[str, str], *, lifetime_s: int) -> None:
        self.secrets = secrets
        self.lifetime_s = lifetime_s
        self.issued: Counter[str] = Counter()
        """Tokens issued, by client id."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/token"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _grant(self, authorization: str, form: dict[str, list[str]]) -> dict[str, Any] | None:
        """The token answer, or ``None`` for an unknown client or another grant."""
        if form.get("grant_type") != ["client_credentials"]:
            return None
        scheme, _, encoded = authorization.partition(" ")
        client, _, secret = base64.b64decode(encoded or "").decode().partition(":")
        if scheme != "Basic" or self.secrets.get(client) != secret:
            return None
        now = int(time.time())
        token = unsecured_jwt({"sub": client, "iat": now, "exp": now + self.lifetime_s})
        with self._lock:
            self.issued[client] += 1
        return {"access_token": token, "token_type": "Bearer", "expires_in": self.lifetime_s}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                answer = endpoint._grant(self.headers.get("Authorization", ""), form)
                body = json.dumps(answer or {"error": "invalid_client"}).encode()
                self.send_response(200 if answer else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test reads the counters, not an access log."""

        return Handler
