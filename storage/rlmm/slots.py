"""Snapshot slots: every process that keeps metadata snapshots writes a directory of its own.

Rules of this file:

- A snapshot directory (``remote.log.metadata.snapshot.dir``, or ``auto``'s
  ``./tierproxy-state/<command>/<topic>``) is shared by every process started with the same
  settings: the workers of one ``serve``, several instances on one host, a restarted process
  whose predecessor has not exited yet. Snapshots and committed offsets are only consistent
  when one process writes them: another process's older snapshot of a partition beside this
  one's newer committed offsets makes a restart skip records that no snapshot holds, for
  good.
- So the directory holds numbered *slots*, ``<dir>/0``, ``<dir>/1``, ...; a process takes
  the lowest slot whose lock file (``<slot>/lock``) it can lock with ``fcntl.flock``
  (exclusive, non-blocking) and holds the lock until it closes the slot or exits. The
  kernel drops the lock of a process that dies, however it dies, so a slot is never left
  taken; a restarted process usually gets its old slot back and restarts warm.
- Every slot holds a whole, self-consistent snapshot of the same topic (bound to it by
  :mod:`storage.rlmm.snapshot`), so any free slot serves any process.
- The lock file holds the owner's process id, for the line that names who holds a slot.
- ``flock`` locks are local to a host: a snapshot directory on a network file system
  shared between hosts is not supported (each host must have its own).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path
from typing import IO, Final

from storage.config import ConfigError
from storage.log_event import event

__all__ = ["LOCK_FILE", "MAX_SLOTS", "SnapshotSlot", "claim_slot"]

log = logging.getLogger(__name__)

LOCK_FILE: Final = "lock"
MAX_SLOTS: Final = 256
"""Slots tried before giving up: far more processes than one host runs against one metadata
topic (a worker per core, a few instances), so reaching it means processes are being
started in a loop, which should stop with a clear error rather than fill the disk with
snapshot copies."""


class SnapshotSlot:
    """One slot of a snapshot directory, locked by this process until :meth:`release`."""

    def __init__(self, path: Path, number: int, lock: IO[str], held: tuple[str, ...] = ()) -> None:
        self.path = path
        """The directory this process writes its snapshots and committed offsets to."""
        self.number = number
        self.held = held
        """The lower slots other processes held when this one was taken (``DIR (pid N)``)."""
        self._lock: IO[str] | None = lock

    def describe(self) -> str:
        """One line for the log: this slot, and which lower ones other processes hold."""
        line = f"metadata snapshots of this process go to {self.path}"
        if not self.held:
            return line
        held = ", ".join(self.held) if len(self.held) <= 3 else f"{len(self.held)} slots are"
        return f"{line}: {held} held by another process"

    def release(self) -> None:
        """Unlock the slot (idempotent); another process may take it from now on."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # closing the only descriptor releases the flock


def claim_slot(directory: Path, *, max_slots: int = MAX_SLOTS) -> SnapshotSlot:
    """Lock the lowest free slot of ``directory`` (created if missing) for this process.

    :raises ConfigError: the directory cannot be created or locked in, or ``max_slots``
        slots are all held by running processes.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"cannot use the metadata snapshot directory {directory}: {err} "
            "(check remote.log.metadata.snapshot.dir or TIERPROXY_STATE_DIR)"
        ) from err
    held: list[str] = []
    for number in range(max_slots):
        path = directory / str(number)
        lock = _try_lock(path)
        if lock is None:
            held.append(f"{path} (pid {_holder(path)})")
            continue
        slot = SnapshotSlot(path, number, lock, tuple(held))
        if held:
            event(log, logging.INFO, "metadata.snapshots.slot", msg=slot.describe(), slot=number)
        return slot
    raise ConfigError(
        f"all {max_slots} metadata snapshot slots of {directory} are held by running "
        "processes; stop some, or give this one its own remote.log.metadata.snapshot.dir"
    )


def _try_lock(path: Path) -> IO[str] | None:
    """The slot's lock file, locked by this process; ``None`` if another holds it.

    :raises ConfigError: the slot or its lock file cannot be created or locked.
    """
    try:
        path.mkdir(exist_ok=True)
        lock = open(path / LOCK_FILE, "a+", encoding="ascii")  # noqa: SIM115 (held until release)
    except OSError as err:
        raise ConfigError(f"cannot use the metadata snapshot directory {path}: {err}") from err
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    except OSError as err:
        lock.close()
        raise ConfigError(f"cannot lock {path / LOCK_FILE}: {err}") from err
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def _holder(path: Path) -> str:
    """The process id a held slot's lock file names, or ``?``."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return (path / LOCK_FILE).read_text(encoding="ascii").strip() or "?"
    return "?"
