"""bench.report: figures sorted into ratios, absolutes and parameters; failures reported."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

import bench.report
from bench.report import (
    BENCHMARKS,
    Benchmark,
    Outcome,
    collect_existing,
    fmt,
    machine_info,
    main,
    render_report,
    run_benchmark,
    split_figures,
)
from proxy.embedded.kafka_jars import KAFKA_4

PIPELINE_LIKE = {
    "broker": "tansu",
    "partitions": 8,
    "pairs": [
        {"raw_mb_s": 300.0, "pipeline_mb_s": 120.0, "ratio": 0.4},
        {"raw_mb_s": 310.0, "pipeline_mb_s": 130.0, "ratio": 0.42},
    ],
    "median_raw_mb_s": 305.0,
    "median_ratio": 0.41,
    "goal_ratio": 0.7,
    "idle_seconds": [1.2, 1.3],
    "median_idle_seconds": 1.25,
    "goal_idle_seconds": 2.0,
    "latency": {"p99_ms": 1.5, "goal_p99_ms": 1.0},
}
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_split_figures_pairs_each_figure_with_its_goal() -> None:
    ratios, figures, parameters = split_figures(PIPELINE_LIKE)
    assert ratios == [("median_ratio", 0.41, "≥ 0.700")]
    assert ("median_idle_seconds", 1.25, "≤ 2.00") in figures
    assert ("latency.p99_ms", 1.5, "≤ 1.00") in figures
    assert ("median_raw_mb_s", 305.0, "") in figures
    assert parameters == [("broker", "tansu"), ("partitions", 8)]


def test_the_tail_comparison_is_a_headline_ratio_with_its_goal() -> None:
    native = next(b for b in BENCHMARKS if b.name == "native")
    result = {
        "tail": {
            "tierproxy: alone": {"p50_ms": 0.7, "p99_ms": 5.0},
            "tierproxy: 4 catch-up from its remote tier": {
                "p99_ms": 15.0,
                "p99_ratio_to_alone": 3.0,
                "load_mib_per_s": 400.0,
                "proxy_loop_lag_mean_ms": 2.0,
            },
            "p99_ratio_tierproxy_load_to_native_load": 1.2,
            "goal_p99_ratio_tierproxy_load_to_native_load": 1.0,
            "within_native_ratio": False,
        }
    }
    outcome = Outcome(benchmark=native, status="ok", result=result, result_time=0)
    text = render_report([outcome], {}, NOW)
    assert "tail / p99_ratio_tierproxy_load_to_native_load: **1.20** (goal ≤ 1.00)" in text
    row = "| `tierproxy: 4 catch-up from its remote tier.proxy_loop_lag_mean_ms` | 2.00 |  |"
    assert row in text
    assert "within_native_ratio = False" in text


def test_report_has_headline_tables_and_plot_link() -> None:
    outcome = Outcome(benchmark=BENCHMARKS[2], status="ok", result=PIPELINE_LIKE, result_time=0)
    text = render_report([outcome], {"cores": "2"}, NOW)
    assert "| [pipeline](#pipeline) | ok | median_ratio: **0.410** (goal ≥ 0.700) |" in text
    assert "| raw_mb_s | pipeline_mb_s | ratio |" in text
    assert "`idle_seconds`: 1.20, 1.30" in text
    assert "| `p99_ms` | 1.50 | ≤ 1.00 |" in text
    assert "| cores | 2 |" in text


def test_mappings_of_mappings_become_one_table() -> None:
    result = {
        "consumer": {
            "kcat": {"summary": {"direct_mib_per_s": 900.0, "ratio": 0.9}, "rounds": [{}]},
            "librdkafka": {"summary": {"direct_mib_per_s": 370.0, "ratio": 0.95}},
        }
    }
    outcome = Outcome(benchmark=BENCHMARKS[0], status="ok", result=result, result_time=0)
    text = render_report([outcome], {}, NOW)
    assert "|  | direct_mib_per_s | ratio |" in text
    assert "| kcat | 900 | 0.900 |" in text
    assert "consumer / kcat / summary / ratio: **0.900**" in text


def test_failures_are_reported_with_the_log_tail() -> None:
    failed = Outcome(
        benchmark=BENCHMARKS[0],
        status="failed",
        detail="exit code 1",
        command="python -m bench.passthrough",
        seconds=12.0,
        log_tail=("Traceback (most recent call last):", "RuntimeError: broker gone"),
    )
    text = render_report([failed], {}, NOW)
    assert "| [passthrough](#passthrough) | **failed** |  |" in text
    assert "**Not measured: failed** (exit code 1)." in text
    assert "RuntimeError: broker gone" in text


def test_a_missing_script_is_an_outcome_not_an_error() -> None:
    ghost = Benchmark(name="no_such_benchmark", question="?", goals="?")
    outcome = run_benchmark(ghost, [], timeout_s=5)
    assert outcome.status == "missing"
    assert outcome.result is None
    assert collect_existing(ghost).status == "missing"


def test_a_failing_benchmark_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench.report, "RESULTS", tmp_path)
    outcome = run_benchmark(BENCHMARKS[2], ["--no-such-flag"], timeout_s=120)
    assert outcome.status == "failed"
    assert outcome.detail == "exit code 2"
    assert any("unrecognized arguments: --no-such-flag" in line for line in outcome.log_tail)
    assert (tmp_path / "pipeline.log").exists()
    assert not (tmp_path / "pipeline.json").exists()


def test_no_run_writes_a_report_whatever_exists(tmp_path: Path) -> None:
    output = tmp_path / "REPORT.md"
    code = main(["--no-run", "--output", str(output)])
    text = output.read_text(encoding="utf-8")
    assert "## Machine" in text
    for benchmark in BENCHMARKS:
        assert f"## {benchmark.name}" in text
    assert code in (0, 1)


def test_machine_info_names_cores_memory_and_servers() -> None:
    info = machine_info({"KAFKA_BOOTSTRAP": "kafka:9092", "S3_ENDPOINT": "http://minio:9000"})
    assert info["cores"].isdigit()
    assert info["broker"] == "external broker at KAFKA_BOOTSTRAP=kafka:9092"
    assert info["S3"] == "S3_ENDPOINT=http://minio:9000"
    assert machine_info({})["broker"] == (
        f"embedded Apache Kafka {KAFKA_4} (KRaft, jars from Maven Central)"
    )


def test_numbers_are_formatted_for_reading() -> None:
    assert fmt(1234.5) == "1,234"
    assert fmt(12.345) == "12.35"
    assert fmt(0.81234) == "0.812"
    assert fmt(1048576) == "1,048,576"
    assert fmt(True) == "True"


def test_a_result_with_a_headline_shows_only_those_ratios_at_the_top() -> None:
    native = next(b for b in BENCHMARKS if b.name == "native")
    result = {
        "matrix": {
            "1 partition, raw Fetch v12, 1 MiB fetches": {
                "summary": {"ratio_tierproxy_to_local": 0.75, "local_mib_per_s": 800.0},
                "visits": [{}],
            }
        },
        "headline": {
            "ratio_tierproxy_to_local_worst": 0.75,
            "goal_ratio_tierproxy_to_local_worst": 0.8,
            "fetches_ratio_tierproxy_to_local_worst": 1.02,
            "goal_fetches_ratio_tierproxy_to_local_worst": 1.1,
        },
    }
    outcome = Outcome(benchmark=native, status="ok", result=result, result_time=0)
    text = render_report([outcome], {}, NOW)
    top = next(line for line in text.splitlines() if line.startswith("| [native]"))
    assert "ratio_tierproxy_to_local_worst: **0.750** (goal ≥ 0.800)" in top
    assert "fetches_ratio_tierproxy_to_local_worst: **1.02** (goal ≤ 1.10)" in top
    assert "matrix" not in top
    assert "| 1 partition, raw Fetch v12, 1 MiB fetches | 0.750 | 800 |" in text
