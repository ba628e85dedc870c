"""A small supervisor for one server subprocess: own log file, readiness by probing, stop by PID.

Rules of this module:

* A server is started with its output going to its own log file (appended to, so a restarted
  server keeps one history), never to our terminal; errors quote the log's tail.
* Ready means the real protocol answered (a Kafka round trip, an S3 ``ListBuckets``), not that a
  port is open or a line was logged. Readiness is polled against a deadline; a server that exits
  while we wait fails at once with its exit code.
* Stopping is by PID only: SIGTERM, a grace period, then SIGKILL. Every live server is also
  stopped at interpreter exit, and each child gets SIGKILL from the kernel if the thread that
  started it dies (``setpriv --pdeathsig``, from util-linux, where available), so a killed test
  run leaves no servers behind on a shared machine. Start servers from a long-lived thread (the
  main thread): the death signal follows the starting *thread*.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = ["ManagedProcess", "ServerStartError", "environment"]

_POLL_INTERVAL_S = 0.05
_LOG_TAIL_LINES = 40

_live: set[ManagedProcess] = set()


class ServerStartError(RuntimeError):
    """A server did not become ready: it exited, timed out, or is not installed.

    :ivar exited_early: the process ended by itself before it was ready (a bad flag, a port
        taken between picking and binding), as opposed to hanging until the deadline.
    """

    def __init__(self, message: str, *, exited_early: bool = False) -> None:
        super().__init__(message)
        self.exited_early = exited_early


def _stop_all_at_exit() -> None:
    for process in list(_live):
        process.stop()


atexit.register(_stop_all_at_exit)


def _death_signal_prefix() -> list[str]:
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


class ManagedProcess:
    """One server subprocess started from ``argv`` with its output in ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stop_grace_s: float = 5.0,
    ) -> None:
        self.name = name
        self.argv = tuple(argv)
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._stop_grace_s = stop_grace_s
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The PID of the running server, or None when it is not running."""
        return self._popen.pid if self.running and self._popen else None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def start(self) -> None:
        """Launch the server (no-op when it is already running); does not wait for readiness.

        :raises ServerStartError: the executable could not be launched.
        """
        if self.running:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        log.write(f"--- {time.strftime('%H:%M:%S')} starting {' '.join(self.argv)}\n".encode())
        log.flush()
        try:
            self._popen = subprocess.Popen(
                [*_death_signal_prefix(), *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                # Own session: a Ctrl-C in the terminal reaches us, and we stop servers in order.
                start_new_session=True,
            )
        except OSError as err:
            log.close()
            raise ServerStartError(f"cannot launch {self.name} ({self.argv[0]}): {err}") from err
        self._log = log
        _live.add(self)

    def wait_ready(self, probe: Callable[[], bool], *, timeout_s: float) -> float:
        """Poll ``probe`` until it returns True; returns the seconds waited.

        Any exception from ``probe`` means "not ready yet" (connection refused, a half-started
        service answering with an error); the last one is quoted if the deadline passes.

        :raises ServerStartError: the process exited, or ``timeout_s`` passed; the server is
            stopped and the message carries the tail of its log.
        """
        started = time.monotonic()
        deadline = started + timeout_s
        last_error: Exception | None = None
        while True:
            if self._popen is None or self._popen.poll() is not None:
                code = None if self._popen is None else self._popen.returncode
                self.stop()
                raise ServerStartError(
                    f"{self.name} exited with code {code} before it was ready"
                    f"{self._tail_for_message()}",
                    exited_early=True,
                )
            try:
                if probe():
                    return time.monotonic() - started
            except Exception as err:  # any failure of a probe means "not ready yet"
                last_error = err
            if time.monotonic() >= deadline:
                self.stop()
                hint = f"; last probe error: {last_error!r}" if last_error else ""
                raise ServerStartError(
                    f"{self.name} was not ready within {timeout_s:.0f} s{hint}"
                    f"{self._tail_for_message()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def stop(self) -> None:
        """SIGTERM, wait up to the grace period, then SIGKILL; idempotent."""
        popen, self._popen = self._popen, None
        _live.discard(self)
        if popen is not None and popen.poll() is None:
            try:
                popen.send_signal(signal.SIGTERM)
                popen.wait(self._stop_grace_s)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL the server's whole process group (it runs in its own session, so this is
        the server and every process it started) and reap it; idempotent."""
        popen, self._popen = self._popen, None
        _live.discard(self)
        if popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server's log ("" if there is none yet)."""
        try:
            with self.log_path.open("rb") as log:
                tail = deque(log, maxlen=lines)
        except FileNotFoundError:
            return ""
        return b"".join(tail).decode(errors="replace")

    def _tail_for_message(self) -> str:
        tail = self.log_tail()
        return f"\n--- last lines of {self.log_path}:\n{tail}" if tail else ""

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, log={str(self.log_path)!r})"


def environment(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides`` applied, for a server's ``env``."""
    return {**os.environ, **overrides}
