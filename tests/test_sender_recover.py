"""Sender recovery (docs/design.md §3.2): a crash anywhere, then a rerun, is correct.

"Correct" is checked the way it matters: after recovery, the next selection resends
exactly what the log does not record as verified and deletes exactly what the log
does not record as acknowledged.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from state_helpers import Crash, DurableStepCrash, sync_log_lines, write_data_file

from sealsync.synclog import SyncLog
from sender.manage.layout import SenderPaths
from sender.manage.scan import scan
from sender.manage.selection import Selection, select
from sender.manage.snapshot import take_snapshot
from sender.manage.state import read_file_set, write_file_set
from sender.recover.recovery import recover, recover_all

SYNCED = [f"sequence/root.sg{g}/0/{i}-{i}-0.tsfile" for g in (1, 2) for i in range(3)]
GONE = [SYNCED[1], SYNCED[4]]
NEW = [
    "sequence/root.sg1/0/10-10-0.tsfile",
    "sequence/root.sg2/0/11-11-0.tsfile",
    "unsequence/root.sg1/0/12-12-0.tsfile",
    "unsequence/root.sg2/5/0/13-13-0.parquet",
]
UNSEALED = "sequence/root.sg1/0/20-20-0.tsfile"

# The round's log, line by line, as the transfer writes it.
LINES = sync_log_lines(GONE, NEW)


@pytest.fixture
def paths(tmp_path: Path) -> SenderPaths:
    data = tmp_path / "data"
    for name in SYNCED + NEW:
        write_data_file(data, name)
    write_data_file(data, UNSEALED, sealed=False)
    for name in GONE:
        for suffix in ("", ".resource"):
            Path(f"{data / name}{suffix}").unlink()
    return SenderPaths(data, "192.168.130.16", 5555)


def round_log_bytes(tmp_path: Path) -> bytes:
    """A real round's sync.log, written through SyncLog."""
    path = tmp_path / "round.log"
    with SyncLog(path) as log:
        log.start()
        log.deleted_start()
        for name in GONE:
            log.deleted(name)
        log.deleted_end()
        log.tsfile_start()
        for name in NEW:
            log.tsfile(name)
        log.tsfile_end()
        log.end()
    data = path.read_bytes()
    assert data.decode().split("\n") == [*LINES, ""]
    return data


def cuts(data: bytes) -> list[int]:
    """Every line boundary, and a torn cut in the middle of every line."""
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    starts = [0, *ends[:-1]]
    return sorted({0, *ends, *((s + e) // 2 for s, e in zip(starts, ends, strict=True))})


def logged(prefix: bytes) -> tuple[set[str], set[str]]:
    """(deleted, new) that a log prefix records, from its complete lines."""
    complete = LINES[: prefix.count(b"\n")]
    return set(GONE) & set(complete), set(NEW) & set(complete)


def last_after(prefix: bytes, first_round: bool) -> set[str]:
    deleted, new = logged(prefix)
    return (set() if first_round else set(SYNCED) - deleted) | new


def start_round(paths: SenderPaths, log: bytes | None, first_round: bool) -> None:
    """On-disk state of a round that crashed mid-transfer with ``log`` written so far."""
    if paths.folder.exists():
        shutil.rmtree(paths.folder)
    paths.folder.mkdir(parents=True)
    if not first_round:
        write_file_set(paths.last_local_files, SYNCED)
    assert list(take_snapshot(paths.data_dir, paths.snapshot, NEW)) == NEW
    if log is not None:
        paths.sync_log.write_bytes(log)


def assert_recovered(paths: SenderPaths, prefix: bytes, first_round: bool = False) -> None:
    deleted, new = logged(prefix)
    synced = set() if first_round else set(SYNCED)
    assert read_file_set(paths.last_local_files) == last_after(prefix, first_round)
    on_disk_unsynced = set() if not first_round else set(SYNCED) - set(GONE)
    expect = Selection(
        new=tuple(sorted((set(NEW) - new) | on_disk_unsynced)),
        deleted=tuple(sorted((set(GONE) & synced) - deleted)),
    )
    assert select(scan(paths.data_dir), read_file_set(paths.last_local_files)) == expect
    assert paths.last_local_files.exists()
    for leftover in (paths.current_local_files, paths.snapshot, paths.sync_log):
        assert not os.path.lexists(leftover), leftover


# --- a crash while the round was transferring -----------------------------------------


@pytest.mark.parametrize("first_round", [False, True])
def test_crash_after_any_part_of_the_log(
    paths: SenderPaths, tmp_path: Path, first_round: bool
) -> None:
    data = round_log_bytes(tmp_path)
    for cut in cuts(data):
        start_round(paths, data[:cut], first_round)
        recover(paths)
        assert_recovered(paths, data[:cut], first_round)
        recover(paths)  # a second run changes nothing
        assert_recovered(paths, data[:cut], first_round)


def test_crash_before_the_log_was_created(paths: SenderPaths) -> None:
    start_round(paths, None, first_round=False)
    recover(paths)
    assert_recovered(paths, b"")


def test_full_round_then_finish_round(paths: SenderPaths, tmp_path: Path) -> None:
    data = round_log_bytes(tmp_path)
    start_round(paths, data, first_round=False)
    recover(paths)
    assert read_file_set(paths.last_local_files) == set(SYNCED) - set(GONE) | set(NEW)
    assert select(scan(paths.data_dir), read_file_set(paths.last_local_files)) == Selection((), ())
    assert os.listdir(paths.folder) == ["last_local_files.txt"]


# --- a crash during clean-up (or during an earlier recovery) --------------------------


STAGES = [
    "current written",  # after step 5
    "current written, tmp of last left",  # a crash inside an earlier atomic replace
    "last deleted",  # after step 6
    "renamed",  # after step 7
    "snapshot half deleted",  # during step 8
    "snapshot deleted",  # during step 8
    "log deleted, snapshot left behind",  # step 8 in the other order
]


def crash_in_cleanup(paths: SenderPaths, log: bytes, stage: str, first_round: bool) -> None:
    start_round(paths, log, first_round)
    result = last_after(log, first_round)
    if stage.startswith("current written"):
        write_file_set(paths.current_local_files, result)
        if "tmp" in stage:
            (paths.folder / ".last_local_files.txt.tmp").write_bytes(b"sequence/tor")
        return
    write_file_set(paths.last_local_files, result)
    if stage == "last deleted":
        paths.last_local_files.rename(paths.current_local_files)
    elif stage == "snapshot half deleted":
        for name in NEW[:2]:
            (paths.snapshot / name).unlink()
    elif stage == "snapshot deleted":
        shutil.rmtree(paths.snapshot)
    elif stage == "log deleted, snapshot left behind":
        paths.sync_log.unlink()


@pytest.mark.parametrize("first_round", [False, True])
@pytest.mark.parametrize("stage", STAGES)
def test_crash_during_cleanup(
    paths: SenderPaths, tmp_path: Path, stage: str, first_round: bool
) -> None:
    data = round_log_bytes(tmp_path)
    for cut in [c for c in cuts(data) if c == 0 or data[c - 1] == ord("\n")]:
        crash_in_cleanup(paths, data[:cut], stage, first_round)
        recover(paths)
        assert_recovered(paths, data[:cut], first_round)


# --- crash injection into the real code: die before each durable step ----------------


def run(paths: SenderPaths, injector: DurableStepCrash, crash_at: int) -> bool:
    injector.arm(crash_at)
    try:
        recover(paths)
    except Crash:
        return True
    return False


@pytest.mark.parametrize("cut_line", [len(LINES), 6])  # whole round; cut after 2 new files
def test_crash_before_any_durable_step_and_again_in_the_rerun(
    paths: SenderPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut_line: int
) -> None:
    data = round_log_bytes(tmp_path)
    log = b"".join(line.encode() + b"\n" for line in LINES[:cut_line])
    assert data.startswith(log)
    injector = DurableStepCrash(monkeypatch)
    start_round(paths, log, first_round=False)
    run(paths, injector, 0)
    steps = injector.count
    assert steps == 5  # write current, delete last, rename, delete snapshot, delete log
    for first in range(1, steps + 1):
        for second in range(0, steps + 1):
            start_round(paths, log, first_round=False)
            assert run(paths, injector, first)
            run(paths, injector, second)
            run(paths, injector, 0)
            assert_recovered(paths, log)


# --- the property: whatever the sets and the log, last = (last - deleted) | new ------

POOL = [f"sequence/sg{i % 3}/{i}.tsfile" for i in range(6)] + ["unsequence/u/1.parquet"]


@settings(max_examples=60, deadline=None)
@given(
    last=st.none() | st.sets(st.sampled_from(POOL)),
    deleted=st.lists(st.sampled_from(POOL), max_size=5),
    new=st.lists(st.sampled_from(POOL), max_size=5),
    data=st.data(),
)
def test_recovery_result_is_last_minus_deleted_plus_new(
    last: set[str] | None, deleted: list[str], new: list[str], data: st.DataObject
) -> None:
    lines = sync_log_lines(deleted, new)
    log = "".join(f"{line}\n" for line in lines).encode()
    cut = data.draw(st.integers(0, len(log)), label="cut")
    complete = lines[: log[:cut].count(b"\n")]
    first_new = 4 + len(deleted)
    logged_deleted = set(complete[2 : 2 + len(deleted)])
    logged_new = set(complete[first_new : first_new + len(new)])
    with tempfile.TemporaryDirectory() as tmp:
        paths = SenderPaths(Path(tmp), "h", 1)
        paths.folder.mkdir(parents=True)
        if last is not None:
            write_file_set(paths.last_local_files, last)
        paths.sync_log.write_bytes(log[:cut])
        recover(paths)
        assert (
            read_file_set(paths.last_local_files) == ((last or set()) - logged_deleted) | logged_new
        )
        assert os.listdir(paths.folder) == ["last_local_files.txt"]


# --- where recovery runs -------------------------------------------------------------


def test_no_folder_means_nothing_to_recover(tmp_path: Path) -> None:
    recover(SenderPaths(tmp_path, "h", 1))
    assert os.listdir(tmp_path) == []


def test_recover_all_touches_only_this_receiver(tmp_path: Path) -> None:
    one, two, three = tmp_path / "d1", tmp_path / "d2", tmp_path / "d3"
    three.mkdir()
    for data_dir in (one, two):
        for host in ("h", "other"):
            p = SenderPaths(data_dir, host, 1)
            p.folder.mkdir(parents=True)
            write_file_set(p.last_local_files, [SYNCED[0]])
            p.sync_log.write_text(f"sync start\nsync tsfile start\n{NEW[0]}\n")
    recover_all([one, two, three], "h", 1)
    for data_dir in (one, two):
        mine, other = SenderPaths(data_dir, "h", 1), SenderPaths(data_dir, "other", 1)
        assert read_file_set(mine.last_local_files) == {SYNCED[0], NEW[0]}
        assert os.listdir(mine.folder) == ["last_local_files.txt"]
        assert read_file_set(other.last_local_files) == {SYNCED[0]}
        assert other.sync_log.exists()
    assert os.listdir(three) == []
