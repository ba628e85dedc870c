"""The supervisor: starts the workers, restarts one that dies, drains them all on SIGTERM.

Rules of this file:

- The supervisor serves no client. Before it starts a worker it checks that the listener
  addresses it knows (the base port, ``[[broker.map]]``) are not held by another process:
  workers bind with ``SO_REUSEPORT``, which would otherwise let two instances share a port
  silently. A taken address exits 2, as ``serve`` does.
- Each worker is ``python -m proxy.workers.child``; its settings (budgets divided by
  :mod:`proxy.workers.budgets`) arrive on its stdin as one JSON line, and stdin stays
  open: a worker whose supervisor is gone sees its end and drains itself.
- A worker that exits 2 (bad settings, an address it cannot bind) or
  :data:`~proxy.workers.role.EXIT_NOT_INITIALISED` (the metadata topic not read in time)
  stops the whole supervisor with that outcome: restarting would fail the same way. Any
  other exit (a crash, a signal, the OOM killer) is logged (``worker.exited``) and the
  worker restarted after a back-off that doubles from :data:`RESTART_BACKOFF_S` to
  :data:`RESTART_BACKOFF_MAX_S`, reset once a worker has run for
  :data:`STABLE_AFTER_S` (``worker.restarted``).
- SIGTERM or SIGINT: ``/readyz`` fails at once, every worker gets SIGTERM and drains (its
  own readiness false, listeners closed, in-flight requests answered, within
  ``shutdown.timeout.ms``); one still running :data:`KILL_AFTER_S` past that is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from proxy.config import HostPort, ProxyConfig
from proxy.health_endpoint import LOOP_WAIT_S, serving_answers
from proxy.listeners import ListenerError
from proxy.logs import event
from proxy.workers.aggregate import WorkerAnswers
from proxy.workers.budgets import worker_settings
from proxy.workers.link import Answer, ask
from proxy.workers.role import EXIT_BAD_SETTINGS, EXIT_NOT_INITIALISED

__all__ = [
    "KILL_AFTER_S",
    "RESTART_BACKOFF_MAX_S",
    "RESTART_BACKOFF_S",
    "STABLE_AFTER_S",
    "Supervisor",
    "check_addresses_free",
]

_log = logging.getLogger("tierproxy.workers")

RESTART_BACKOFF_S: Final = 0.5
"""First wait before a dead worker is started again."""
RESTART_BACKOFF_MAX_S: Final = 30.0
"""Longest wait between restarts of a worker that keeps dying."""
STABLE_AFTER_S: Final = 60.0
"""A worker that ran this long before it died is restarted after the first back-off again."""
KILL_AFTER_S: Final = 15.0
"""How long past ``shutdown.timeout.ms`` a draining worker may take (closing its remote
tier, writing its snapshot) before it is killed."""
_FATAL: Final = frozenset({EXIT_BAD_SETTINGS, EXIT_NOT_INITIALISED})


def check_addresses_free(config: ProxyConfig) -> None:
    """Bind each listener address the settings name (the base port, the broker map),
    without ``SO_REUSEPORT``, and let go: an address held by another process fails here.

    :raises ListenerError: naming the address that is taken.
    """
    addresses = [config.listener.address, *(entry.listener for entry in config.explicit_brokers())]
    for address in addresses:
        _probe(address)


def _probe(address: HostPort) -> None:
    try:
        infos = socket.getaddrinfo(
            address.host or None, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _, sockaddr = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
    except OSError as err:
        raise ListenerError(f"cannot listen on {address}: {err}") from err


class _Worker:
    """One worker slot: its current process and its restart bookkeeping."""

    def __init__(self, index: int, endpoint: Path) -> None:
        self.index = index
        self.endpoint = endpoint
        self.process: asyncio.subprocess.Process | None = None
        self.started = 0.0
        self.backoff = RESTART_BACKOFF_S

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


class Supervisor:
    """``count`` workers of one ``serve`` and the endpoint that answers for them."""

    def __init__(self, config: ProxyConfig, settings: Mapping[str, Any], *, count: int) -> None:
        self._config = config
        self._settings = dict(settings)
        self._count = count
        self._runtime = Path(tempfile.mkdtemp(prefix="tierproxy-workers-"))
        self._workers = [
            _Worker(index, self._runtime / f"worker-{index}.sock") for index in range(count)
        ]
        self._stop = asyncio.Event()
        self._stopping = ""
        self._outcome = 0
        self._registry = CollectorRegistry()
        self._running_gauge = Gauge(
            "tierproxy_workers_running",
            "Worker processes running now (of the workers setting).",
            registry=self._registry,
        )
        self._restarts = Counter(
            "tierproxy_worker_restarts",
            "Workers that died and were started again.",
            registry=self._registry,
        )

    async def run(self) -> int:
        """Start the workers, serve the endpoint, and return once all have stopped: 0 after
        SIGTERM/SIGINT, 2 or 1 when a worker found the settings or the cluster unusable
        (see the rules of this module).

        :raises ConfigError: for unusable ``metrics.*`` settings.
        :raises EndpointError: when ``metrics.port`` cannot be bound.
        """
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop_all, "shutting down")
        try:
            with contextlib.ExitStack() as stack:
                if self._config.metrics_port:
                    stack.enter_context(serving_answers(self._config, self._answers()))
                event(
                    _log,
                    logging.INFO,
                    "workers.starting",
                    workers=self._count,
                    listen=str(self._config.listener.address),
                )
                async with asyncio.TaskGroup() as group:
                    for worker in self._workers:
                        group.create_task(self._keep(worker))
                    await self._stop.wait()
                    await self._drain()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            shutil.rmtree(self._runtime, ignore_errors=True)
        event(_log, logging.INFO, "workers.stopped", outcome=self._outcome)
        return self._outcome

    def _answers(self) -> WorkerAnswers:
        loop = asyncio.get_running_loop()

        def running() -> dict[int, bool]:
            return {worker.index: worker.running for worker in self._workers}

        def ask_worker(index: int, resource: str, accept: str) -> Answer:
            if resource == "/metrics":
                # The gauge is read where the loop keeps it: the endpoint's thread only asks.
                loop.call_soon_threadsafe(self._count_running)
            return ask(
                str(self._workers[index].endpoint),
                resource,
                timeout=LOOP_WAIT_S + 1,
                accept=accept,
            )

        return WorkerAnswers(
            ask=ask_worker, running=running, stopping=lambda: self._stopping, own=self._registry
        )

    def _count_running(self) -> None:
        self._running_gauge.set(sum(worker.running for worker in self._workers))

    def _stop_all(self, reason: str) -> None:
        if not self._stopping:
            self._stopping = reason
            event(_log, logging.INFO, "workers.stopping", reason=reason)
        self._stop.set()

    async def _keep(self, worker: _Worker) -> None:
        """Run ``worker``, restarting it whenever it dies, until the supervisor stops."""
        while not self._stopping:
            process = await self._spawn(worker)
            code = await process.wait()
            self._count_running()
            if self._stopping:
                return
            lived = time.monotonic() - worker.started
            if code in _FATAL:
                event(
                    _log,
                    logging.ERROR,
                    "worker.failed",
                    worker=worker.index,
                    code=code,
                    meaning="the settings or the cluster cannot work; stopping every worker",
                )
                self._outcome = 2 if code == EXIT_BAD_SETTINGS else 1
                self._stop_all("a worker could not start")
                return
            if lived >= STABLE_AFTER_S:
                worker.backoff = RESTART_BACKOFF_S
            event(
                _log,
                logging.ERROR,
                "worker.exited",
                worker=worker.index,
                pid=process.pid,
                **_how(code),
                ran_s=round(lived, 1),
                restart_in_s=worker.backoff,
            )
            try:
                async with asyncio.timeout(worker.backoff):
                    await self._stop.wait()
                return
            except TimeoutError:
                pass
            worker.backoff = min(worker.backoff * 2, RESTART_BACKOFF_MAX_S)
            self._restarts.inc()
            event(_log, logging.WARNING, "worker.restarted", worker=worker.index)

    async def _spawn(self, worker: _Worker) -> asyncio.subprocess.Process:
        spec = {
            "index": worker.index,
            "count": self._count,
            "endpoint": str(worker.endpoint),
            "settings": worker_settings(self._settings, index=worker.index, count=self._count),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.workers.child", stdin=asyncio.subprocess.PIPE
        )
        assert process.stdin is not None
        process.stdin.write(json.dumps(spec).encode() + b"\n")
        # stdin stays open: its end tells the worker that the supervisor is gone.
        await process.stdin.drain()
        worker.process = process
        worker.started = time.monotonic()
        self._count_running()
        event(_log, logging.INFO, "worker.started", worker=worker.index, pid=process.pid)
        return process

    async def _drain(self) -> None:
        """SIGTERM every worker and wait for them, killing those past the deadline."""
        running = [w.process for w in self._workers if w.process is not None and w.running]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = self._config.shutdown_timeout_ms / 1000 + KILL_AFTER_S
        try:
            async with asyncio.timeout(deadline), asyncio.TaskGroup() as group:
                for process in running:
                    group.create_task(process.wait())
        except TimeoutError:
            for process in running:
                if process.returncode is None:
                    event(_log, logging.ERROR, "worker.killed", pid=process.pid, after_s=deadline)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
        for process in running:
            if process.stdin is not None:
                process.stdin.close()


def _how(code: int) -> dict[str, Any]:
    if code < 0:
        with contextlib.suppress(ValueError):
            return {"signal": signal.Signals(-code).name}
        return {"signal": -code}
    return {"code": code}
