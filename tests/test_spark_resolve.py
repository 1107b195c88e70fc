"""Files that hold the same points: the table answers what IoTDB answers from the live
files (one row per (device, time), the highest-priority file's values), run after run,
whatever order the files arrive and leave in, compaction windows included."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_loader_helpers import (
    SENDER_A,
    Receiver,
    answer,
    source_rows,
    table_rows,
    writer_names,
)

from sealsync.config import LoaderConfig
from sealsync.simulator import EdgeInstance
from spark_loader import read_arrow, run_load
from spark_loader.resolve import PENDING, priority

pytestmark = pytest.mark.slow

GROUP = "root.sg"
D1, D2 = "root.sg.d1", "root.sg.d2"


def _load(config: LoaderConfig, spark: Any) -> Any:
    report = run_load(config, spark=spark, sync=False)
    assert report.ok, report.skipped
    return report


def _rows(device: str, times: range, **columns: Any) -> pa.Table:
    """Points of one device; a column's value is ``f(time)`` or None (absent)."""
    data: dict[str, Any] = {
        "time": pa.array(list(times), pa.int64()),
        "device": pa.array([device] * len(times)),
    }
    for name, f in columns.items():
        data[name] = pa.array([f(t) for t in times], pa.float64())
    return pa.table(data)


def _write(edge: EdgeInstance, table: pa.Table, name: str, unsequence: bool = False) -> str:
    return edge.write_table(table, GROUP, 0, name, unsequence=unsequence)


def _check(config: LoaderConfig, recv: Receiver) -> list[tuple]:
    """The table is IoTDB's answer over the placed files, and no (device, time) twice."""
    rows = table_rows(config.table_path)
    assert rows == source_rows(recv)
    keys = Counter((r[0], r[3], r[2]) for r in rows)
    assert max(keys.values(), default=1) == 1
    return rows


def _values(config: LoaderConfig) -> dict[tuple[str, int], dict[str, Any]]:
    """(device, time) -> the row's non-null values and its source file."""
    out = {}
    for row in read_arrow(config.table_path).to_pylist():
        key = (row["device"], row["time"])
        assert key not in out, f"{key} twice"
        out[key] = {k: v for k, v in row.items() if v is not None and k not in ("time", "device")}
    return out


def test_priority_is_iotdbs() -> None:
    seq = priority("sequence/root.sg/0/1000-9-0-0.tsfile")
    assert priority("unsequence/root.sg/0/10-1-0-0.tsfile") > seq  # unsequence wins
    assert priority("sequence/root.sg/0/10-10-0-0.tsfile") > seq  # then the version
    assert priority("sequence/root.sg/0/2000-9-0-0.tsfile") > seq  # then the name's time
    assert priority("sequence/root.sg/0/1000-9-1-0.tsfile") > seq  # compaction count
    assert priority("sequence/root.sg/0/odd.tsfile") < seq
    # the test's own reference ranks the same way
    names = [
        "sequence/root.sg/0/1000-9-0-0.tsfile",
        "unsequence/root.sg/0/10-1-0-0.tsfile",
        "sequence/root.sg/0/10-10-0-0.tsfile",
        "sequence/root.sg/0/2000-9-0-0.tsfile",
        "sequence/root.sg/0/1000-9-1-0.tsfile",
    ]
    from spark_loader_helpers import iotdb_rank

    assert sorted(names, key=priority) == sorted(names, key=iotdb_rank)


def test_an_unsequence_file_overwrites_a_sequence_file(tmp_path: Path, spark: Any) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    seq = _write(
        edge,
        pa.concat_tables(
            [
                _rows(D1, range(1, 11), s1=lambda t: 1.0, s2=lambda t: 10.0 + t),
                _rows(D2, range(1, 11), s1=lambda t: 1.0, s2=lambda t: 10.0 + t),
            ]
        ),
        "1-1-0-0.tsfile",
    )
    recv.place(edge, seq)
    config = recv.config(tmp_path)
    _load(config, spark)
    assert len(_check(config, recv)) == 20
    # an out-of-order write: d1 at 5..6 with s1 only (s2 absent there: the sequence value stays)
    unseq = _write(
        edge,
        _rows(D1, range(5, 7), s1=lambda t: 2.0, s2=lambda t: None),
        "7-2-0-0.tsfile",
        unsequence=True,
    )
    recv.place(edge, unseq)

    report = _load(config, spark)

    assert report.resolved == 1
    _check(config, recv)
    got = _values(config)
    assert len(got) == 20
    assert got[(D1, 5)] == {
        "s1": 2.0,
        "s2": 15.0,
        "sender": SENDER_A,
        "source_file": unseq,
        "file_id": got[(D1, 5)]["file_id"],
    }
    assert got[(D1, 4)]["s1"] == 1.0 and got[(D1, 4)]["source_file"] == seq
    assert got[(D2, 5)]["s1"] == 1.0  # another device: untouched
    # a rerun with nothing new changes nothing and resolves nothing
    again = _load(config, spark)
    assert (again.ingested, again.resolved) == (0, 0)
    assert not (Path(config.state_dir) / PENDING).exists()


def test_two_sequence_files_with_the_same_points_the_higher_version_wins(
    tmp_path: Path, spark: Any
) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    low = _write(edge, _rows(D1, range(0, 20), s1=lambda t: 1.0), "100-3-0-0.tsfile")
    high = _write(edge, _rows(D1, range(10, 30), s1=lambda t: 2.0), "50-4-0-0.tsfile")
    recv.place(edge, low)
    recv.place(edge, high)
    config = recv.config(tmp_path)

    _load(config, spark)

    _check(config, recv)
    got = _values(config)
    assert len(got) == 30
    assert {t for (_, t), v in got.items() if v["s1"] == 2.0} == set(range(10, 30))
    assert {v["source_file"] for (_, t), v in got.items() if t >= 10} == {high}


def test_a_deleted_file_gives_back_the_points_another_file_holds(
    tmp_path: Path, spark: Any
) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    a = _write(edge, _rows(D1, range(0, 10), s1=lambda t: 1.0), "0-1-0-0.tsfile")
    b = _write(edge, _rows(D1, range(5, 15), s1=lambda t: 2.0), "5-2-0-0.tsfile")
    recv.place(edge, a)
    recv.place(edge, b)
    config = recv.config(tmp_path)
    _load(config, spark)
    assert _values(config)[(D1, 7)]["s1"] == 2.0

    recv.remove(b)
    report = _load(config, spark)

    assert report.removed == 1
    _check(config, recv)
    got = _values(config)
    assert sorted(t for _, t in got) == list(range(10))
    assert all(v["s1"] == 1.0 and v["source_file"] == a for v in got.values())


def _compaction(
    tmp_path: Path, spark: Any, sources: list[tuple[pa.Table, str, bool]], target_name: str
) -> None:
    """Sources loaded; then the target sealed beside them (the window), then the
    sources deleted; and the window seen in the other order too (target first)."""
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    placed = [_write(edge, t, name, unseq) for t, name, unseq in sources]
    expected = answer(
        {(SENDER_A, rel): t.to_pylist() for rel, (t, _, _) in zip(placed, sources, strict=True)}
    )
    # the target holds what IoTDB's compaction writes: the answer over its sources
    merged = pa.Table.from_pylist(
        [{"time": r[2], "device": r[3], **dict(r[4])} for r in expected]
    ).sort_by([("device", "ascending"), ("time", "ascending")])
    target = _write(edge, merged, target_name)
    for rel in placed:
        recv.place(edge, rel)
    config = recv.config(tmp_path)
    _load(config, spark)
    _check(config, recv)

    recv.place(edge, target)  # mid-way: target sealed, sources still there
    _load(config, spark)
    rows = _check(config, recv)
    assert len(rows) == len(expected)
    assert sorted(r[2:] for r in rows) == sorted(r[2:] for r in expected)

    for rel in placed:  # after: the sources deleted
        recv.remove(rel)
    _load(config, spark)
    rows = _check(config, recv)
    assert sorted(r[2:] for r in rows) == sorted(r[2:] for r in expected)
    assert {r[1] for r in rows} == {target}


def test_an_inner_space_compaction_mid_way_and_after(tmp_path: Path, spark: Any) -> None:
    _compaction(
        tmp_path,
        spark,
        [
            (_rows(D1, range(0, 10), s1=lambda t: 1.0), "0-1-0-0.tsfile", False),
            (_rows(D1, range(10, 20), s1=lambda t: 2.0), "10-2-0-0.tsfile", False),
            (_rows(D1, range(18, 25), s1=lambda t: 3.0), "18-3-0-0.tsfile", False),
        ],
        "0-1-1-0.tsfile",
    )


def test_a_cross_space_compaction_mid_way_and_after(tmp_path: Path, spark: Any) -> None:
    _compaction(
        tmp_path,
        spark,
        [
            (_rows(D1, range(0, 10), s1=lambda t: 1.0, s2=lambda t: 5.0), "0-1-0-0.tsfile", False),
            (_rows(D1, range(4, 8), s1=lambda t: 9.0, s2=lambda t: None), "4-2-0-0.tsfile", True),
        ],
        "0-1-0-1.tsfile",
    )


def test_a_run_killed_before_resolving_is_completed_by_the_next(
    tmp_path: Path, spark: Any, monkeypatch: Any
) -> None:
    from spark_loader import ingest

    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    a = _write(edge, _rows(D1, range(0, 10), s1=lambda t: 1.0), "0-1-0-0.tsfile")
    b = _write(edge, _rows(D1, range(5, 15), s1=lambda t: 2.0), "5-2-0-0.tsfile")
    recv.place(edge, a)
    recv.place(edge, b)
    config = recv.config(tmp_path)

    def killed(*args: Any, **kwargs: Any) -> bool:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(ingest.Ingest, "rewrite_groups", killed)
        with pytest.raises(KeyboardInterrupt):
            run_load(config, spark=spark, sync=False)
    assert (Path(config.state_dir) / PENDING).exists()
    assert table_rows(config.table_path) == []  # the run's one commit never came

    report = _load(config, spark)

    assert (report.ingested, report.resolved) == (2, 1)
    _check(config, recv)
    assert not (Path(config.state_dir) / PENDING).exists()


def test_a_new_mods_on_the_winning_file_gives_back_the_other_value_and_full_agrees(
    tmp_path: Path, spark: Any
) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    seq = _write(edge, _rows(D1, range(0, 10), s1=lambda t: 1.0), "0-1-0-0.tsfile")
    unseq = _write(edge, _rows(D1, range(3, 6), s1=lambda t: 2.0), "3-2-0-0.tsfile", True)
    recv.place(edge, seq)
    recv.place(edge, unseq)
    config = recv.config(tmp_path)
    _load(config, spark)
    assert _values(config)[(D1, 4)]["s1"] == 2.0

    recv.add_mods(unseq, D1, 4)  # the unsequence file's points up to 4 deleted
    report = _load(config, spark)

    assert (report.ingested, report.removed, report.resolved) == (1, 1, 1)
    _check(config, recv)
    got = _values(config)
    assert [got[(D1, t)]["s1"] for t in range(0, 10)] == [1.0] * 5 + [2.0] + [1.0] * 4
    incremental = table_rows(config.table_path)

    full = run_load(config, spark=spark, sync=False, full=True)

    assert full.ok and full.resolved == 1
    assert table_rows(config.table_path) == incremental
    assert (_load(config, spark).resolved, _load(config, spark).ingested) == (0, 0)


def _chain(tmp_path: Path, files: int = 6) -> tuple[EdgeInstance, Receiver]:
    """``files`` files of one sender, each overlapping the next: one group."""
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    for i in range(files):
        table = _rows(D1, range(i * 100, i * 100 + 150), s1=lambda t, i=i: float(i))
        rel = _write(edge, table, f"{i * 100}-{i + 1}-0-0.tsfile", unsequence=i % 2 == 1)
        recv.place(edge, rel)
    return edge, recv


def test_a_crash_between_the_partitions_of_a_group_is_repaired_by_the_rerun(
    tmp_path: Path, spark: Any, monkeypatch: Any
) -> None:
    from spark_loader import delta_log, table

    _, recv = _chain(tmp_path)
    config = recv.config(tmp_path)
    moved: list[Path] = []
    real = table.Table.move_in

    def crash_after_two(
        self: Any, folder: Path, partition: Any, tags: dict[str, str] | None = None
    ) -> None:
        if tags and len(moved) == 2:
            raise KeyboardInterrupt  # killed between two partitions of the group
        real(self, folder, partition, tags)
        if tags:
            moved.append(partition.path)

    with monkeypatch.context() as m:
        m.setattr(table.Table, "move_in", crash_after_two)
        with pytest.raises(KeyboardInterrupt):
            run_load(config, spark=spark, sync=False)
    assert len(moved) == 2
    assert (Path(config.state_dir) / PENDING).exists()
    assert not delta_log.is_delta(config.table_path)  # the run's one commit never came

    report = _load(config, spark)

    assert report.resolved == 1
    rows = _check(config, recv)
    assert len(rows) == 650  # times 0..649, each once
    assert not (Path(config.state_dir) / PENDING).exists()


def test_a_kill_during_the_group_job_then_a_rerun_equals_one_clean_run(
    tmp_path: Path, spark: Any
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    _, recv = _chain(tmp_path, files=8)
    crashed = recv.config(tmp_path, "crashed")
    script = (
        "from pathlib import Path\n"
        "from sealsync.config import LoaderConfig\n"
        "from spark_loader import run_load\n"
        f"config = LoaderConfig([Path({str(crashed.receiver_data_dirs[0])!r})], "
        f"Path({str(crashed.table_path)!r}), Path({str(crashed.state_dir)!r}), 'local[1]')\n"
        "run_load(config)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    table = Path(crashed.table_path)

    def in_group_job() -> bool:  # every file in, plain; the group's job writing
        parts = list(table.glob("sender=*/source_file=*/file_id=*"))
        staging = table / writer_names(crashed).staging
        return len(parts) == 8 and staging.is_dir() and any(staging.iterdir())

    deadline = time.monotonic() + 240
    while not in_group_job():
        assert proc.poll() is None, "the loader finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (Path(crashed.state_dir) / PENDING).exists()
    assert table_rows(crashed.table_path) == []  # the files moved in are not committed

    report = _load(crashed, spark)

    assert report.resolved == 1 and report.ingested == 8
    rows = _check(crashed, recv)
    clean = recv.config(tmp_path, "clean")
    _load(clean, spark)
    assert rows == table_rows(clean.table_path)
    assert len(rows) == 850  # times 0..849, each once


def test_two_groups_are_resolved_in_one_job_each_on_its_own(tmp_path: Path, spark: Any) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    for base, version in ((0, 1), (1000, 3)):
        low = _write(
            edge,
            _rows(D1, range(base, base + 20), s1=lambda t: 1.0),
            f"{base}-{version}-0-0.tsfile",
        )
        high = _write(
            edge,
            _rows(D1, range(base + 10, base + 30), s1=lambda t: 2.0),
            f"{base + 10}-{version + 1}-0-0.tsfile",
        )
        recv.place(edge, low)
        recv.place(edge, high)
    alone = _write(edge, _rows(D2, range(0, 5), s1=lambda t: 7.0), "0-9-0-0.tsfile")
    recv.place(edge, alone)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert report.resolved == 2
    rows = _check(config, recv)
    assert len(rows) == 30 + 30 + 5
    assert {r[1] for r in rows if r[3] == D2} == {alone}


def test_a_plain_parquet_table_of_resolved_groups_is_converted_as_it_is(
    tmp_path: Path, spark: Any
) -> None:
    """The table as the loader left it before it was Delta: a resolved group's partitions
    with their ``_sealsync_group.json``, a member that won no row an empty folder. The
    next run makes it a Delta table whose files carry the groups as tags: nothing is
    read again or rewritten, every row stays."""
    import json
    import shutil

    from spark_loader import delta_log
    from spark_loader.table_layout import BOUNDS_TAG, GROUP_TAG, OLD_SIDECAR

    edge, recv = _chain(tmp_path)
    covered = _write(edge, _rows(D1, range(50, 60), s1=lambda t: 9.0), "50-0-0-0.tsfile")
    recv.place(edge, covered)  # the lowest version, inside file 0's points: wins no row
    config = recv.config(tmp_path)
    assert _load(config, spark).resolved == 1
    expected = _check(config, recv)
    empty = 0
    for f in delta_log.read(config.table_path).files.values():
        sidecar = {"group": json.loads(f.tags[GROUP_TAG]), "bounds": json.loads(f.tags[BOUNDS_TAG])}
        (Path(f.path).parent / OLD_SIDECAR).write_text(json.dumps(sidecar))
        if f.rows == 0:
            Path(f.path).unlink()  # the plain table kept an empty folder
            empty += 1
    assert empty == 1
    shutil.rmtree(Path(config.table_path) / "_delta_log")

    report = _load(config, spark)

    assert (report.resolved, report.ingested, report.unchanged) == (0, 0, 7)
    assert report.notes[0].startswith("converting the plain Parquet table")
    assert _check(config, recv) == expected
    files = delta_log.read(config.table_path).files.values()
    assert len({f.partition["file_id"] for f in files}) == 7
    assert all(GROUP_TAG in f.tags and BOUNDS_TAG in f.tags for f in files)
    assert _load(config, spark).resolved == 0
