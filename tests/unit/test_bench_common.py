"""``bench.common.save_json``: every result file names the code it measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import common


def test_a_result_is_stamped_with_the_commit_and_whether_the_tree_was_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)

    path = common.save_json("example", {"ratio": 1.5})

    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["ratio"] == 1.5
    assert saved["commit"] == common.git_state()["commit"]
    assert isinstance(saved["clean_tree"], bool)


def test_a_state_the_benchmark_took_before_it_ran_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)

    path = common.save_json("example", {"commit": "abc", "clean_tree": False})

    saved = json.loads(path.read_text(encoding="utf-8"))
    assert (saved["commit"], saved["clean_tree"]) == ("abc", False)


def test_results_written_by_an_earlier_benchmark_leave_the_tree_clean() -> None:
    state = common.git_state()
    before = state["clean_tree"]
    results = common.RESULTS / "hostile.json"
    original = results.read_text(encoding="utf-8")
    try:
        results.write_text(original + " ", encoding="utf-8")
        assert common.git_state()["clean_tree"] == before
    finally:
        results.write_text(original, encoding="utf-8")
