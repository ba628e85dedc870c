"""One report of tierproxy's performance questions, with the machine it ran on.

``make bench`` runs this module, which runs each benchmark script in turn (each measures its
own baseline in the same run, alternating, and saves JSON and a PNG plot under
``bench/results/``), then writes ``bench/results/REPORT.md``: the headline ratios and absolute
figures from each JSON, each benchmark's own tables, the machine (CPU model, cores, memory,
Python, Java, Spark, broker and S3 kind) and links to the plots. A script that is missing,
fails or times out is reported as such; the report is written in every case.

Run::

    .venv/bin/python -m bench.report                     # all of them, each with its defaults
    .venv/bin/python -m bench.report --only pipeline --args pipeline="--gib 2"
    .venv/bin/python -m bench.pipeline --help            # a benchmark's own flags
    .venv/bin/python -m bench.report --no-run            # rebuild REPORT.md from the JSON

The benchmarks (their docstrings give the exact question and method):

- ``bench/passthrough.py``: consumer and producer through the proxy vs directly to the broker;
- ``bench/catchup.py``: catch-up consumers reading the remote tier through the proxy vs the
  broker's local log;
- ``bench/native.py``: tierproxy's remote reads vs Kafka's native tiered storage and its
  local log, and a tail consumer's latency while catch-up readers use each remote tier;
- ``bench/pipeline.py``: the Spark tiering pipeline vs a raw Fetch of the same data, and the
  cost of an idle cycle;
- ``bench/encoded_tier.py``: what compression and encryption at rest cost the pipeline and
  catch-up reads, and GETs per GiB on every backend;
- ``bench/hostile.py``: malformed input at the proxy while consumers read tiered data;
- ``bench/scale.py``: one worker vs several on one host, and memory with idle connections.

Servers come from the environment as in the tests (``KAFKA_BOOTSTRAP`` > ``KAFKA_HOME`` >
embedded Apache Kafka 4.x; ``S3_ENDPOINT`` > embedded SeaweedFS); ``bench/native.py`` always
starts its own Kafka with native tiered storage, and tiers tierproxy's copy to a local
directory (like Kafka's LocalTieredStorage) unless given ``--tier s3``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
REPORT = RESULTS / "REPORT.md"

# A benchmark that has not finished in an hour on two cores is stuck, not slow.
DEFAULT_TIMEOUT_S = 3600.0
# After SIGINT a benchmark stops the servers it started (by PID, in finally blocks).
_INTERRUPT_GRACE_S = 60.0
_LOG_TAIL_LINES = 25
_TABLE_MAX_ROWS = 30
# Figures where lower is better (times, latencies, memory, CPU cost); the rest (ratios,
# throughput) are better higher. Used only to print a goal as "<= x" or ">= x".
_LOWER_IS_BETTER = re.compile(r"seconds|_s$|_ms|latency|p50|p99|rss|overhead|cpu|fetches")


@dataclass(frozen=True, slots=True, kw_only=True)
class Benchmark:
    """One benchmark script and the question it answers."""

    name: str
    question: str
    goals: str
    """The performance goals its issue set, for the reader to hold the figures against."""

    @property
    def script(self) -> Path:
        return BENCH_DIR / f"{self.name}.py"

    @property
    def result_path(self) -> Path:
        return RESULTS / f"{self.name}.json"

    @property
    def plot_path(self) -> Path:
        return RESULTS / f"{self.name}.png"

    @property
    def log_path(self) -> Path:
        return RESULTS / f"{self.name}.log"


BENCHMARKS = (
    Benchmark(
        name="passthrough",
        question="Pass-through: consume and produce through the proxy vs directly to the broker.",
        goals="consumer throughput ≥ 0.90 x direct with 1 KiB records (raw Fetch v12 and v17, "
        "librdkafka, the Java consumer); proxy ≥ 1.0 x a plain TCP forwarder (Kroxylicious is "
        "not on this Maven Central mirror); proxy ≤ 0.3 CPU-s per GiB; produce p99 overhead "
        "≤ 1 ms at moderate load; proxy RSS ≤ 200 MiB with 200 idle connections.",
    ),
    Benchmark(
        name="catchup",
        question="Tiered reads: catch-up consumers reading the remote tier through the proxy "
        "vs the broker's local log.",
        goals="remote ≥ 0.8 x local for one consumer; aggregate throughput scaling with the "
        "number of consumers; tail consumers' p99 fetch latency under catch-up load reported "
        "(its goal is compared with native tiered storage in native); proxy ≤ 1.5 CPU-s per "
        "GiB from the remote tier; with 20 and 50 ms to "
        "an object-storage GET's first byte ≥ 0.7 x undelayed; ≤ 300 GETs per GiB.",
    ),
    Benchmark(
        name="pipeline",
        question="Tiering pipeline: a Spark cycle copying a backlog to S3 vs a raw Fetch of the "
        "same bytes, and the cost of an idle cycle.",
        goals="pipeline ≥ 0.7 x raw fetch; an idle cycle under 2 s for 1,000 partitions.",
    ),
    Benchmark(
        name="native",
        question="Remote tiers side by side, the catch-up matrix (1 and 8 partitions; raw "
        "Fetch v12, librdkafka, the Java consumer; 1 and 8 MiB fetches): (a) Kafka's native "
        "tiered storage (LocalTieredStorage), (b) tierproxy's remote tier through the proxy, "
        "(c) Kafka's local log, on one broker.",
        goals="b/c ≥ 0.8 and b/a ≥ 1.5 in every cell; proxy ≤ 1.5 CPU-s per GiB; with 8 "
        "partitions Fetch requests per GiB b/c ≤ 1.1; CPU-s per GiB of broker, proxy and "
        "client reported; a tail consumer's p99 under 4 catch-up readers over its p99 alone, "
        "tierproxy's ratio ≤ native tiered storage's.",
    ),
    Benchmark(
        name="native_copier",
        question="Copying to the remote tier: the tiering pipeline vs Kafka's native copier "
        "(RemoteLogManager with LocalTieredStorage), per partition, on one broker.",
        goals="pipeline MB/s per partition ≥ 1.0 x the native copier's; CPU-s per GiB of the "
        "pipeline's processes and of the broker reported.",
    ),
    Benchmark(
        name="encoded_tier",
        question="Compression and encryption at rest: the pipeline's CPU, catch-up through the "
        "proxy from an encoded tier vs a plain one, and object-storage GETs per GiB on every "
        "backend (local directory, SeaweedFS, fake-gcs-server, Azurite).",
        goals="pipeline CPU-s per GiB compressed and encrypted ≤ 1.5 x plain; catch-up from "
        "an encrypted (and compressed) tier ≥ 0.8 x a plain one; ≤ 300 GETs per GiB on every "
        "backend.",
    ),
    Benchmark(
        name="hostile",
        question="Hostile input: tens of thousands of malformed frames at the proxy while "
        "consumers read tiered data through it.",
        goals="the proxy stays up; every consumer gets every record exactly once; RSS "
        "bounded (before vs after); one log line per bad connection, rate-limited.",
    ),
    Benchmark(
        name="scale",
        question="Workers on one host: aggregate MiB/s of 8 consumers direct, through one "
        "worker and through two (pass-through and remote catch-up), and RSS per worker with "
        "2,000 idle connections.",
        goals="RSS ≤ 300 MiB per worker with 2,000 idle connections; throughput that grows "
        "with workers where cores are free (not on a 2-core machine that also runs the broker "
        "and the consumers); CPU-s per GiB reported.",
    ),
    Benchmark(
        name="scale_metadata",
        question="A large remote log metadata topic: `tierproxy serve` start to /readyz 200 "
        "from the topic alone and from the snapshot it wrote, with 100,000 segments over "
        "2,000 partitions and 1,000,000, and the proxy's RSS per segment.",
        goals="ready ≤ 3 s at 100,000 segments and ≤ 10 s at 1,000,000 from the snapshot; "
        "≤ 100 B of RSS per segment.",
    ),
    Benchmark(
        name="spark_source",
        question='Spark: a full-history scan with format("tierproxy") from the remote tier vs '
        "Spark's Kafka source through the broker, in the same Spark.",
        goals='format("tierproxy") ≥ 2 x format("kafka") in MB/s; CPU-s per GiB reported for both.',
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What became of one benchmark in this report."""

    benchmark: Benchmark
    status: str
    """``ok``, ``missing`` (no script), ``failed``, ``timed out``, or ``no result``."""
    detail: str = ""
    command: str = ""
    seconds: float | None = None
    result: Mapping[str, Any] | None = None
    result_time: float | None = None
    log_tail: tuple[str, ...] = field(default=())


def _load(path: Path) -> Mapping[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tail(path: Path) -> tuple[str, ...]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ()
    return tuple(lines[-_LOG_TAIL_LINES:])


def _pump(source: Any, log: Any) -> None:
    """Copy the benchmark's output to the console and its log as it comes."""
    for line in source:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(_INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_benchmark(benchmark: Benchmark, extra_args: Sequence[str], timeout_s: float) -> Outcome:
    """Run one benchmark script to completion (or its timeout) and collect its JSON."""
    argv = [sys.executable, "-m", f"bench.{benchmark.name}", *extra_args]
    command = shlex.join(["python", "-m", f"bench.{benchmark.name}", *extra_args])
    if not benchmark.script.exists():
        return Outcome(
            benchmark=benchmark,
            status="missing",
            command=command,
            detail=f"{benchmark.script.relative_to(ROOT)} does not exist",
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    print(f"\n=== {command}", flush=True)
    started = time.time()
    with benchmark.log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        pump = threading.Thread(target=_pump, args=(process.stdout, log), daemon=True)
        pump.start()
        timed_out = False
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(process)
        except KeyboardInterrupt:
            _stop(process)
            raise
        finally:
            pump.join()
            if process.stdout is not None:
                process.stdout.close()
    seconds = time.time() - started
    tail = _tail(benchmark.log_path)
    if timed_out:
        return Outcome(
            benchmark=benchmark,
            status="timed out",
            command=command,
            seconds=seconds,
            detail=f"stopped after {timeout_s:.0f} s",
            log_tail=tail,
        )
    if process.returncode != 0:
        return Outcome(
            benchmark=benchmark,
            status="failed",
            command=command,
            seconds=seconds,
            detail=f"exit code {process.returncode}",
            log_tail=tail,
        )
    fresh = benchmark.result_path.exists() and benchmark.result_path.stat().st_mtime >= started
    result = _load(benchmark.result_path) if fresh else None
    if result is None:
        return Outcome(
            benchmark=benchmark,
            status="no result",
            command=command,
            seconds=seconds,
            detail=f"it exited 0 but wrote no readable {benchmark.result_path.name}",
            log_tail=tail,
        )
    # The JSON holds everything the log said; logs stay only to explain failures.
    benchmark.log_path.unlink()
    return Outcome(
        benchmark=benchmark,
        status="ok",
        command=command,
        seconds=seconds,
        result=result,
        result_time=benchmark.result_path.stat().st_mtime,
    )


def collect_existing(benchmark: Benchmark) -> Outcome:
    """The benchmark's saved JSON, without running it (``--no-run``)."""
    if not benchmark.script.exists():
        return Outcome(
            benchmark=benchmark,
            status="missing",
            detail=f"{benchmark.script.relative_to(ROOT)} does not exist",
        )
    result = _load(benchmark.result_path)
    if result is None:
        return Outcome(
            benchmark=benchmark,
            status="no result",
            detail=f"no readable {benchmark.result_path.name}: run it without --no-run",
        )
    return Outcome(
        benchmark=benchmark,
        status="ok",
        result=result,
        result_time=benchmark.result_path.stat().st_mtime,
    )


# -- the machine ---------------------------------------------------------------------------


def _first_match(path: str, pattern: str) -> str | None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.search(pattern, text, re.MULTILINE)
    return found.group(1).strip() if found else None


def _java_version() -> str:
    try:
        done = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    first = (done.stderr or done.stdout).strip().splitlines()
    return first[0] if first else "unknown"


def _spark_version() -> str:
    try:
        from pyspark.version import __version__
    except ImportError:
        return "not installed"
    return str(__version__)


def _servers_from_env(environ: Mapping[str, str]) -> tuple[str, str]:
    """Which broker and S3 server the benchmarks use, by the harness's precedence
    (:func:`proxy.embedded.broker_from_env`, whose servers would create work directories)."""
    from proxy.embedded.kafka_jars import KAFKA_4
    from proxy.embedded.s3 import s3_info_from_env

    if bootstrap := environ.get("KAFKA_BOOTSTRAP"):
        broker = f"external broker at KAFKA_BOOTSTRAP={bootstrap}"
    elif kafka_home := environ.get("KAFKA_HOME"):
        broker = f"Apache Kafka (KRaft) from KAFKA_HOME={kafka_home}"
    else:
        broker = f"embedded Apache Kafka {KAFKA_4} (KRaft, jars from Maven Central)"
    s3 = s3_info_from_env(environ)
    return broker, f"S3_ENDPOINT={s3.endpoint_url}" if s3 is not None else "embedded SeaweedFS"


def machine_info(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The facts about this machine that a reader needs to weigh the figures."""
    mem_kib = _first_match("/proc/meminfo", r"^MemTotal:\s+(\d+)")
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    broker, s3 = _servers_from_env(environ)
    return {
        "CPU": _first_match("/proc/cpuinfo", r"^model name\s*:\s*(.+)$") or platform.processor(),
        "cores": str(os.cpu_count()),
        "memory": f"{int(mem_kib) / 1024**2:.1f} GiB" if mem_kib else "unknown",
        "load average (1, 5, 15 min) at start": load,
        "OS": platform.platform(),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "Java": _java_version(),
        "Spark (pyspark)": _spark_version(),
        "broker": broker,
        "S3": s3,
    }


# -- rendering -----------------------------------------------------------------------------


def fmt(value: Any) -> str:
    """A figure with as many digits as a noisy two-core machine deserves."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _cell(value: Any) -> str:
    return fmt(value).replace("|", "\\|").replace("\n", " ")


def _scalars(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Scalar leaves of nested mappings as dotted paths (lists are tables, not leaves)."""
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _scalars(value, f"{path}.")
        elif not isinstance(value, list):
            yield path, value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _goal_for(path: str, goals: Mapping[str, Any]) -> str:
    """The goal stated in the JSON for this figure (``goal_ratio`` for ``median_ratio``)."""
    leaf = path.rsplit(".", 1)[-1]
    named = {key.rsplit(".", 1)[-1].removeprefix("goal_"): goal for key, goal in goals.items()}
    # The goal named exactly after the figure wins over one whose name merely ends it.
    matches = [suffix for suffix in named if suffix == leaf]
    matches += [suffix for suffix in named if leaf.endswith(f"_{suffix}")]
    if not matches:
        return ""
    suffix = matches[0]
    return f"{'≤' if _LOWER_IS_BETTER.search(suffix) else '≥'} {fmt(named[suffix])}"


def split_figures(
    result: Mapping[str, Any],
) -> tuple[list[tuple[str, Any, str]], list[tuple[str, Any, str]], list[tuple[str, Any]]]:
    """(ratios, absolute figures, parameters) of a result, each figure with its goal.

    Ratios are the numbers whose name says ratio; goals (``goal_*``) annotate the figure they
    name; other numbers are absolute figures when their name carries a unit of measurement and
    parameters (sizes, counts, server kinds) otherwise.
    """
    leaves = list(_scalars(result))
    goals = {path: value for path, value in leaves if "goal" in path.rsplit(".", 1)[-1]}
    ratios: list[tuple[str, Any, str]] = []
    figures: list[tuple[str, Any, str]] = []
    parameters: list[tuple[str, Any]] = []
    unit = re.compile(r"per_s|_s$|seconds|_ms|latency|p50|p99|rss|cpu_s|throughput|mb_s|mib_s")
    for path, value in leaves:
        if path in goals:
            continue
        leaf = path.rsplit(".", 1)[-1]
        if _is_number(value) and "ratio" in leaf:
            ratios.append((path, value, _goal_for(path, goals)))
        elif _is_number(value) and unit.search(leaf):
            figures.append((path, value, _goal_for(path, goals)))
        else:
            parameters.append((path, value))
    return ratios, figures, parameters


def _table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Rows of scalars as a Markdown table; a dotted prefix shared by every column (such as
    ``summary.``) is left out of the header."""
    columns: list[str] = []
    for row in rows:
        columns.extend(
            key for key, value in row.items() if key not in columns and not _nested(value)
        )
    named = [column for column in columns if column]
    prefix = named[0].split(".", 1)[0] + "." if named and "." in named[0] else ""
    shared = prefix and all(column.startswith(prefix) for column in named)
    header = [column.removeprefix(prefix) if shared else column for column in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(columns)]
    for row in rows[:_TABLE_MAX_ROWS]:
        lines.append("| " + " | ".join(_cell(row.get(column, "")) for column in columns) + " |")
    if len(rows) > _TABLE_MAX_ROWS:
        lines.append(f"\n({len(rows) - _TABLE_MAX_ROWS} more rows in the JSON)")
    return lines


def _nested(value: Any) -> bool:
    return isinstance(value, (Mapping, list))


def _figures(data: Mapping[str, Any]) -> list[str]:
    """Parameters as a sentence, then the figures (ratios first) as a table with goals."""
    ratios, figures, parameters = split_figures(data)
    lines = []
    if parameters:
        lines += ["", "Parameters: " + ", ".join(f"{k} = {fmt(v)}" for k, v in parameters) + "."]
    if ratios or figures:
        lines += ["", "| figure | value | goal |", "| --- | --- | --- |"]
        lines += [f"| `{path}` | {_cell(value)} | {goal} |" for path, value, goal in ratios]
        lines += [f"| `{path}` | {_cell(value)} | {goal} |" for path, value, goal in figures]
    return lines


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "unknown"
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _section(outcome: Outcome) -> list[str]:
    benchmark = outcome.benchmark
    lines = [
        "",
        f"## {benchmark.name}",
        "",
        benchmark.question,
        "",
        f"Goals: {benchmark.goals}",
        "",
    ]
    if outcome.command:
        lines.append(f"Command: `{outcome.command}`" + _duration(outcome.seconds))
        lines.append("")
    if outcome.result is None:
        lines.append(f"**Not measured: {outcome.status}** ({outcome.detail}).")
        if outcome.log_tail:
            lines += ["", f"Last lines of [{benchmark.log_path.name}]({benchmark.log_path.name}):"]
            lines += ["", "```"]
            lines += [*outcome.log_tail, "```"]
        return lines
    result = outcome.result
    lines.append(
        f"Result file `{benchmark.result_path.name}`, written {_when(outcome.result_time)}."
    )
    lines += _figures({key: value for key, value in result.items() if not _nested(value)})
    for key, value in result.items():
        if isinstance(value, Mapping) and value:
            lines += ["", f"`{key}`:"]
            if all(isinstance(item, Mapping) for item in value.values()):
                rows = [{"": name, **dict(_scalars(item))} for name, item in value.items()]
                lines += ["", *_table(rows)]
            else:
                lines += _figures(value)
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            lines += ["", f"`{key}`:", "", *_table([dict(_scalars(item)) for item in value])]
        elif isinstance(value, list) and value and all(_is_number(v) for v in value):
            lines += ["", f"`{key}`: " + ", ".join(fmt(item) for item in value)]
    if benchmark.plot_path.exists():
        lines += ["", f"![{benchmark.name}]({benchmark.plot_path.name})"]
    return lines


def _duration(seconds: float | None) -> str:
    return f" (took {seconds / 60:.1f} min)" if seconds is not None else ""


def headline_ratios(result: Mapping[str, Any] | None) -> list[tuple[str, Any, str]]:
    """The ratios of a result for the headline: those under its ``headline`` key if it has
    one (a benchmark with many cells summarises them there), else all of them."""
    if result is None:
        return []
    chosen = result.get("headline")
    return split_figures(chosen if isinstance(chosen, Mapping) else result)[0]


def _headline(outcomes: Sequence[Outcome]) -> list[str]:
    lines = ["| benchmark | status | ratios (goal) |", "| --- | --- | --- |"]
    for outcome in outcomes:
        ratios = headline_ratios(outcome.result)
        text = "; ".join(
            f"{path.replace('.', ' / ')}: **{fmt(value)}**" + (f" (goal {goal})" if goal else "")
            for path, value, goal in ratios
        )
        name = outcome.benchmark.name
        status = outcome.status if outcome.result is not None else f"**{outcome.status}**"
        lines.append(f"| [{name}](#{name}) | {status} | {text} |")
    return lines


def render_report(
    outcomes: Sequence[Outcome], machine: Mapping[str, str], generated: datetime.datetime
) -> str:
    """REPORT.md for these outcomes."""
    lines = [
        "# tierproxy benchmark report",
        "",
        f"Generated {generated.strftime('%Y-%m-%d %H:%M UTC')} by `python -m bench.report` "
        "(`make bench`). Each benchmark measures its baseline in the same run, alternating "
        "baseline and candidate, and reports medians; ratios are candidate / baseline. "
        "Everything (broker, S3 server, proxy, Spark, clients) shares the machine below, so "
        "absolute figures vary from run to run more than the ratios do.",
        "",
        "## Headline",
        "",
        *_headline(outcomes),
        "",
        "## Machine",
        "",
        "| | |",
        "| --- | --- |",
        *(f"| {key} | {_cell(value)} |" for key, value in machine.items()),
    ]
    for outcome in outcomes:
        lines += _section(outcome)
    others = sorted(
        path
        for path in RESULTS.glob("*.json")
        if path.stem not in {outcome.benchmark.name for outcome in outcomes}
    )
    if others:
        lines += [
            "",
            "## Other saved results",
            "",
            "Earlier or larger runs saved next to these (not re-run by this report):",
            "",
        ]
        lines += [_other_result(path) for path in others]
    return "\n".join(lines) + "\n"


def _other_result(path: Path) -> str:
    """One line for a saved result: links, its ratios, and its date."""
    plot = path.with_suffix(".png")
    text = f"- [{path.name}]({path.name})"
    if plot.exists():
        text += f", [plot]({plot.name})"
    ratios = headline_ratios(_load(path))
    if ratios:
        text += ": " + "; ".join(
            f"{name.replace('.', ' / ')} **{fmt(value)}**" + (f" (goal {goal})" if goal else "")
            for name, value, goal in ratios
        )
    return text + f" ({_when(path.stat().st_mtime)})"


def _parse_args_option(values: Sequence[str]) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    names = {benchmark.name for benchmark in BENCHMARKS}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or name not in names:
            raise SystemExit(f"--args wants NAME=ARGS with NAME in {sorted(names)}, not {value!r}")
        parsed[name] = shlex.split(text)
    return parsed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks and write the report; exit code 1 if any could not be measured."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = [benchmark.name for benchmark in BENCHMARKS]
    parser.add_argument("--only", nargs="+", choices=names, help="run only these")
    parser.add_argument(
        "--args",
        action="append",
        default=[],
        metavar='NAME="ARGS"',
        help="extra command-line arguments for one benchmark (repeatable)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="stop a benchmark (SIGINT, then SIGKILL) after this long",
    )
    parser.add_argument(
        "--no-run", action="store_true", help="only rebuild REPORT.md from the saved JSON"
    )
    parser.add_argument("--output", type=Path, default=REPORT, help="where to write the report")
    args = parser.parse_args(argv)
    extra = _parse_args_option(args.args)
    machine = machine_info()
    outcomes: list[Outcome] = []
    for benchmark in BENCHMARKS:
        skipped = args.only is not None and benchmark.name not in args.only
        if args.no_run or skipped:
            outcomes.append(collect_existing(benchmark))
        else:
            outcomes.append(run_benchmark(benchmark, extra.get(benchmark.name, []), args.timeout))
    generated = datetime.datetime.now(tz=datetime.UTC)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render_report(outcomes, machine, generated), encoding="utf-8")
    print(f"\nwrote {args.output}")
    for outcome in outcomes:
        ratios = headline_ratios(outcome.result)
        figures = ", ".join(f"{path} {fmt(value)}" for path, value, _ in ratios)
        suffix = f" ({figures})" if figures else ""
        print(f"  {outcome.benchmark.name}: {outcome.status}{suffix}")
    return 0 if all(outcome.result is not None for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
