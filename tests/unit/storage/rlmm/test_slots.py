"""Snapshot slots: a process owns the slot it locked, another process takes the next one, and
a slot is free again as soon as its holder releases it or dies."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.config import ConfigError
from storage.rlmm.slots import LOCK_FILE, claim_slot
from tests.conditions import wait_until

_HOLDER = """
import fcntl, os, sys
lock = open(sys.argv[1], "a+")
fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
lock.truncate(0)
lock.write(f"{os.getpid()}\\n")
lock.flush()
print("locked", flush=True)
sys.stdin.read()
"""
"""Holds a slot's lock the way :func:`claim_slot` does, in another process, until stdin
closes."""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding slot 0 of ``tmp_path``."""
    (tmp_path / "0").mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "0" / LOCK_FILE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "locked\n"
    try:
        yield process
    finally:
        process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()


def test_one_process_takes_the_lowest_free_slot_and_gives_it_back(tmp_path: Path) -> None:
    first = claim_slot(tmp_path / "serve")
    second = claim_slot(tmp_path / "serve")  # another open file: flock conflicts in-process
    assert (first.number, second.number) == (0, 1)
    assert first.path == tmp_path / "serve" / "0"
    assert (first.path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    first.release()
    first.release()  # idempotent
    third = claim_slot(tmp_path / "serve")
    assert third.number == 0
    second.release()
    third.release()


def test_a_slot_held_by_another_process_is_skipped_with_one_line(
    tmp_path: Path, holder: subprocess.Popen[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="storage.rlmm.slots"):
        slot = claim_slot(tmp_path)
    try:
        assert slot.number == 1
        [line] = [r.getMessage() for r in caplog.records]
        assert f"{tmp_path / '0'} (pid {holder.pid}) held by another process" in line
        assert str(tmp_path / "1") in line
    finally:
        slot.release()


def test_the_slot_of_a_process_that_died_is_free_again(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    taken = claim_slot(tmp_path)
    assert taken.number == 1
    taken.release()
    holder.kill()
    holder.wait()

    def slot_zero_free() -> bool:
        slot = claim_slot(tmp_path)
        slot.release()
        return slot.number == 0

    wait_until(slot_zero_free, timeout_s=30, what="slot 0 freed by the kernel")


def test_every_slot_held_is_a_clear_error(tmp_path: Path) -> None:
    held = [claim_slot(tmp_path, max_slots=2) for _ in range(2)]
    with pytest.raises(ConfigError, match=r"all 2 metadata snapshot slots of .* are held"):
        claim_slot(tmp_path, max_slots=2)
    for slot in held:
        slot.release()


def test_a_directory_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot use the metadata snapshot directory"):
        claim_slot(tmp_path / "file" / "state")
