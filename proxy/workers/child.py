"""A worker process, ``python -m proxy.workers.child``, started by the supervisor.

It reads one JSON line from stdin (``index``, ``count``, ``endpoint``, ``settings``), serves
as ``tierproxy serve`` does with a :class:`~proxy.workers.role.WorkerRole`, and stops on
SIGTERM or SIGINT, or when its stdin ends (the supervisor is gone): a drain either way.

Exit codes: 0 after a graceful shutdown; ``EXIT_BAD_SETTINGS`` (2) for settings or an
address that cannot work; ``EXIT_NOT_INITIALISED`` (75) when the metadata topic was not read
within ``remote.log.metadata.initialization.timeout.ms`` (both in
:mod:`proxy.workers.role`); anything else (1 for an unhandled exception, a signal) is a
crash the supervisor restarts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

from proxy.commands.serve import serve_process
from proxy.settings import settings_from_flat
from proxy.workers.role import EXIT_BAD_SETTINGS, EXIT_NOT_INITIALISED, WorkerRole
from storage.config import ConfigError

__all__ = ["main"]


def _stop_when_orphaned() -> None:
    """Block until stdin ends, then drain this worker as SIGTERM does."""
    # The raw descriptor, not sys.stdin: a daemon thread blocked in a buffered reader
    # aborts the interpreter's shutdown.
    while os.read(0, 4096):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _read_line(fd: int) -> bytes:
    """One line from ``fd``, read a byte at a time so nothing after it is consumed."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return bytes(line)


def main() -> int:
    """Serve as one worker; returns the exit code."""
    spec = json.loads(_read_line(0))
    threading.Thread(target=_stop_when_orphaned, name="orphan-watch", daemon=True).start()
    role = WorkerRole(index=spec["index"], count=spec["count"], endpoint=spec["endpoint"])
    try:
        settings = settings_from_flat(spec["settings"])
    except ConfigError as err:
        print(f"tierproxy serve (worker {role.index}): {err}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    code = serve_process(settings, worker=role)
    return EXIT_NOT_INITIALISED if code == 1 else code


if __name__ == "__main__":
    sys.exit(main())
