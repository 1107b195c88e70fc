"""The receiver's check pool bounds every check, whatever the file (issue 43, item 3).

A hostile file pinned a pool worker for the full 300 s timeout, was then checked again
in the main pool, an honest sender's round failed after 136 s meanwhile, and SIGINT
took 110 s to stop the receiver; workers had no memory limit. Here each bound is held
against checks that misbehave in the ways a reader can (a loop in Python, a loop in
native code that never returns to Python, a 4 GiB allocation, a sleep), in real worker
processes (``receiver.inspect_pool``). ``test_hostile_files.py`` runs the hostile files
themselves through a real ``sealsync serve``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from receiver_inspect_targets import bounded_inspect
from reliability.figures import record

from receiver.inspect_pool import InspectPool, checking_for
from sealsync.errors import FormatError
from sealsync.formats import FileInfo

pytestmark = pytest.mark.slow

FINE = FileInfo(("root.fine",), 1)


def _files(folder: Path, *names: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in names]
    for path in paths:
        path.touch()
    return paths


def _calls(folder: Path, what: str = "start") -> list[str]:
    log = folder / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[1] for line in lines if line.startswith(what + " ")]


def test_a_check_past_its_cpu_budget_is_refused_and_the_next_file_checked(tmp_path: Path) -> None:
    """A loop in Python is interrupted at the budget (SIGXCPU); one in native code,
    which never returns to Python, is ended by the kernel a grace later (SIGPROF), and
    its file refused without a second check."""
    spin, native, fine = _files(tmp_path, "spin.tsfile", "native.tsfile", "fine.tsfile")
    took = {}
    with InspectPool(workers=1, timeout=120, target=bounded_inspect, cpu_base=1.0) as pool:
        assert pool.inspect(fine) == FINE  # the worker is up
        for path in (spin, native):
            started = time.monotonic()
            with pytest.raises(FormatError) as info:
                pool.inspect(path)
            took[path.name] = (time.monotonic() - started, str(info.value))
        after = pool.inspect(fine)
    spin_took, spin_said = took["spin.tsfile"]
    native_took, native_said = took["native.tsfile"]
    held = spin_took < 10 and native_took < 12 and after == FINE
    record("security", attack="a check looping past its CPU budget", tried=2, held=held)
    assert spin_took < 10, spin_took  # 1 s of CPU, then the interruption
    assert spin_said.startswith("spin.tsfile: its check used more than 1 s of CPU"), spin_said
    assert native_took < 12, native_took  # 1 s and a 2 s grace; never checked again
    assert native_said.startswith("native.tsfile: its check was ended past its CPU budget")
    assert _calls(tmp_path).count("native.tsfile") == 1
    assert after == FINE


def test_a_check_over_its_memory_budget_is_refused_and_the_worker_lives(tmp_path: Path) -> None:
    hog, fine = _files(tmp_path, "hog.tsfile", "fine.tsfile")
    with InspectPool(workers=1, timeout=60, target=bounded_inspect) as pool:
        with pytest.raises(FormatError) as info:
            pool.inspect(hog)
        alive = pool.alive()
        after = pool.inspect(fine)
    said = str(info.value)
    held = "more memory than a check may use (1024 MiB)" in said and alive == 1
    record("security", attack="a check allocating 4 GiB in a worker", tried=1, held=held)
    assert said == "hog.tsfile: its check needed more memory than a check may use (1024 MiB)"
    assert alive == 1  # refused in the worker, which stays
    assert after == FINE


def test_a_task_that_times_out_is_not_checked_again(tmp_path: Path) -> None:
    """A hung check once cost the timeout, then the same again in the main pool."""
    paths = _files(tmp_path, "a.tsfile", "hang.tsfile", "b.tsfile")
    with InspectPool(workers=1, timeout=3, target=bounded_inspect) as pool:
        started = time.monotonic()
        results = pool.inspect_many(paths)
        took = time.monotonic() - started
    starts = _calls(tmp_path)
    held = starts.count("hang.tsfile") == 1 and took < 6
    record("security", attack="a hung check, then the same check again", tried=1, held=held)
    assert starts.count("hang.tsfile") == 1, starts  # checked once
    assert took < 6, took  # one timeout, not two
    assert all(isinstance(r, FormatError) for r in results), results
    assert "hang.tsfile: the format reader did not finish in 3 s" in str(results[1])


def test_one_senders_many_files_never_queue_another_behind_them(tmp_path: Path) -> None:
    """One worker; a sender's 60 files (0.15 s each) are asked for first, then another
    sender's one: it gets the worker after at most one task of the first's (at most
    :data:`~receiver.inspect_pool.TASK_BUDGET` of budgets: 16 files), not after all."""
    many = _files(tmp_path / "many", *(f"sleep{i:02d}.tsfile" for i in range(60)))
    (one,) = _files(tmp_path / "one", "sleep-honest.tsfile")
    done: dict[str, float] = {}
    with InspectPool(workers=1, timeout=60, target=bounded_inspect) as pool:
        pool.inspect(one)  # the worker is up

        def hostile() -> None:
            with checking_for("hostile"):
                pool.inspect_many(many)
            done["hostile"] = time.monotonic()

        thread = threading.Thread(target=hostile)
        started = time.monotonic()
        thread.start()
        time.sleep(0.5)  # its first task is in the worker, the others wait
        with checking_for("honest"):
            got = pool.inspect(one)
        done["honest"] = time.monotonic()
        thread.join(60)
    honest_wait = done["honest"] - started
    hostile_took = done["hostile"] - started
    held = got == FINE and honest_wait < 4 and done["honest"] < done["hostile"]
    record("security", attack="one sender's 60 files queued before another's", tried=60, held=held)
    assert got == FINE
    assert honest_wait < 4, honest_wait  # a task of the other's (16 files, 2.4 s), then its own
    assert hostile_took > 8.5, hostile_took  # the other's 60 files took 9 s in all
    assert done["honest"] < done["hostile"]


def test_closing_the_pool_ends_a_check_in_progress_at_once(tmp_path: Path) -> None:
    """SIGINT once waited for the check in progress (110 s)."""
    (hang,) = _files(tmp_path, "hang.tsfile")
    pool = InspectPool(workers=1, timeout=60, target=bounded_inspect)
    said: list[str] = []

    def check() -> None:
        try:
            pool.inspect(hang)
        except FormatError as exc:
            said.append(str(exc))

    thread = threading.Thread(target=check)
    thread.start()
    deadline = time.monotonic() + 30
    while "hang.tsfile" not in _calls(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    pool.close()
    thread.join(10)
    took = time.monotonic() - started
    held = took < 3 and not thread.is_alive()
    record("security", attack="stopping while a check hangs", tried=1, held=held)
    assert not thread.is_alive()
    assert took < 3, took
    assert said and "stopping" in said[0], said
