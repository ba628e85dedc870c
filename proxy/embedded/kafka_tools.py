"""Kafka's own Java tools (console consumer, perf tests, DeleteRecordsCommand, DumpLogSegments)
run by class name from the same jars as the embedded brokers.

Tests, the demo and the benchmarks use Kafka's tools as real clients and as references: what
Kafka's own tooling does and reads is the yardstick for the proxy and the pipeline. A tool
runs as ``java -cp '<libs>/*' <main class> args...`` with a small heap and quiet logging, and
its output is returned; a failure quotes the tool's own words.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Final

from proxy.embedded.kafka_jars import KafkaDistribution

__all__ = ["KafkaToolError", "ToolRun", "run_tool"]

_OUTPUT_QUOTED: Final = 4000
_QUIET: Final = ("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",)


class KafkaToolError(RuntimeError):
    """A Kafka tool failed to start, timed out, or exited with an error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRun:
    """What a tool printed."""

    stdout: str
    stderr: str


def run_tool(
    distribution: KafkaDistribution,
    main_class: str,
    *args: str,
    timeout_s: float = 120.0,
    heap: str = "-Xmx256m",
    check: bool = True,
) -> ToolRun:
    """Run ``main_class`` of ``distribution`` with ``args``; its output.

    :raises KafkaToolError: it could not start, ran past ``timeout_s``, or (with ``check``)
        exited with a non-zero status; the message quotes its output.
    """
    java, _heap, *rest = distribution.java(main_class, *args, heap=heap)
    argv = [java, heap, *_QUIET, *rest]
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as err:
        output = f"{_tail(err.stdout)}{_tail(err.stderr)}"
        raise KafkaToolError(f"{main_class} ran longer than {timeout_s:.0f} s:\n{output}") from err
    except OSError as err:
        raise KafkaToolError(f"cannot run {main_class}: {err}") from err
    if check and result.returncode != 0:  # checked here to quote the tool's own output
        raise KafkaToolError(
            f"{main_class} exited with {result.returncode}:\n"
            f"{_tail(result.stdout)}{_tail(result.stderr)}"
        )
    return ToolRun(stdout=result.stdout, stderr=result.stderr)


def _tail(output: str | bytes | None) -> str:
    if output is None:
        return ""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output
    return text[-_OUTPUT_QUOTED:]
