"""Spark's JVM writes to this process's stderr; one line of it is noise we cannot turn off.

Spark 4's launcher always adds ``--add-modules=jdk.incubator.vector``, and the JVM then
prints ``WARNING: Using incubator modules: jdk.incubator.vector`` before any logging exists
(no flag or log level silences it). While the JVM is launched, file descriptor 2 is a pipe:
the JVM inherits it for its whole life, and a thread passes every line on to the real
stderr except those holding ``noise``. Our own fd 2 is restored at once, so only the JVM
(and the Python workers it starts) write through the filter; it ends when the JVM exits.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

__all__ = ["stderr_without"]


@contextlib.contextmanager
def stderr_without(noise: bytes) -> Iterator[None]:
    """Child processes started inside this block get a stderr without lines holding
    ``noise``; everything else reaches this process's stderr unchanged."""
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    original = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    passed_on = os.dup(original)

    def pump() -> None:
        with os.fdopen(read_end, "rb") as pipe, os.fdopen(passed_on, "wb", buffering=0) as out:
            for line in pipe:
                if noise not in line:
                    out.write(line)

    threading.Thread(target=pump, name="jvm-stderr", daemon=True).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(original, 2)
        os.close(original)
