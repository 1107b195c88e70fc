"""The following loader's parts without Spark (spark_loader/follow.py): what it watches,
when it runs, how it retries and stops. ``test_load_follow.py`` runs the real one."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sealsync import received
from sealsync.config import LoaderConfig
from sealsync.config.location import parse_location
from sealsync.errors import LockHeld, SealsyncError
from spark_loader.follow import FOLLOW_FILE, Follower, FollowOptions, first_change, read_follower
from spark_loader.report import LoadReport

UUID = "1f0e6a52-9b8c-4d3e-8a7f-0c1b2d3e4f5a"


def _config(tmp_path: Path) -> LoaderConfig:
    data = tmp_path / "data"
    (data / "sync-receiver" / f"10.0.0.1_{UUID}").mkdir(parents=True)
    return LoaderConfig(
        receiver_data_dirs=[data],
        table_path=parse_location(str(tmp_path / "table"), tmp_path),
        state_dir=tmp_path / "state",
    )


def _append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def test_the_marks_move_with_every_load_deletion_and_round_end(tmp_path: Path) -> None:
    config = _config(tmp_path)
    data = config.receiver_data_dirs[0]
    folder = data / "sync-receiver"
    sender = folder / f"10.0.0.1_{UUID}"
    empty = received.activity_marks(data)
    assert set(empty) == {str(folder), str(sender)}  # no load yet: the folders alone
    assert received.activity_marks(tmp_path / "nothing") == {}
    load_log = sender / "load.log"
    marks = [empty]

    def step(change: Any) -> float | None:
        time.sleep(0.01)  # a file system's time stamps are fine, not infinitely so
        change()
        now = received.activity_marks(data)
        when = first_change(marks[-1], now)
        marks.append(now)
        return when

    assert step(lambda: _append(load_log, "load sequence/a.tsfile")) is not None
    assert step(lambda: _append(load_log, "load sequence/b.tsfile")) is not None
    deleted = folder / f"deleted_{UUID}.log"
    assert step(lambda: _append(deleted, "delete 1 2 sequence/b.tsfile")) is not None
    assert str(deleted) in marks[-1]
    (folder / "unrelated.txt").write_text("x")
    assert str(folder / "unrelated.txt") not in received.activity_marks(data)
    # the round's end removes load.log: the sender folder's own time says so
    assert step(lambda: load_log.unlink()) is not None
    assert first_change(marks[-1], marks[-1]) is None
    when = first_change(empty, marks[-1])
    assert when is not None and abs(when - os.stat(sender).st_mtime) < 60


class Loads:
    """A stand-in for run_load: answers from a script, records what it was asked."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers, self.calls = answers, []  # type: ignore[var-annotated]

    def __call__(self, config: LoaderConfig, **kwargs: Any) -> LoadReport:
        self.calls.append(kwargs)
        answer = self.answers.pop(0) if self.answers else LoadReport()
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]


def _follow(tmp_path: Path, loads: Loads, work: Any) -> Follower:
    config = _config(tmp_path)
    options = FollowOptions(window=0.05, poll=0.02, retry=0.2)
    follower = Follower(config, options, loads, spark="SESSION")
    thread = threading.Thread(target=follower.run)
    thread.start()
    try:
        work(config, follower)
    finally:
        follower.stop()
        thread.join(10)
    assert not thread.is_alive()
    return follower


def _wait(predicate: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_it_catches_up_then_runs_once_per_change_with_its_lag(tmp_path: Path) -> None:
    loads = Loads([])

    def work(config: LoaderConfig, follower: Follower) -> None:
        _wait(lambda: len(loads.calls) == 1)  # at start: whatever came while nobody followed
        assert loads.calls[0]["changes_since"] is None and loads.calls[0]["spark"] == "SESSION"
        assert read_follower(config.state_dir)["pid"] == os.getpid()  # type: ignore[index]
        time.sleep(0.2)
        assert len(loads.calls) == 1  # no change, no run
        log = config.receiver_data_dirs[0] / "sync-receiver" / f"10.0.0.1_{UUID}" / "load.log"
        before = time.time()
        _append(log, "load sequence/a.tsfile")
        _append(log, "load sequence/b.tsfile")  # in the same window: one run
        _wait(lambda: len(loads.calls) == 2)
        time.sleep(0.2)
        assert len(loads.calls) == 2
        assert before - 1 <= loads.calls[1]["changes_since"] <= time.time()

    follower = _follow(tmp_path, loads, work)
    assert follower.runs == 2
    assert not (tmp_path / "state" / FOLLOW_FILE).exists()  # stopped: it says so


def test_a_held_lock_is_tried_again_soon_and_a_failure_after_retry(tmp_path: Path) -> None:
    held = LockHeld("another sealsync load is running with the state dir x")
    loads = Loads([held, SealsyncError("the Delta commit failed"), LoadReport()])

    def work(config: LoaderConfig, follower: Follower) -> None:
        _wait(lambda: len(loads.calls) == 3, timeout=5)

    follower = _follow(tmp_path, loads, work)
    assert follower.runs == 1


def test_a_dead_follower_s_file_names_no_follower(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    assert read_follower(state) is None
    (state / FOLLOW_FILE).write_text(json.dumps({"pid": 2**22 + 7, "started": 1.0}))
    assert read_follower(state) is None  # killed with -9: the pid is gone
    (state / FOLLOW_FILE).write_text("{not json")
    assert read_follower(state) is None


@pytest.mark.parametrize("bad", [["--full"], ["--json"], ["--prune-missing"]])
def test_follow_takes_no_one_shot_options(tmp_path: Path, bad: list[str]) -> None:
    from click.testing import CliRunner
    from config_helpers import make_loader

    from sealsync.app.cli import cli

    config = make_loader(tmp_path)
    result = CliRunner().invoke(cli, ["load", "--config", str(config), "--follow", *bad])
    assert result.exit_code == 2
    assert "--follow takes no --full, --prune-missing or --json" in result.output


def test_with_a_ttl_a_quiet_receiver_still_gets_runs(tmp_path: Path) -> None:
    import dataclasses

    from sealsync.ttl import Rule, TtlRules

    loads = Loads([])
    config = dataclasses.replace(
        _config(tmp_path), ttl=TtlRules.of([Rule("root.w3t.**", 3_600_000)])
    )
    options = FollowOptions(window=0.05, poll=0.02, retry=0.2, ttl_every=0.1)
    follower = Follower(config, options, loads, spark="SESSION")
    thread = threading.Thread(target=follower.run)
    thread.start()
    try:
        _wait(lambda: len(loads.calls) >= 3)  # no change at the receiver: rows expire
    finally:
        follower.stop()
        thread.join(10)
    assert all(call["changes_since"] is None for call in loads.calls)
