"""The state files' readers and writers on a fake file system: round trips, torn tails,
missing files.

Every state file is either replaced atomically (``durable.atomic_write``) or appended
to line by line (``durable.AppendLog``), and every reader drops a torn last line and
reads a missing file as empty (docs/formats.md). These tests hold each owner of a
format to that: ``sealsync/durable.py``, ``sender/manage/state.py``,
``sender/manage/shipped_mods.py``, ``sealsync/synclog.py`` and the receiver's
``load.log`` reader.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from fakefs_helpers import (
    FAKEFS_SETTINGS,
    as_bytes,
    data_names,
    fresh,
    sections,
)
from hypothesis import given
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import FakeFilesystem
from state_helpers import sync_log_lines

from receiver.load.apply import read_load_log
from sealsync import durable
from sealsync.errors import BadName
from sealsync.synclog import SyncLog, SyncLogState, apply_sync_log, read_sync_log
from sender.manage.shipped_mods import read_identities, write_identities
from sender.manage.state import read_file_set, write_file_set

DIR = Path("/state")
FILE = DIR / "state.txt"

# Text a line can hold (anything but a newline and lone surrogates), with the characters
# other line splitters break on (CR, NEL, LINE SEPARATOR) and multi-byte ones. An
# explicit alphabet: hypothesis's Unicode tables would be cached on the fake disk.
LINE = st.text(alphabet="az09 \t\r\x00\x7f\x85\u2028é✓😀", max_size=30)
MODS_ID = st.tuples(st.integers(0, 2**40), st.integers(0, 2**62))


def complete(lines: list[str], prefix: bytes) -> list[str]:
    """The model of a torn read: the lines whose newline is inside ``prefix``."""
    return lines[: prefix.count(b"\n")]


# --- durable: atomic replace, reads, appends -------------------------------------------


@FAKEFS_SETTINGS
@given(first=st.lists(LINE, max_size=6), second=st.lists(LINE, max_size=6))
def test_write_lines_replaces_and_reads_back(
    fs: FakeFilesystem, first: list[str], second: list[str]
) -> None:
    fresh(fs, DIR)
    durable.write_lines(FILE, first)
    assert durable.read_lines(FILE) == first
    durable.write_lines(FILE, second)
    assert FILE.read_bytes() == "".join(f"{line}\n" for line in second).encode()
    assert durable.read_lines(FILE) == second
    assert os.listdir(DIR) == [FILE.name]  # no temporary left behind


@FAKEFS_SETTINGS
@given(lines=st.lists(LINE, min_size=1, max_size=5), data=st.data())
def test_a_torn_tail_is_never_read(
    fs: FakeFilesystem, lines: list[str], data: st.DataObject
) -> None:
    fresh(fs, DIR)
    whole = "".join(f"{line}\n" for line in lines).encode()
    cut = data.draw(st.integers(0, len(whole)), label="cut")
    FILE.write_bytes(whole[:cut])  # may end inside a multi-byte character
    assert durable.read_lines(FILE) == complete(lines, whole[:cut])


def test_missing_state_files_read_as_empty(fs: FakeFilesystem) -> None:
    fresh(fs, DIR)
    missing = DIR / "missing"
    assert durable.read_lines(missing) == []
    assert read_file_set(missing) == set()
    assert read_identities(missing) == {}
    assert read_sync_log(missing) == SyncLogState(deleted=(), new=(), ended=False)
    assert read_load_log(missing).loaded == read_load_log(missing).deleted == frozenset()
    assert os.listdir(DIR) == []  # reading creates nothing


def test_a_crashed_atomic_write_leaves_the_old_file_and_the_next_write_wins(
    fs: FakeFilesystem,
) -> None:
    fresh(fs, DIR)
    durable.atomic_write(FILE, "old\n")
    (DIR / f".{FILE.name}.tmp").write_bytes(b"half of the ne")  # died mid-write
    assert durable.read_lines(FILE) == ["old"]
    durable.atomic_write(FILE, b"new\n")
    assert durable.read_lines(FILE) == ["new"]
    assert os.listdir(DIR) == [FILE.name]


def test_remove_and_rename_report_and_persist(fs: FakeFilesystem) -> None:
    fresh(fs, DIR)
    other = DIR / "sub" / "moved.txt"
    other.parent.mkdir()
    durable.write_lines(FILE, ["x"])
    durable.rename(FILE, other)
    assert not FILE.exists() and durable.read_lines(other) == ["x"]
    assert durable.remove(other) is True
    assert durable.remove(other) is False
    durable.fsync_dir(DIR)  # a folder can be fsynced (pyfakefs accepts O_DIRECTORY)


LOG_LINES = ["sync start", "sync tsfile start", "sequence/sg/0/1-1-0.tsfile", "é✓"]
LOG_BYTES = as_bytes(LOG_LINES)


def test_an_append_log_cuts_a_torn_tail_before_appending(fs: FakeFilesystem) -> None:
    for cut in range(len(LOG_BYTES) + 1):  # every byte, inside a character too
        fresh(fs, DIR)
        FILE.write_bytes(LOG_BYTES[:cut])
        with durable.AppendLog(FILE) as log:
            log.append("next")
            log.append_many([])  # nothing to write: nothing written
            log.append_many(["a", "b"])
        kept = complete(LOG_LINES, LOG_BYTES[:cut])
        assert durable.read_lines(FILE) == [*kept, "next", "a", "b"]
        assert FILE.read_bytes() == as_bytes([*kept, "next", "a", "b"])


def test_an_append_log_creates_its_file_and_closes_once(fs: FakeFilesystem) -> None:
    fresh(fs, DIR)
    log = durable.AppendLog(FILE)
    assert FILE.exists() and FILE.read_bytes() == b""
    log.append("one")
    log.close()
    log.close()
    assert durable.read_lines(FILE) == ["one"]


# --- last_local_files.txt / current_local_files.txt -----------------------------------


@FAKEFS_SETTINGS
@given(names=st.sets(data_names(), max_size=8), data=st.data())
def test_a_file_set_round_trips_sorted(
    fs: FakeFilesystem, names: set[str], data: st.DataObject
) -> None:
    fresh(fs, DIR)
    write_file_set(FILE, list(names) + list(names))  # duplicates collapse
    assert FILE.read_bytes() == as_bytes(sorted(names))
    assert read_file_set(FILE) == names
    known = data.draw(st.sets(st.sampled_from(sorted(names))) if names else st.just(set()))
    assert read_file_set(FILE, known=known) == names  # known ones skip the name check


@FAKEFS_SETTINGS
@given(names=st.lists(data_names(), min_size=1, max_size=5, unique=True), data=st.data())
def test_a_torn_file_set_reads_its_complete_names(
    fs: FakeFilesystem, names: list[str], data: st.DataObject
) -> None:
    fresh(fs, DIR)
    whole = as_bytes(names)
    cut = data.draw(st.integers(0, len(whole)), label="cut")
    FILE.write_bytes(whole[:cut])
    assert read_file_set(FILE) == set(complete(names, whole[:cut]))


def test_damaged_file_set_lines_are_skipped_with_a_warning(
    fs: FakeFilesystem, caplog: pytest.LogCaptureFixture
) -> None:
    fresh(fs, DIR)
    good = "sequence/sg/0/1-1-0.tsfile"
    FILE.write_bytes(f"{good}\n\nsequence/../x.tsfile\nnot/a/data.txt\n".encode())
    with caplog.at_level(logging.WARNING):
        assert read_file_set(FILE) == {good}
        assert read_file_set(FILE, known={good}) == {good}
    assert sum("not a data file name" in r.getMessage() for r in caplog.records) == 4


def test_an_invalid_name_writes_nothing(fs: FakeFilesystem) -> None:
    fresh(fs, DIR)
    write_file_set(FILE, ["sequence/a/1.tsfile"])
    with pytest.raises(BadName):
        write_file_set(FILE, ["sequence/a/2.tsfile", "sequence/a/bad\nname.tsfile"])
    assert read_file_set(FILE) == {"sequence/a/1.tsfile"}
    assert os.listdir(DIR) == [FILE.name]


# --- shipped_mods.txt / snapshot_mods.txt ----------------------------------------------


@FAKEFS_SETTINGS
@given(entries=st.dictionaries(data_names(), MODS_ID, max_size=6), data=st.data())
def test_mods_identities_round_trip_and_tear_cleanly(
    fs: FakeFilesystem, entries: dict[str, tuple[int, int]], data: st.DataObject
) -> None:
    fresh(fs, DIR)
    write_identities(FILE, entries)
    assert read_identities(FILE) == entries
    whole = FILE.read_bytes()
    lines = whole.decode().split("\n")[:-1]
    assert lines == sorted(lines)
    cut = data.draw(st.integers(0, len(whole)), label="cut")
    FILE.write_bytes(whole[:cut])
    expect = {}
    for line in complete(lines, whole[:cut]):
        name, size, mtime = line.split("\t")
        expect[name] = (int(size), int(mtime))
    assert read_identities(FILE) == expect


def test_damaged_mods_identity_lines_are_skipped(
    fs: FakeFilesystem, caplog: pytest.LogCaptureFixture
) -> None:
    fresh(fs, DIR)
    good = "unsequence/sg/0/1-1-0.tsfile"
    damaged = [
        f"{good}\t12",  # a field short
        f"{good}\t12\t34\t56",  # a field too many
        f"{good}\tx\t34",  # not a number
        f"{good}\t-1\t34",  # a negative size
        "sequence/../x.tsfile\t1\t2",  # not a data file name
    ]
    FILE.write_bytes(as_bytes([*damaged, f"{good}\t7\t8"]) + b"sequence/sg/torn")
    with caplog.at_level(logging.WARNING):
        assert read_identities(FILE) == {good: (7, 8)}
    assert sum("damaged line" in r.getMessage() for r in caplog.records) == len(damaged)


# --- sync.log (sender and receiver) and load.log ---------------------------------------

NAME_LISTS = st.lists(data_names(), max_size=4)


def write_round(path: Path, deleted: list[str], new: list[str], grouped: bool) -> None:
    """A whole round through ``SyncLog``, one line at a time or group-committed."""
    with SyncLog(path) as log:
        log.start()
        log.deleted_start()
        if grouped:
            log.deleted_many(deleted)
        for name in [] if grouped else deleted:
            log.deleted(name)
        log.deleted_end()
        log.tsfile_start()
        if grouped:
            log.tsfile_many(new)
        for name in [] if grouped else new:
            log.tsfile(name)
        log.tsfile_end()
        log.end()


@FAKEFS_SETTINGS
@given(deleted=NAME_LISTS, new=NAME_LISTS, grouped=st.booleans(), data=st.data())
def test_every_prefix_of_a_written_sync_log_reads_as_its_complete_lines(
    fs: FakeFilesystem, deleted: list[str], new: list[str], grouped: bool, data: st.DataObject
) -> None:
    fresh(fs, DIR)
    path = DIR / "sync.log"
    write_round(path, deleted, new, grouped)
    whole = path.read_bytes()
    lines = sync_log_lines(deleted, new)
    assert whole == as_bytes(lines)
    for cut in sorted({len(whole), *data.draw(st.lists(st.integers(0, len(whole)), max_size=8))}):
        path.write_bytes(whole[:cut])
        state = read_sync_log(path)
        model_deleted, model_new = sections(complete(lines, whole[:cut]))
        assert state.deleted == tuple(model_deleted)
        assert state.new == tuple(model_new)
        assert state.ended == (cut == len(whole))


@FAKEFS_SETTINGS
@given(last=st.sets(data_names(), max_size=5), deleted=NAME_LISTS, new=NAME_LISTS)
def test_applying_a_sync_log_is_last_minus_deleted_plus_new_and_idempotent(
    fs: FakeFilesystem, last: set[str], deleted: list[str], new: list[str]
) -> None:
    fresh(fs, DIR)
    path = DIR / "sync.log"
    write_round(path, deleted, new, grouped=True)
    state = read_sync_log(path)
    before = set(last)
    once = apply_sync_log(last, state)
    assert once == (last - set(deleted)) | set(new)
    assert apply_sync_log(once, state) == once
    assert last == before  # the input is left as it was


def test_a_sync_log_torn_then_reopened_continues_on_a_clean_line(fs: FakeFilesystem) -> None:
    fresh(fs, DIR)
    path = DIR / "sync.log"
    first, second = "sequence/sg/0/1-1-0.tsfile", "sequence/sg/0/2-2-0.tsfile"
    path.write_bytes(as_bytes(["sync start", "sync tsfile start", first]) + second[:9].encode())
    with SyncLog(path) as log:
        log.tsfile(second)
        log.tsfile_end()
    assert read_sync_log(path) == SyncLogState(deleted=(), new=(first, second), ended=False)


def test_a_sync_log_refuses_a_bad_name_and_writes_none_of_its_batch(fs: FakeFilesystem) -> None:
    fresh(fs, DIR)
    path = DIR / "sync.log"
    with SyncLog(path) as log:
        log.start()
        log.tsfile_start()
        with pytest.raises(BadName):
            log.tsfile_many(["sequence/sg/0/1-1-0.tsfile", "sequence/sg/0/x\nsync end"])
        with pytest.raises(BadName):
            log.deleted("../etc/passwd.tsfile")
    assert path.read_bytes() == as_bytes(["sync start", "sync tsfile start"])


def test_stray_and_invalid_sync_log_lines_are_ignored_with_a_warning(
    fs: FakeFilesystem, caplog: pytest.LogCaptureFixture
) -> None:
    fresh(fs, DIR)
    path = DIR / "sync.log"
    name = "sequence/sg/0/1-1-0.tsfile"
    lines = ["sync start", name, "sync tsfile start", name, "sequence/../x.tsfile", name, "?"]
    path.write_bytes(as_bytes(lines))
    with caplog.at_level(logging.WARNING):
        assert read_sync_log(path) == SyncLogState(deleted=(), new=(name,), ended=False)
    assert sum("ignoring" in r.getMessage() for r in caplog.records) == 3


LOAD_LINES = ["load sequence/sg/0/1-1-0.tsfile", "delete unsequence/sg/0/2-2-0.tsfile"]
LOAD_BYTES = as_bytes(LOAD_LINES)


def test_load_log_reads_its_complete_records(fs: FakeFilesystem) -> None:
    fresh(fs, DIR)
    for cut in range(len(LOAD_BYTES) + 1):
        FILE.write_bytes(LOAD_BYTES[:cut])
        state = read_load_log(FILE)
        kept = complete(LOAD_LINES, LOAD_BYTES[:cut])
        assert state.loaded == {line[5:] for line in kept if line.startswith("load ")}
        assert state.deleted == {line[7:] for line in kept if line.startswith("delete ")}
