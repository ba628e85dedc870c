"""Where a benchmarked process spends its CPU: py-spy samples and a flame summary.

Every optimisation of the serving path is justified by a profile. A benchmark run with
``--profile DIR`` samples the proxy process with py-spy while its rounds run (``py-spy record
--format raw``: one collapsed stack per line with its sample count; idle threads are left out,
so waiting in the event loop costs nothing) and prints the functions with the most samples, by
own time and including callees. Python frames only: py-spy's ``--native`` fails on this
machine, so time inside uvloop's C code (socket reads and writes, buffer copies) shows as the
own time of the Python frame that called into it (``Runner.run`` for reads, the callback that
wrote for writes). Needs ``py-spy`` on PATH (a dev dependency) and the right to ptrace the
process (root, or ``kernel.yama.ptrace_scope`` 0).

Summarise a saved profile::

    .venv/bin/python -m bench.profile /tmp/profile/passthrough.txt
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FlameSummary", "record", "summarise"]

SAMPLE_RATE = 200


@contextlib.contextmanager
def record(pid: int, path: Path | None) -> Iterator[None]:
    """Sample ``pid`` into ``path`` (collapsed stacks) while the block runs; nothing if
    ``path`` is ``None``.

    :raises RuntimeError: py-spy is not installed.
    """
    if path is None:
        yield
        return
    spy = shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("--profile needs py-spy (pip install py-spy)")
    path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(SAMPLE_RATE),
         "--output", str(path), "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)  # attached before the rounds start
    try:
        yield
    finally:
        process.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
        process.wait(timeout=30)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlameSummary:
    """Share of samples per function: where the time went (``own``) and below it
    (``inclusive``), both as fractions of all samples."""

    samples: int
    own: list[tuple[str, float]]
    inclusive: list[tuple[str, float]]

    def lines(self) -> list[str]:
        out = [f"{self.samples} samples; top functions by own time:"]
        out += [f"  {share:6.1%}  {name}" for name, share in self.own]
        out.append("top functions including callees:")
        out += [f"  {share:6.1%}  {name}" for name, share in self.inclusive]
        return out


def summarise(path: Path, top: int = 15) -> FlameSummary:
    """The functions with the most samples in a py-spy raw (collapsed stacks) file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    text = path.read_text(encoding="utf-8") if path.exists() else ""  # py-spy failed: empty
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return FlameSummary(
        samples=total,
        own=[(name, n / total) for name, n in own.most_common(top)] if total else [],
        inclusive=[(name, n / total) for name, n in inclusive.most_common(top)] if total else [],
    )


def _short(frame: str) -> str:
    """``function (path/to/module.py:123)`` as ``function (module.py)``: lines differ per
    sample, functions do not."""
    name, _, where = frame.partition(" (")
    module = where.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({module})" if module else name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path, help="a py-spy --format raw file")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print("\n".join(summarise(args.profile, args.top).lines()))


if __name__ == "__main__":
    main()
