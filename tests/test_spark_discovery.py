"""Discovery, file identity, the table's folder rules and the loader's locks (no Spark)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_loader_helpers import SENDER_A, SENDER_B, Receiver

from sealsync.errors import LockHeld
from sealsync.received import is_sender_folder
from sealsync.simulator import EdgeInstance
from spark_loader.discovery import SourceFile, discover, file_id
from spark_loader.state import (
    DRIVER_LOCK_FILE,
    LOCK_FILE,
    FileRecord,
    IngestState,
    load_state,
    loader_lock,
    save_state,
    state_path,
    wait_for_previous_driver,
)
from spark_loader.table import Partition, Table
from spark_loader.table_layout import MAX_FOLDER_BYTES, UNCOMMITTED, folder_value, unescape


def _edge(tmp_path: Path) -> EdgeInstance:
    return EdgeInstance(tmp_path / "edge")


def test_discovers_every_senders_files_in_both_roots_and_nothing_else(tmp_path: Path) -> None:
    edge = _edge(tmp_path)
    recv = Receiver(tmp_path, data_dirs=2)
    seq = edge.write_file("root.sg1", 0, devices=["root.sg1.d1"], rows_per_device=3)
    unseq = edge.write_file(
        "root.sg1", 0, devices=["root.sg1.d1"], rows_per_device=3, unsequence=True, fmt="parquet"
    )
    recv.place(edge, seq, SENDER_A)
    recv.place(edge, unseq, SENDER_B, data_dir=1)
    data = recv.data_dirs[0]
    # The host's own file (no UUID folder), a staged file, sidecars, a temporary.
    host = data / "sequence" / "root.sg1" / "1" / "9-9-0.tsfile"
    host.write_bytes(b"host")
    staged = data / "sync-receiver" / f"127.0.0.1_{SENDER_A}" / "data" / seq
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"staged")
    sender_dir = recv.placed[(SENDER_A, seq)].parent
    (sender_dir / "x.tsfile.mods").write_bytes(b"m")
    (sender_dir / ".tmp.tsfile").write_bytes(b"t")
    # A folder that is a UUID in another spelling is not a sender folder.
    upper = data / "sequence" / "root.sg1" / "1" / SENDER_A.upper()
    upper.mkdir()
    (upper / "1-1-0.tsfile").write_bytes(b"u")

    found = discover(recv.data_dirs)

    assert [(f.sender, f.name) for f in found.files] == [(SENDER_A, seq), (SENDER_B, unseq)]
    assert [f.path for f in found.files] == [
        recv.placed[(SENDER_A, seq)],
        recv.placed[(SENDER_B, unseq)],
    ]
    assert found.skipped == {}
    st = recv.placed[(SENDER_A, seq)].stat()
    assert (found.files[0].size, found.files[0].mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_the_same_file_in_two_data_dirs_is_reported_once(tmp_path: Path) -> None:
    edge = _edge(tmp_path)
    recv = Receiver(tmp_path, data_dirs=2)
    rel = edge.write_file("root.sg1", 0, devices=["root.sg1.d1"], rows_per_device=3)
    first = recv.place(edge, rel, SENDER_A, data_dir=0)
    second = recv.place(edge, rel, SENDER_A, data_dir=1)

    found = discover(recv.data_dirs)

    assert [f.path for f in found.files] == [first]
    assert list(found.skipped) == [str(second)]
    assert "duplicate" in found.skipped[str(second)]


def test_missing_data_dirs_roots_are_empty(tmp_path: Path) -> None:
    assert discover([tmp_path / "nothing"]).files == []


def test_file_id_changes_with_every_part_of_the_identity() -> None:
    base = file_id(SENDER_A, "sequence/a/1.tsfile", 10, 5)
    others = {
        file_id(SENDER_B, "sequence/a/1.tsfile", 10, 5),
        file_id(SENDER_A, "sequence/a/2.tsfile", 10, 5),
        file_id(SENDER_A, "sequence/a/1.tsfile", 11, 5),
        file_id(SENDER_A, "sequence/a/1.tsfile", 10, 6),
        file_id(SENDER_A, "sequence/a/1.tsfile", 10, 5, (0, 0)),
        file_id(SENDER_A, "sequence/a/1.tsfile", 10, 5, (1, 7)),
        file_id(SENDER_A, "sequence/a/1.tsfile", 10, 5, (1, 8)),
    }
    assert base == file_id(SENDER_A, "sequence/a/1.tsfile", 10, 5)
    assert base not in others and len(others) == 7
    assert base.startswith("f") and len(base) == 33 and base[1:].isalnum()


def test_the_mods_sidecar_is_part_of_the_file_identity(tmp_path: Path) -> None:
    """Every change of ``X.mods`` gives the file a new id; without one the id is the
    four-field hash of before, so tables loaded before ``.mods`` counted keep theirs."""
    edge = _edge(tmp_path)
    recv = Receiver(tmp_path)
    rel = edge.write_file("root.sg1", 0, devices=["root.sg1.d1"], rows_per_device=3)
    recv.place(edge, rel, SENDER_A)
    mods_path = recv.mods_path(rel, SENDER_A)

    def only() -> SourceFile:
        found = discover(recv.data_dirs)
        assert found.skipped == {} and len(found.files) == 1
        return found.files[0]

    plain = only()
    assert plain.mods is None and plain.mods_path == mods_path
    assert plain.file_id == file_id(SENDER_A, rel, plain.size, plain.mtime_ns)
    recv.add_mods(rel, "root.sg1.d1", 1000, SENDER_A)
    first = only()
    st = mods_path.stat()
    assert first.mods == (st.st_size, st.st_mtime_ns)
    assert (first.size, first.mtime_ns) == (plain.size, plain.mtime_ns)
    recv.add_mods(rel, "root.sg1.d1", 2000, SENDER_A)  # it grows
    grown = only()
    os.utime(mods_path, ns=(st.st_atime_ns, mods_path.stat().st_mtime_ns + 1))  # replaced
    touched = only()
    ids = [plain.file_id, first.file_id, grown.file_id, touched.file_id]
    assert len(set(ids)) == 4 and touched.mods is not None and grown.mods is not None
    assert touched.mods[0] == grown.mods[0]  # the same size: the mtime alone told them apart
    assert touched.unchanged() and not grown.unchanged() and not plain.unchanged()
    mods_path.unlink()
    assert only().file_id == plain.file_id and plain.unchanged()
    mods_path.mkdir()  # a .mods that is no file: its deletions cannot be read
    found = discover(recv.data_dirs)
    path = str(recv.placed[(SENDER_A, rel)])
    assert found.files == [] and list(found.skipped) == [path]
    assert found.skipped[path].startswith("cannot stat its .mods: not a regular file")


def test_sender_folder_needs_the_canonical_spelling() -> None:
    assert is_sender_folder(SENDER_A)
    assert not is_sender_folder(SENDER_A.upper())
    assert not is_sender_folder(SENDER_A.replace("-", ""))
    assert not is_sender_folder("root.sg1")


def test_partition_values_round_trip_through_escaping() -> None:
    names = [
        "sequence/root.sg1/0/1-1-0.parquet",
        "sequence/a b/%x=y:z#[]{}*?+/1.parquet",
        "sequence/root.中国 ü/0/1-1-0.tsfile",
    ]
    for name in names:
        escaped = folder_value(name)
        assert escaped is not None
        assert "/" not in escaped and "=" not in escaped and " " not in escaped
        assert unescape(escaped) == name
    assert folder_value("sequence/root.中国 ü/0/1-1-0.tsfile") == (
        "sequence%2Froot.中国%20ü%2F0%2F1-1-0.tsfile"  # Spark decodes %XX per character
    )
    longest = "s" * (MAX_FOLDER_BYTES - len("source_file="))
    assert folder_value(longest) == longest
    assert folder_value(longest + "s") is None
    assert folder_value("/" * 81) is not None  # 243 bytes once escaped: fits
    assert folder_value("/" * 82) is None
    with pytest.raises(ValueError, match="too long for a source_file partition folder"):
        Table(Path("t")).partition(SENDER_A, longest + "s", "f1")


def _part(folder: Path, name: str = "part-0.parquet", rows: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = pa.table({"time": pa.array(range(rows), pa.int64()), "device": ["root.a.d1"] * rows})
    pq.write_table(data, folder / name)
    return folder / name


def test_a_plain_parquet_table_is_taken_in_and_leftovers_swept(tmp_path: Path) -> None:
    """A table without a Delta log (the plain Parquet layout) is opened as the files
    the run's commit will add; hidden leftovers and the earliest layout are swept."""
    table = Table(tmp_path / "t")
    for sender, name, fid in [
        (SENDER_A, "a/1", "f1"),
        (SENDER_A, "a/1", "f2"),
        (SENDER_B, "b 2", "f3"),
    ]:
        _part(Path(table.partition(sender, name, fid).path))
    old_layout = table.path / f"sender={SENDER_B}" / "file_id=f9"  # an earlier version's
    _part(old_layout)
    (table.path / ".spark-staging-123" / "sender=x").mkdir(parents=True)
    (table.path / ".sealsync-staging" / "abc" / "__sealsync_key=0").mkdir(parents=True)
    (table.path / "_temporary").mkdir()
    (table.path / "foreign").mkdir()

    table.sweep()
    notes = table.open()

    assert notes == [
        f"converting the plain Parquet table {table.path} to Delta: "
        "3 data files become the first version's"
    ]
    parts = table.partitions()
    assert sorted(parts) == ["f1", "f2", "f3"]
    expected = table.path / f"sender={SENDER_B}" / "source_file=b%202" / "file_id=f3"
    assert parts["f3"] == Partition(SENDER_B, "b 2", "f3", str(expected))
    assert parts["f3"].rows == 2 and table.changed
    assert sorted(os.listdir(table.path)) == [
        "foreign",
        f"sender={SENDER_A}",
        f"sender={SENDER_B}",
    ]
    table.delete(parts["f3"])
    assert sorted(table.partitions()) == ["f1", "f2"]
    assert (expected / "part-0.parquet").exists()  # a converted file is never deleted


def test_files_moved_in_are_invisible_until_the_commit_and_go_if_it_never_comes(
    tmp_path: Path,
) -> None:
    """A run's files are named in the uncommitted list before they move in; a table
    that does not record the run's number afterwards gets them removed on open."""
    table = Table(tmp_path / "t")
    table.ensure()
    assert table.open() == []
    written = tmp_path / "t" / ".sealsync-staging" / "run" / "__sealsync_key=3"
    _part(written)
    target = table.partition(SENDER_A, "sequence/x/1.tsfile", "f1")

    table.move_in(str(written), target)

    moved = Path(target.path) / "part-0.parquet"
    assert moved.exists() and not (written / "part-0.parquet").exists()
    assert sorted(table.partitions()) == ["f1"] and table.partitions()["f1"].rows == 2
    assert json.loads((table.path / UNCOMMITTED).read_text())["files"] == [
        moved.relative_to(table.path).as_posix()
    ]
    table.sync([target])  # fsyncs the files and every folder up to the table
    assert Table(table.path).partitions() == {}  # what a reader sees: no commit, no file

    again = Table(table.path)
    assert again.open() == ["removed 1 data files a run killed before its commit wrote"]
    assert not moved.exists() and not (table.path / UNCOMMITTED).exists()
    assert again.partitions() == {} and not again.changed
    assert os.listdir(table.path) == [".sealsync-staging"]


def test_state_round_trips_and_a_damaged_file_is_rebuilt(tmp_path: Path) -> None:
    state = IngestState(
        files={"fa": FileRecord(SENDER_A, "sequence/x/1.tsfile", 10, 20, 30)},
        columns={"s1": '"long"'},
    )
    save_state(tmp_path, state)
    assert load_state(tmp_path) == state
    state_path(tmp_path).write_text("{not json")
    damaged = load_state(tmp_path)
    assert damaged.files == {} and damaged.columns == {}
    assert "rebuilding" in damaged.rebuilt


def test_a_second_loader_stops_at_once(tmp_path: Path) -> None:
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: conflicts like another process
        with pytest.raises(LockHeld, match="another sealsync load"):
            with loader_lock(tmp_path):
                pass
    finally:
        os.close(fd)
    with loader_lock(tmp_path):
        pass


@pytest.mark.slow
def test_waits_for_a_dead_runs_spark_driver(tmp_path: Path) -> None:
    """A process holding spark-driver.lock (the killed run's JVM) blocks the next run."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(tmp_path / DRIVER_LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(float(sys.argv[1]))\n",
            "1.5",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        with pytest.raises(LockHeld, match="still holds"):
            wait_for_previous_driver(tmp_path, timeout=0.3)
        started = time.monotonic()
        wait_for_previous_driver(tmp_path, timeout=30)  # returns once the holder exits
        assert time.monotonic() - started > 0.3
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
