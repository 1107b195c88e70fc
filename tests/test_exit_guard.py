"""The exit guard (``tests/exit_guard.py``) on a real pytest run whose output is a
pipe, as CI's is: a process left holding that pipe is named and killed at session
finish, and a thread that never ends is named and does not keep the run from ending
with its own status."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_helpers import alive

pytestmark = pytest.mark.slow  # runs pytest, and a sleeper, as processes

TESTS = Path(__file__).resolve().parent

LEAKS = """
import subprocess
import threading
from pathlib import Path


def test_leaves_a_process_on_the_output(tmp_path_factory):
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    Path(__file__).with_name("sleeper.pid").write_text(str(proc.pid))


def never_returns() -> None:
    threading.Event().wait()


def test_leaves_a_thread_that_never_ends():
    threading.Thread(target=never_returns, name="the-stuck-one").start()
"""


def _run(folder: Path, grace: float | str, *selected: str) -> tuple[int, str, float]:
    """pytest on ``folder`` without capture (so children inherit the pipe), read to
    end of output; returns the exit status, the output and the seconds taken."""
    env = {**os.environ, "PYTHONPATH": str(TESTS), "SEALSYNC_TEST_EXIT_GRACE": str(grace)}
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-s", "-p", "exit_guard", "-p", "no:cacheprovider"]
        + ["--rootdir", str(folder), *selected, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=folder,
    )
    try:  # returns at end of output: once every holder of the pipe is gone
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, out.decode(), time.monotonic() - began


def test_a_process_left_on_the_output_is_named_and_killed(tmp_path: Path) -> None:
    (tmp_path / "test_leaks.py").write_text(LEAKS)
    status, out, took = _run(tmp_path, 60, "-k", "process")
    pid = int((tmp_path / "sleeper.pid").read_text())
    assert status == 0, out
    assert f"exit guard: process {pid} (`sleep 300`)" in out, out
    assert not alive(pid)
    assert took < 60, f"the output stayed open {took:.0f}s"


def test_a_thread_that_never_ends_is_named_and_the_run_ends_with_its_status(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_leaks.py").write_text(LEAKS)
    status, out, took = _run(tmp_path, 3, "-k", "thread")
    assert status == 0, out
    assert "exit guard: pytest's process has not exited 3s after the run ended" in out, out
    assert "in never_returns" in out, out  # the stuck thread's stack
    assert took < 60, f"the run took {took:.0f}s to end"


def test_a_failed_run_keeps_its_status(tmp_path: Path) -> None:
    (tmp_path / "test_leaks.py").write_text(LEAKS + "\n\ndef test_fails():\n    assert False\n")
    status, out, _ = _run(tmp_path, 3, "-k", "thread or fails")
    assert status == 1, out
    assert "exit guard: pytest's process has not exited" in out, out


def test_a_mistyped_grace_stops_the_run_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_leaks.py").write_text(LEAKS)
    status, out, _ = _run(tmp_path, "2m", "-k", "thread")
    assert status == 4, out  # pytest's usage error
    assert "SEALSYNC_TEST_EXIT_GRACE='2m' is not a number of seconds" in out, out
    assert "Traceback" not in out and "passed" not in out, out
