"""The sender's state files: the file set and the round's sync.log."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from state_helpers import sync_log_lines

from sealsync.errors import BadName
from sealsync.synclog import (
    SyncLog,
    SyncLogState,
    apply_sync_log,
    parse_sync_log,
    read_sync_log,
)
from sender.manage.state import read_file_set, write_file_set

A = "sequence/root.sg1/0/0/1-1-0.tsfile"
B = "sequence/root.sg2/0/0/2-1-0.tsfile"
C = "unsequence/root.sg1/0/0/3-1-0.parquet"
D = "unsequence/root.sg2/4-1-0.tsfile"


# --- file sets ---------------------------------------------------------------------


def test_missing_file_set_is_empty(tmp_path: Path) -> None:
    assert read_file_set(tmp_path / "last_local_files.txt") == set()


def test_file_set_round_trip_is_sorted_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "last_local_files.txt"
    write_file_set(path, [C, A, B, A])
    assert path.read_text() == f"{A}\n{B}\n{C}\n"
    assert read_file_set(path) == {A, B, C}
    write_file_set(path, [])
    assert path.read_bytes() == b""
    assert read_file_set(path) == set()


def test_file_set_skips_damaged_lines(tmp_path: Path) -> None:
    path = tmp_path / "last_local_files.txt"
    path.write_bytes(
        f"{A}\n\n../../etc/passwd\n/abs/x.tsfile\nsequence/\xff.tsfile\n{B}\n".encode("latin-1")
    )
    assert read_file_set(path) == {A, B}


def test_writing_a_bad_name_fails_and_keeps_the_old_set(tmp_path: Path) -> None:
    path = tmp_path / "last_local_files.txt"
    write_file_set(path, [A])
    for bad in ("sequence/a\nb.tsfile", "../x.tsfile", "sequence/x.txt"):
        with pytest.raises(BadName):
            write_file_set(path, [B, bad])
    assert read_file_set(path) == {A}


# --- sync.log ----------------------------------------------------------------------

FULL = sync_log_lines([A, B], [C, D])


def write_round(path: Path) -> None:
    with SyncLog(path) as log:
        log.start()
        log.deleted_start()
        log.deleted(A)
        log.deleted_many([B])
        log.deleted_end()
        log.tsfile_start()
        log.tsfile(C)
        log.tsfile_many([D])
        log.tsfile_many([])
        log.tsfile_end()
        log.end()


def test_sync_log_writes_the_seed_vocabulary(tmp_path: Path) -> None:
    path = tmp_path / "sync.log"
    write_round(path)
    assert path.read_text().split("\n") == [*FULL, ""]
    assert read_sync_log(path) == SyncLogState(deleted=(A, B), new=(C, D), ended=True)


def test_sync_log_refuses_names_that_could_forge_lines(tmp_path: Path) -> None:
    path = tmp_path / "sync.log"
    with SyncLog(path) as log:
        log.start()
        log.tsfile_start()
        with pytest.raises(BadName):
            log.tsfile("sequence/x.tsfile\nsync end")
        with pytest.raises(BadName):
            log.tsfile_many([C, "sync end"])
        with pytest.raises(BadName):
            log.deleted("/etc/passwd")
    assert path.read_text() == "sync start\nsync tsfile start\n"


def test_sync_log_appends_after_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "sync.log"
    path.write_bytes(b"sync start\nsync tsfile start\nsequence/root.sg")
    with SyncLog(path) as log:
        log.tsfile(C)
    assert read_sync_log(path) == SyncLogState(deleted=(), new=(C,), ended=False)


def test_missing_sync_log_is_empty(tmp_path: Path) -> None:
    assert read_sync_log(tmp_path / "sync.log") == SyncLogState((), (), False)


def expected_for_prefix(lines: list[str]) -> SyncLogState:
    """An independent model of the log: names count in the section they were written in."""
    deleted = [n for i, n in enumerate(lines) if n in (A, B) and i >= 2]
    new = [n for i, n in enumerate(lines) if n in (C, D) and i >= 6]
    return SyncLogState(tuple(deleted), tuple(new), "sync end" in lines)


@pytest.mark.parametrize("cut", range(len(FULL) + 1))
def test_every_prefix_of_a_log(cut: int) -> None:
    assert parse_sync_log(FULL[:cut]) == expected_for_prefix(FULL[:cut])


def test_every_byte_prefix_of_a_log_file(tmp_path: Path) -> None:
    path = tmp_path / "sync.log"
    write_round(path)
    data = path.read_bytes()
    for cut in range(len(data) + 1):
        path.write_bytes(data[:cut])
        complete = data[:cut].decode().split("\n")[:-1]
        assert read_sync_log(path) == expected_for_prefix(complete), cut


def test_parse_ignores_lines_it_cannot_trust() -> None:
    lines = [
        A,  # before any section
        "sync start",
        "sync deleted file names start",
        "../../etc/passwd",
        A,
        A,
        "sync deleted file names end",
        B,  # between sections
        "garbage",
        "sync tsfile start",
        "sequence/a\\b.tsfile",
        C,
        "",
        C,
    ]
    assert parse_sync_log(lines) == SyncLogState(deleted=(A,), new=(C,), ended=False)


names = st.sampled_from([A, B, C, D, "sequence/x.tsfile", "unsequence/y/z.parquet"])


@settings(max_examples=200, deadline=None)
@given(deleted=st.lists(names, max_size=6), new=st.lists(names, max_size=6), data=st.data())
def test_parse_of_any_prefix_is_the_names_of_its_sections(
    deleted: list[str], new: list[str], data: st.DataObject
) -> None:
    lines = sync_log_lines(deleted, new)
    cut = data.draw(st.integers(0, len(lines)))
    first_new = 4 + len(deleted)  # after start, deleted start, the names, deleted end, tsfile start
    del_lines = lines[2 : 2 + len(deleted)][: max(0, cut - 2)]
    new_lines = lines[first_new : first_new + len(new)][: max(0, cut - first_new)]
    got = parse_sync_log(lines[:cut])
    assert got == SyncLogState(
        deleted=tuple(dict.fromkeys(del_lines)),
        new=tuple(dict.fromkeys(new_lines)),
        ended=cut == len(lines),
    )


def test_apply_sync_log_removes_then_adds_and_is_idempotent() -> None:
    last = {A, B, C}
    state = SyncLogState(deleted=(A, D), new=(D, "sequence/n.tsfile"), ended=False)
    once = apply_sync_log(last, state)
    assert once == {B, C, D, "sequence/n.tsfile"}
    assert apply_sync_log(once, state) == once
    assert last == {A, B, C}  # not modified
