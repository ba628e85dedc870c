"""CPU seconds of a Kafka broker's threads by role, from ``/proc`` and one thread dump.

A process's CPU time says how much a broker spent, not on what. Its threads' names do:
Kafka's network threads (``data-plane-kafka-network-thread-...``) move the bytes (sendfile
for a Fetch), its request handler threads (``data-plane-kafka-request-handler-N``) serve
each request, and the JVM's compiler threads compile what the broker runs for the first
times. ``/proc/<pid>/task/<tid>/comm`` cuts names at 15 characters, which leaves the first
two both ``data-plane-kafk``, so the full names come from one ``jstack`` of the broker
(its ``nid`` is the thread id), taken once before anything is measured: attaching a tool
to a JVM costs that JVM a safepoint, too much to do between samples.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["ROLES", "JvmThreads"]

ROLES = ("network", "handlers", "jit", "other")
_THREAD = re.compile(r'^"(?P<name>[^"]+)".*?\bnid=(?P<nid>0x[0-9a-f]+)', re.MULTILINE)


def _role(name: str) -> str:
    if "network-thread" in name:
        return "network"
    if "request-handler" in name:
        return "handlers"
    if "CompilerThre" in name:
        return "jit"
    return "other"


def _jstack_for(pid: int) -> str | None:
    """The ``jstack`` of the JDK the process runs on (its own version attaches best)."""
    try:
        java = Path(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None
    if java.name != "java":
        return None
    beside = java.with_name("jstack")
    return str(beside) if beside.exists() else shutil.which("jstack")


def thread_names(pid: int) -> dict[int, str]:
    """Thread id to full thread name, from one ``jstack`` of ``pid`` (empty if none)."""
    jstack = _jstack_for(pid)
    if jstack is None:
        return {}
    try:
        dump = subprocess.run(
            [jstack, str(pid)], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(m["nid"], 16): m["name"] for m in _THREAD.finditer(dump)}


class JvmThreads:
    """CPU seconds of one JVM's live threads by role (see :data:`ROLES`)."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._names = thread_names(pid)
        self._tick = os.sysconf("SC_CLK_TCK")

    def cpu_by_role(self) -> dict[str, float]:
        found = dict.fromkeys(ROLES, 0.0)
        try:
            tasks = list(Path(f"/proc/{self._pid}/task").iterdir())
        except OSError:
            return found
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat.rsplit(")", 1)[1].split()
            name = self._names.get(int(task.name), comm)
            found[_role(name)] += (int(fields[11]) + int(fields[12])) / self._tick
        return found
