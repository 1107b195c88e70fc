"""The ``slow`` marks stay honest: conftest fails a test outside them that starts a process.

The quick run (``pytest -m "not slow"``) is only quick while every test that starts a
process, opens an SSH transport or needs Spark carries the mark; the check in
``conftest.py`` enforces that, and this test proves the check bites, by running the
same conftest on three small tests in a pytest process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs pytest as a process

TESTS = """
import subprocess
import sys

import pytest


def test_unmarked_spawn():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.slow
def test_marked_spawn():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_in_process():
    assert sum([1, 2]) == 3
"""


def test_an_unmarked_test_that_starts_a_process_fails(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        (Path(__file__).parent / "conftest.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (tmp_path / "test_marks.py").write_text(TESTS, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rE", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},  # its helpers
    )
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "3 passed, 1 error" in out, out
    assert "ERROR at teardown of test_unmarked_spawn" in out, out
    assert "test_marks.py::test_unmarked_spawn started the process" in out, out
    assert "but is not marked slow" in out, out
    assert "test_marked_spawn" not in out.split("short test summary info")[-1], out
