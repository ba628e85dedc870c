"""The HTTP endpoint on ``metrics.port``: Prometheus ``/metrics``, ``/livez``, ``/readyz``.

It runs on its own threads, so a scrape never holds the event loop; ``/livez`` and
``/readyz`` get their answers from the loop (:mod:`proxy.health`), waiting at most
:data:`LOOP_WAIT_S`.

Exposure: ``/metrics`` names topics (and users and client ids when throttled), so it binds
to 127.0.0.1 by default and may require HTTP basic or bearer authentication
(``metrics.basic.auth.*``, ``metrics.bearer.token``; secrets from the file, a ``.file``
setting or an environment variable) and serve HTTPS (``metrics.ssl.*``, with client
certificates if asked). ``/livez`` and ``/readyz`` never require credentials (probes seldom
have them) and reveal only check names and reasons without names of topics or users.

Bounds: at most :data:`MAX_CONCURRENT` requests at once (more are closed unanswered), each
connection gets :data:`REQUEST_TIMEOUT_S` for its TLS handshake and its request.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import dataclasses
import hmac
import http.server
import logging
import os
import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from proxy.config import METRICS_PASSWORD_ENV, METRICS_TOKEN_ENV, ProxyConfig
from proxy.health import HealthReport, Liveness, Readiness
from proxy.logs import event
from proxy.tls import tls_server_context
from storage.config import ConfigError

__all__ = [
    "LOOP_WAIT_S",
    "MAX_CONCURRENT",
    "Answers",
    "EndpointError",
    "EndpointSettings",
    "HealthEndpoint",
    "LoopAnswers",
    "endpoint_settings",
    "serving",
    "serving_answers",
]

_log = logging.getLogger("tierproxy.health")

LOOP_WAIT_S: Final = 5.0
"""Longest ``/livez`` and ``/readyz`` wait for the event loop: a loop that cannot run a
callback for 5 s is not serving anyone (probes usually give up sooner, and that is their
answer too)."""
MAX_CONCURRENT: Final = 16
"""Requests served at once: a scraper and a few probes need far fewer; a flood of
connections costs no more than this many threads."""
REQUEST_TIMEOUT_S: Final = 10.0
"""Time a connection gets for its TLS handshake, then for each read and write."""

_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class EndpointError(Exception):
    """The endpoint could not bind its address (the message says which and why)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EndpointSettings:
    """Where the endpoint listens, its TLS and the credentials ``/metrics`` requires."""

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    basic: tuple[str, str] | None = dataclasses.field(default=None, repr=False)
    bearer: str | None = dataclasses.field(default=None, repr=False)
    unix_path: str = ""
    """Serve on this Unix socket instead of ``host:port`` (a worker's endpoint)."""

    @property
    def authenticated(self) -> bool:
        """Whether ``/metrics`` requires credentials."""
        return self.basic is not None or self.bearer is not None


def endpoint_settings(config: ProxyConfig) -> EndpointSettings:
    """The endpoint's settings, with secrets read from their files or the environment.

    :raises ConfigError: for an unreadable secret file, a user without a password, or
        certificate files that cannot be loaded.
    """
    password = _secret(
        config.metrics_basic_auth_password,
        config.metrics_basic_auth_password_file,
        METRICS_PASSWORD_ENV,
        "metrics.basic.auth.password.file",
    )
    token = _secret(
        config.metrics_bearer_token,
        config.metrics_bearer_token_file,
        METRICS_TOKEN_ENV,
        "metrics.bearer.token.file",
    )
    user = config.metrics_basic_auth_username
    if user and not password:
        raise ConfigError(
            "metrics.basic.auth.username needs a password: metrics.basic.auth.password, "
            f"metrics.basic.auth.password.file or ${METRICS_PASSWORD_ENV}"
        )
    if password and not user:
        raise ConfigError("a metrics password is set but metrics.basic.auth.username is not")
    return EndpointSettings(
        host=config.metrics_host,
        port=config.metrics_port,
        tls=_tls_context(config),
        basic=(user, password) if user else None,
        bearer=token or None,
    )


def _secret(value: str, file: str, env: str, file_key: str) -> str:
    if value:
        return value
    if file:
        try:
            return Path(file).read_text(encoding="utf-8").rstrip("\n")
        except OSError as err:
            raise ConfigError(f"cannot read {file_key}: {err}") from err
    return os.environ.get(env, "")


def _tls_context(config: ProxyConfig) -> ssl.SSLContext | None:
    if not config.metrics_ssl_certificate_location:
        return None
    try:
        return tls_server_context(
            certificate=config.metrics_ssl_certificate_location,
            key=config.metrics_ssl_key_location,
            password=config.metrics_ssl_key_password,
            ca=config.metrics_ssl_ca_location,
            client_auth=config.metrics_ssl_client_auth,
        )
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"metrics.ssl.*: {err}") from err


@contextlib.contextmanager
def serving(
    config: ProxyConfig,
    *,
    registry: CollectorRegistry,
    readiness: Readiness,
    unix_path: str = "",
) -> Iterator[Liveness]:
    """Serve the endpoint on ``metrics.port`` (if not 0) while the block runs, on the
    running loop; yields the liveness that the loop-lag probe should feed.

    With ``unix_path``, a worker's endpoint: it is served on that Unix socket instead (for
    the supervisor alone: no TLS, no credentials; the socket's directory guards it), and
    ``metrics.port`` is left to the supervisor.

    :raises ConfigError: for unusable ``metrics.*`` settings.
    :raises EndpointError: when the port cannot be bound.
    """
    loop = asyncio.get_running_loop()
    liveness = Liveness(loop)
    answers = LoopAnswers(registry=registry, readiness=readiness, liveness=liveness, loop=loop)
    if unix_path:
        endpoint = HealthEndpoint(EndpointSettings(host="", port=0, unix_path=unix_path), answers)
        try:
            with _readiness_series(registry, answers):
                yield liveness
        finally:
            endpoint.close()
        return
    if not config.metrics_port:
        yield liveness
        return
    with serving_answers(config, answers), _readiness_series(registry, answers):
        yield liveness


class _ReadinessSeries:
    """``tierproxy_ready`` and ``tierproxy_readiness_check{check}``: what ``/readyz`` would
    answer, asked at each scrape (so dashboards and alerts see it without a probe)."""

    def __init__(self, answers: Answers) -> None:
        self._answers = answers

    def collect(self) -> Iterator[Metric]:
        report = self._answers.readyz()
        ready = GaugeMetricFamily(
            "tierproxy_ready", "1 while /readyz answers 200 (every check passes), else 0."
        )
        ready.add_metric([], 1 if report.ok else 0)
        yield ready
        checks = GaugeMetricFamily(
            "tierproxy_readiness_check",
            "1 while the readiness check passes, per check (listeners, broker, "
            "remote_metadata, remote_storage, remote_objects); /readyz says why one fails.",
            labels=["check"],
        )
        for name, verdict in sorted(report.body.get("checks", {}).items()):
            checks.add_metric([name], 1 if verdict["ok"] else 0)
        yield checks


@contextlib.contextmanager
def _readiness_series(registry: CollectorRegistry, answers: Answers) -> Iterator[None]:
    series = _ReadinessSeries(answers)
    registry.register(series)
    try:
        yield
    finally:
        registry.unregister(series)


@contextlib.contextmanager
def serving_answers(config: ProxyConfig, answers: Answers) -> Iterator[HealthEndpoint]:
    """Serve ``answers`` on ``metrics.port`` with the ``metrics.*`` TLS and credentials
    while the block runs (``metrics.port`` must not be 0).

    :raises ConfigError: for unusable ``metrics.*`` settings.
    :raises EndpointError: when the port cannot be bound.
    """
    settings = endpoint_settings(config)
    endpoint = HealthEndpoint(settings, answers)
    event(
        _log,
        logging.INFO,
        "metrics.started",
        listen=f"{config.metrics_host}:{endpoint.port}",
        tls=settings.tls is not None,
        authentication=settings.authenticated,
    )
    try:
        yield endpoint
    finally:
        endpoint.close()


class Answers(Protocol):
    """What the endpoint serves. Each call runs on one of the endpoint's request threads,
    never on the event loop, and returns within about :data:`LOOP_WAIT_S`."""

    def metrics(self, accept: str) -> tuple[bytes, str]:
        """The exposition for an ``Accept`` header, and its content type."""
        ...

    def livez(self) -> HealthReport:
        """Whether the process is alive."""
        ...

    def readyz(self) -> HealthReport:
        """Whether the process should get traffic."""
        ...


class LoopAnswers:
    """One process's own answers: its registry, and its readiness and liveness asked on
    its event loop."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        readiness: Readiness,
        liveness: Liveness,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._liveness = liveness
        self._loop = loop

    def metrics(self, accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(self._registry), content_type

    def livez(self) -> HealthReport:
        return self._liveness.answer(LOOP_WAIT_S)

    def readyz(self) -> HealthReport:
        """The readiness report, run on the event loop, waited for up to
        :data:`LOOP_WAIT_S`."""
        answered: concurrent.futures.Future[HealthReport] = concurrent.futures.Future()

        def run() -> None:
            try:
                answered.set_result(self._readiness.report())
            except Exception as err:
                answered.set_exception(err)

        try:
            self._loop.call_soon_threadsafe(run)
            return answered.result(timeout=LOOP_WAIT_S)
        except RuntimeError:
            return HealthReport(ok=False, body={"reason": "the event loop is closed"})
        except concurrent.futures.TimeoutError:
            return HealthReport(
                ok=False,
                body={"reason": f"the event loop did not answer within {LOOP_WAIT_S:g} s"},
            )


class HealthEndpoint:
    """The running endpoint: a thread per request, at most :data:`MAX_CONCURRENT`."""

    def __init__(self, settings: EndpointSettings, answers: Answers) -> None:
        """Bind and start serving.

        :raises EndpointError: when the address cannot be bound.
        """
        try:
            self._server: _Bounded = (
                _UnixServer(settings, answers)
                if settings.unix_path
                else _TcpServer(settings, answers)
            )
        except OSError as err:
            where = settings.unix_path or f"{settings.host}:{settings.port}"
            raise EndpointError(f"cannot serve metrics on {where}: {err}") from err
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="tierproxy-metrics", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The bound port (useful when 0 asked for any free one); 0 on a Unix socket."""
        address = self._server.server_address
        return int(address[1]) if isinstance(address, tuple) else 0

    def close(self) -> None:
        """Stop serving and join the accepting thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class _Bounded(socketserver.ThreadingMixIn, socketserver.BaseServer):
    """At most :data:`MAX_CONCURRENT` request threads; TLS wrapped in the request's thread."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64
    settings: EndpointSettings
    answers: Answers
    socket: socket.socket

    def _bound(self, settings: EndpointSettings, answers: Answers) -> None:
        self.settings = settings
        self.answers = answers
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT)

    def get_request(self) -> tuple[Any, Any]:
        sock, address = self.socket.accept()
        if self.settings.tls is not None:
            # The handshake happens in the request's thread (_Handler.setup), never here.
            sock = self.settings.tls.wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
        return sock, address

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A scraper that hung up, a failed TLS handshake: the client's problem, one line.
        event(_log, logging.DEBUG, "metrics.request.failed", client=str(client_address))


class _TcpServer(_Bounded, http.server.HTTPServer):
    def __init__(self, settings: EndpointSettings, answers: Answers) -> None:
        self.address_family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        self._bound(settings, answers)
        http.server.HTTPServer.__init__(self, (settings.host, settings.port), _Handler)


class _UnixServer(_Bounded, socketserver.UnixStreamServer):
    def __init__(self, settings: EndpointSettings, answers: Answers) -> None:
        self._bound(settings, answers)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(settings.unix_path)  # left by a worker that died
        socketserver.UnixStreamServer.__init__(self, settings.unix_path, _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Bounded
    timeout = REQUEST_TIMEOUT_S
    server_version = "tierproxy"
    sys_version = ""

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(REQUEST_TIMEOUT_S)
            self.request.do_handshake()
        super().setup()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        answers = self.server.answers
        if path == "/metrics":
            self._metrics()
        elif path == "/livez":
            self._health(answers.livez())
        elif path == "/readyz":
            self._health(answers.readyz())
        else:
            self._send(404, b"not found: try /metrics, /livez or /readyz\n", "text/plain")

    def _metrics(self) -> None:
        if not self._authorized():
            self._send(
                401,
                b"unauthorized\n",
                "text/plain",
                ("WWW-Authenticate", 'Basic realm="tierproxy metrics"')
                if self.server.settings.basic is not None
                else ("WWW-Authenticate", 'Bearer realm="tierproxy metrics"'),
            )
            event(_log, logging.WARNING, "metrics.unauthorized", client=_client(self))
            return
        body, content_type = self.server.answers.metrics(self.headers.get("Accept", ""))
        self._send(200, body, content_type)

    def _authorized(self) -> bool:
        settings = self.server.settings
        if not settings.authenticated:
            return True
        scheme, _, credentials = self.headers.get("Authorization", "").partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and settings.bearer is not None:
            return hmac.compare_digest(credentials.strip().encode(), settings.bearer.encode())
        if scheme == "basic" and settings.basic is not None:
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True)
            except ValueError:
                return False
            user, password = settings.basic
            expected = f"{user}:{password}".encode()
            return hmac.compare_digest(decoded, expected)
        return False

    def _health(self, report: HealthReport) -> None:
        self._send(200 if report.ok else 503, report.json(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str, *headers: tuple[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged one by one (a scrape every 15 s would fill the log)."""


def _client(handler: http.server.BaseHTTPRequestHandler) -> str:
    address = handler.client_address
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else "unix"
