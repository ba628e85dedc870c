"""What the embedded servers (Tansu, Apache Kafka, SeaweedFS) have in common.

Each owns a work directory (a fresh temporary one unless given) holding its log file and data,
starts one :class:`~proxy.embedded.process.ManagedProcess`, and is a context manager: ``stop()``
ends the process and keeps the directory (so SeaweedFS can restart on the same data), ``close()``
also removes a directory the server created itself.
"""

from __future__ import annotations

import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from proxy.embedded.process import ManagedProcess, ServerStartError

__all__ = ["ClosedOnExit", "EmbeddedServer", "retry_on_early_exit"]

T = TypeVar("T")

_START_ATTEMPTS = 3


def retry_on_early_exit(attempt: Callable[[], T], *, attempts: int = _START_ATTEMPTS) -> T:
    """Run ``attempt`` again (it picks fresh ports) when a server exits before it is ready.

    Ports are checked free before a server binds them; another process may take one in between.
    Such a server exits at once, which is worth another try; a server that hangs is not.

    :raises ServerStartError: the last attempt's error.
    """
    for _ in range(attempts - 1):
        try:
            return attempt()
        except ServerStartError as err:
            if not err.exited_early:
                raise
    return attempt()


class ClosedOnExit(ABC):
    """A context manager that calls ``close()`` on exit, for embedded and external servers alike."""

    @abstractmethod
    def close(self) -> None:
        """Release what the server holds (a process, a work directory), if anything."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class EmbeddedServer(ClosedOnExit):
    """Base class: a work directory, a process, and the stop/close/context-manager protocol."""

    name = "server"

    def __init__(self, work_dir: Path | None = None) -> None:
        self._owns_dir = work_dir is None
        self.work_dir = (
            Path(tempfile.mkdtemp(prefix=f"tierproxy-{self.name}-"))
            if work_dir is None
            else work_dir
        )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._process: ManagedProcess | None = None

    @property
    def log_path(self) -> Path:
        return self.work_dir / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        """Stop the process by PID (SIGTERM, then SIGKILL after the grace period); keeps data."""
        if self._process is not None:
            self._process.stop()

    def close(self) -> None:
        """Stop, and remove the work directory if this server created it."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
