"""A child's stderr line holding the noise is dropped; everything else passes, in order."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from storage.tiering.jvm_stderr import stderr_without
from tests.conditions import GENEROUS_S


def test_only_the_noisy_lines_of_a_child_are_dropped(capfd: pytest.CaptureFixture[str]) -> None:
    child = "import sys; sys.stderr.write('first\\nWARNING: Using incubator modules: x\\nlast\\n')"
    with stderr_without(b"Using incubator modules"):
        subprocess.run([sys.executable, "-c", child], check=True)
    seen = ""
    deadline = time.monotonic() + GENEROUS_S
    while "last" not in seen and time.monotonic() < deadline:  # the filter thread copies
        seen += capfd.readouterr().err
    assert seen.splitlines() == ["first", "last"]
