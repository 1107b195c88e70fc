"""The Spark loader against real Spark (local mode, the suite's one ``spark`` session)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from config_helpers import loader_config_file, write_config
from spark_loader_helpers import (
    PARQUET_A_START,
    SENDER_A,
    SENDER_B,
    Receiver,
    file_rows,
    partition_dirs,
    snapshot,
    source_rows,
    table_rows,
    table_versions,
    two_senders,
    uncommitted_list,
)

from sealsync import formats
from sealsync.config import LoaderConfig
from sealsync.simulator import EdgeInstance
from spark_loader import delta_log, jvm, localfs, read_arrow, run_load
from spark_loader import run as run_module
from spark_loader.ingest import KEYED_FORMAT
from spark_loader.state import load_state, state_path
from spark_loader.table import Table
from spark_loader.table_layout import part_files, unescape

pytestmark = pytest.mark.slow


def _load(config: LoaderConfig, spark: Any, **kwargs: Any) -> Any:
    return run_load(config, spark=spark, sync=False, **kwargs)


def test_ingests_both_formats_with_provenance_and_merged_schema(tmp_path: Path, spark: Any) -> None:
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert report.ok and report.skipped == {}
    assert (report.ingested, report.removed, report.unchanged) == (4, 0, 0)
    own_counts = {key: formats.inspect(path).rows for key, path in recv.placed.items()}
    assert sum(own_counts.values()) == 80 + 25 + 30 + 20
    assert report.rows_written == sum(own_counts.values())
    assert table_rows(config.table_path) == source_rows(recv)
    table = read_arrow(config.table_path)
    counts: dict[tuple[str, str], int] = {}
    for row in table.select(["sender", "source_file"]).to_pylist():
        key = (row["sender"], row["source_file"])
        counts[key] = counts.get(key, 0) + 1
    assert counts == own_counts
    assert len(partition_dirs(config.table_path)) == 4
    # Spark reads the same table through Delta, every column in the table's schema.
    df = spark.read.format("delta").load(str(config.table_path))
    assert df.count() == sum(own_counts.values())
    assert set(df.columns) == {
        "time",
        "device",
        "s1",
        "s2",
        "s3",
        "s7",
        "source_file",
        "sender",
        "file_id",
    }
    assert df.where("s7 is not null").count() == 30  # only the one file has s7


def test_types_are_normalised_and_a_conflicting_file_is_refused(tmp_path: Path, spark: Any) -> None:
    edge = EdgeInstance(tmp_path / "edge")
    recv = Receiver(tmp_path)
    base = {"time": pa.array([1, 2], pa.int64()), "device": ["root.a.d1", "root.a.d1"]}
    narrow = edge.write_table(
        pa.table(
            {**base, "v": pa.array([1, 2], pa.int32()), "w": pa.array([0.5, 1.5], pa.float32())}
        ),
        "root.a",
        0,
        fmt="parquet",
    )
    wide = edge.write_table(
        pa.table(
            {
                **base,
                "v": pa.array([3, 2**40], pa.int64()),
                "w": pa.array([2.25, None], pa.float64()),
            }
        ),
        "root.a",
        1,
        fmt="parquet",
    )
    tsfile = edge.write_table(
        pa.table(
            {**base, "v": pa.array([7, 8], pa.int32()), "w": pa.array([0.25, 4.0], pa.float32())}
        ),
        "root.a",
        2,
        fmt="tsfile",
    )
    clash = edge.write_table(pa.table({**base, "v": ["x", "y"]}), "root.a", 3, fmt="parquet")
    for rel in (narrow, wide, tsfile):
        recv.place(edge, rel)
    clash_path = recv.place(edge, clash)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    # a measurement of another kind gets a column of its own: nothing refused or converted
    assert report.ok and report.ingested == 4, report.skipped
    assert clash_path.exists()
    table = read_arrow(config.table_path)
    assert table.schema.field("v").type == pa.int64()
    assert table.schema.field("v__string").type == pa.string()
    assert table.schema.field("w").type == pa.float64()
    assert table_rows(config.table_path) == source_rows(recv)
    state = load_state(config.state_dir)
    assert state.columns == {"v": '"long"', "v__string": '"string"', "w": '"double"'}
    assert state.keys == {
        "v": ["v", "long"],
        "v__string": ["v", "string"],
        "w": ["w", "double"],
    }


def test_rerun_with_nothing_new_changes_nothing(tmp_path: Path, spark: Any) -> None:
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    _load(config, spark)
    before_table = snapshot(config.table_path)
    before_state = state_path(config.state_dir).stat().st_mtime_ns
    rows = table_rows(config.table_path)

    report = _load(config, spark)

    assert (report.ingested, report.removed, report.unchanged, report.rows_written) == (0, 0, 4, 0)
    assert report.ok
    assert snapshot(config.table_path) == before_table
    assert state_path(config.state_dir).stat().st_mtime_ns == before_state
    assert table_rows(config.table_path) == rows


def test_deleted_and_replaced_files_take_exactly_their_rows_out(tmp_path: Path, spark: Any) -> None:
    edge, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    _load(config, spark)
    gone = [rel for (sender, rel) in recv.placed if sender == SENDER_B][0]
    replaced = [rel for (sender, rel) in recv.placed if sender == SENDER_A][0]
    recv.remove(gone, SENDER_B)
    # The same name with other content: a new version of the file.
    recv.remove(replaced, SENDER_A)
    (edge.path(replaced)).unlink()
    edge.write_file(
        "root.sg1", 0, replaced.rsplit("/", 1)[1], devices=["root.sg1.d5"], rows_per_device=7
    )
    recv.place(edge, replaced, SENDER_A)
    before = partition_dirs(config.table_path)

    report = _load(config, spark)

    assert (report.ingested, report.removed, report.unchanged) == (1, 2, 2)
    assert report.rows_removed == 30 + 80 and report.rows_written == 7
    assert table_rows(config.table_path) == source_rows(recv)
    after = partition_dirs(config.table_path)
    assert len(after) == 3 and len(before - after) == 2 and len(after - before) == 1


def test_full_rebuild_equals_incremental_runs(tmp_path: Path, spark: Any) -> None:
    edge, recv = two_senders(tmp_path)
    ts_a, _, _, pq_b = list(recv.placed)
    edge.add_mods(ts_a[1], "root.sg1.d2", 5000)
    recv.place(edge, ts_a[1], ts_a[0])
    incremental = recv.config(tmp_path, "inc")
    _load(incremental, spark)
    recv.add_mods(ts_a[1], "root.sg1.d1", 3000, ts_a[0])  # a .mods grows
    recv.add_mods(pq_b[1], "root.sg2.d8", 7000, pq_b[0])  # a first .mods
    extra = edge.write_file(
        "root.sg3",
        0,
        devices=["root.sg3.d1"],
        rows_per_device=12,
        fmt="parquet",
        measurements=("s9",),
    )
    recv.place(edge, extra, SENDER_B)
    dropped = [rel for (sender, rel) in recv.placed if sender == SENDER_A][1]
    recv.remove(dropped, SENDER_A)
    _load(incremental, spark, batch_files=1)

    full = LoaderConfig(
        recv.data_dirs,
        Path(incremental.table_path).with_name("full-table"),
        incremental.state_dir.with_name("full-state"),
    )
    _load(full, spark)  # a table with other content first: --full must clear it
    report = _load(full, spark, full=True)

    assert report.ingested == 4 and report.ok
    assert report.rows_written == 80 - 6 - 4 + 30 + 20 - 8 + 12
    assert table_rows(full.table_path) == table_rows(incremental.table_path) == source_rows(recv)
    assert partition_dirs(full.table_path) == partition_dirs(incremental.table_path)
    assert load_state(full.state_dir).files == load_state(incremental.state_dir).files


def test_files_without_rows_are_recorded_without_a_partition(tmp_path: Path, spark: Any) -> None:
    edge, recv = two_senders(tmp_path)
    empty = pa.table(
        {
            "time": pa.array([], pa.int64()),
            "device": pa.array([], pa.string()),
            "s1": pa.array([], pa.int64()),
        }
    )
    empties = [edge.write_table(empty, "root.e", 0, fmt=fmt) for fmt in ("parquet", "tsfile")]
    for rel in empties:
        recv.place(edge, rel)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert report.ok and report.ingested == 6 and report.rows_written == 155
    assert len(partition_dirs(config.table_path)) == 4
    assert sorted(r.rows for r in load_state(config.state_dir).files.values()) == [
        0,
        0,
        20,
        25,
        30,
        80,
    ]
    assert _load(config, spark).unchanged == 6  # not ingested again and again
    for rel in empties:
        recv.remove(rel)

    report = _load(config, spark)

    assert (report.removed, report.rows_removed, report.unchanged) == (2, 0, 4)
    assert table_rows(config.table_path) == source_rows(recv)


def test_corrupt_files_are_reported_skipped_and_retried(tmp_path: Path, spark: Any) -> None:
    edge, recv = two_senders(tmp_path)
    bad_ts = edge.write_file("root.sg4", 0, devices=["root.sg4.d1"], rows_per_device=50)
    bad_pq = edge.write_file(
        "root.sg4", 1, devices=["root.sg4.d1"], rows_per_device=50, fmt="parquet"
    )
    good = {rel: edge.path(rel).read_bytes() for rel in (bad_ts, bad_pq)}
    for rel in (bad_ts, bad_pq):  # truncated copies reach the receiver
        edge.path(rel).write_bytes(good[rel][: len(good[rel]) // 2])
    ts_path = recv.place(edge, bad_ts)
    pq_path = recv.place(edge, bad_pq)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert sorted(report.skipped) == sorted([str(ts_path), str(pq_path)])
    assert "TsFile" in report.skipped[str(ts_path)]
    assert report.ingested == 4 and not report.ok
    recv.remove(bad_ts)
    recv.remove(bad_pq)
    assert table_rows(config.table_path) == source_rows(recv)
    assert len(load_state(config.state_dir).files) == 4

    for rel in (bad_ts, bad_pq):  # the good files arrive
        edge.path(rel).write_bytes(good[rel])
        recv.place(edge, rel)
    report = _load(config, spark)

    assert report.ok and report.ingested == 2 and report.unchanged == 4
    assert table_rows(config.table_path) == source_rows(recv)


def test_a_file_deleted_during_the_run_is_no_failure(
    tmp_path: Path, spark: Any, monkeypatch: Any
) -> None:
    _, recv = two_senders(tmp_path)
    victim = sorted(recv.placed)[0]
    real = run_module.discover

    def discover_then_delete(dirs: list[Path]) -> Any:
        found = real(dirs)
        recv.remove(victim[1], victim[0])  # the receiver deletes it right after the listing
        return found

    monkeypatch.setattr(run_module, "discover", discover_then_delete)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert report.ok and report.skipped == {}
    assert (report.ingested, report.changed) == (3, 1)
    assert table_rows(config.table_path) == source_rows(recv)


def test_a_file_that_fails_inside_spark_is_isolated(tmp_path: Path, spark: Any) -> None:
    """Its footer is fine, so only the Spark job finds out; the others still load."""
    edge, recv = two_senders(tmp_path)
    nanos = edge.write_table(
        pa.table(
            {
                "time": pa.array([1], pa.int64()),
                "device": ["root.n.d1"],
                "at": pa.array([5], pa.timestamp("ns")),
            }
        ),
        "root.n",
        0,
        fmt="parquet",
    )
    path = recv.place(edge, nanos)
    assert pq.read_schema(path).field("at").type == pa.timestamp("ns")
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert list(report.skipped) == [str(path)]
    assert report.ingested == 4
    recv.remove(nanos)
    assert table_rows(config.table_path) == source_rows(recv)


def test_odd_names_keep_their_exact_source_file(tmp_path: Path, spark: Any) -> None:
    edge = EdgeInstance(tmp_path / "edge")
    recv = Receiver(tmp_path)
    long_group = "root." + "g" * 230
    placed = {}
    for i, group in enumerate(("root.ü sg#1", "root.中国", long_group, "root.a=b%c")):
        device = f"root.x.d{i}"  # no point in two files: each keeps its rows
        rel = edge.write_file(group, 0, devices=[device], rows_per_device=4, fmt="parquet")
        placed[group] = recv.place(edge, rel)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    # A name too long to be a source_file folder is reported, not loaded.
    too_long = str(placed[long_group])
    assert list(report.skipped) == [too_long] and report.ingested == 3
    assert "too long for a source_file partition folder" in report.skipped[too_long]
    recv.remove(next(rel for (_, rel) in recv.placed if long_group in rel))
    assert table_rows(config.table_path) == source_rows(recv)
    # Spark reads every name back exactly as pyarrow does.
    names = {
        r.source_file
        for r in spark.read.format("delta")
        .load(str(config.table_path))
        .select("source_file")
        .distinct()
        .collect()
    }
    assert names == {rel for (_, rel) in recv.placed}
    assert {n.split("/")[1] for n in names} == {"root.ü sg#1", "root.中国", "root.a=b%c"}


def test_state_is_repaired_from_the_table(tmp_path: Path, spark: Any, monkeypatch: Any) -> None:
    """Commit done but state not written; a file's rows deleted from the table by a
    Delta ``DELETE`` of someone else's: both repaired (the table is the truth)."""
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)

    def crash(*_args: Any) -> None:
        raise RuntimeError("crash after the commit")

    monkeypatch.setattr("spark_loader.run.save_state", crash)
    with pytest.raises(RuntimeError, match="crash after the commit"):
        _load(config, spark, batch_files=2)
    monkeypatch.undo()
    assert len(partition_dirs(config.table_path)) == 4  # one commit: the whole run
    assert not state_path(config.state_dir).exists()

    report = _load(config, spark)

    assert report.ingested == 0 and report.unchanged == 4 and report.ok
    assert report.notes == ["4 files were in the table but not recorded; recorded them"]
    assert table_rows(config.table_path) == source_rows(recv)
    one = sorted(Table(config.table_path).partitions().values(), key=lambda p: p.file_id)[0]
    spark.sql(f"DELETE FROM delta.`{config.table_path}` WHERE file_id = '{one.file_id}'")

    report = _load(config, spark)

    assert report.ingested == 1 and report.unchanged == 3
    assert report.notes == ["1 recorded files were missing from the table; ingesting them again"]
    assert table_rows(config.table_path) == source_rows(recv)


def test_a_plain_parquet_table_is_converted_by_the_next_run(tmp_path: Path, spark: Any) -> None:
    """The table as the loader wrote it before it wrote Delta (the same partition
    folders, no log; and partitions of an even earlier layout, ``sender=/file_id=``
    with ``source_file`` a row column): the next run makes it a Delta table without
    rewriting a data file, every row kept, the earlier layout's files loaded again."""
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    assert _load(config, spark).ok
    expected = table_rows(config.table_path)
    shutil.rmtree(Path(config.table_path) / "_delta_log")  # the plain Parquet table
    assert table_rows(config.table_path) == []
    folders = sorted(Path(config.table_path).glob("sender=*/source_file=*/file_id=*"))
    assert len(folders) == 4
    earlier = folders[0]
    sender = earlier.parent.parent.name
    source = unescape(earlier.parent.name.split("=", 1)[1])
    old = Path(config.table_path) / sender / earlier.name
    rows = pq.read_table(part_files(earlier)[0])
    named = rows.append_column("source_file", pa.array([source] * len(rows)))
    shutil.move(earlier, old)
    pq.write_table(named, part_files(old)[0])
    shutil.rmtree(earlier.parent)
    kept = {p: p.stat().st_ino for f in folders[1:] for p in part_files(f)}

    report = _load(config, spark)

    assert report.ok and (report.ingested, report.unchanged) == (1, 3)
    assert report.notes[0].startswith("converting the plain Parquet table")
    assert "3 data files become the first version's" in report.notes[0]
    assert report.notes[1:] == [
        "1 recorded files were missing from the table; ingesting them again"
    ]
    assert table_rows(config.table_path) == expected == source_rows(recv)
    assert table_versions(config.table_path) == [0]
    assert {p: p.stat().st_ino for p in kept} == kept  # not one rewritten or moved
    assert not list(Path(config.table_path).glob("sender=*/file_id=*"))
    assert spark.read.format("delta").load(str(config.table_path)).count() == len(expected)


def _script(config: LoaderConfig, batch_files: int) -> str:
    return (
        "from pathlib import Path\n"
        "from sealsync.config import LoaderConfig\n"
        "from spark_loader import run_load\n"
        f"config = LoaderConfig([Path({str(config.receiver_data_dirs[0])!r})], "
        f"Path({str(config.table_path)!r}), Path({str(config.state_dir)!r}), 'local[1]')\n"
        f"report = run_load(config, batch_files={batch_files})\n"
        "print('OK' if report.ok else report.to_dict())\n"
    )


def _kill_when(proc: subprocess.Popen, ready: Any, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, "the loader finished before it could be killed"
        assert time.monotonic() < deadline, "the loader never got there"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_kill_at_any_moment_then_rerun_equals_one_clean_run(tmp_path: Path, spark: Any) -> None:
    edge = EdgeInstance(tmp_path / "edge")
    recv = Receiver(tmp_path)
    for i in range(10):
        rel = edge.write_file(
            f"root.k{i % 3}",
            i,
            devices=[f"root.k.d{i}"],
            rows_per_device=200 + i,
            fmt="parquet" if i % 2 else "tsfile",
        )
        recv.place(edge, rel, SENDER_A if i % 4 else SENDER_B)

    # A clean run in a process of its own: its terminal stays quiet.
    clean = recv.config(tmp_path, "clean")
    done = subprocess.run(
        [sys.executable, "-c", _script(clean, 3)], capture_output=True, timeout=300
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"OK\n", b"")

    crashed = recv.config(tmp_path, "crashed")
    table = Path(crashed.table_path)
    # First kill: inside the first Spark job, before anything is committed.
    proc = subprocess.Popen(
        [sys.executable, "-c", _script(crashed, 1)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _kill_when(
        proc,
        lambda: (
            table.is_dir() and any(n.startswith(".sealsync-staging") for n in os.listdir(table))
        ),
    )
    assert partition_dirs(table) == set()
    # Second kill, once the rerun (which waits for the dead run's JVM) has moved the
    # files of three batches into the table's folders: none of them is committed.
    proc = subprocess.Popen(
        [sys.executable, "-c", _script(crashed, 1)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _kill_when(proc, lambda: len(_uncommitted(crashed)) >= 3)
    assert partition_dirs(table) == set() and table_rows(table) == []

    report = _load(crashed, spark)

    assert report.ok
    assert report.ingested + report.unchanged == 10
    assert table_rows(table) == table_rows(clean.table_path) == source_rows(recv)
    assert partition_dirs(table) == partition_dirs(clean.table_path)
    assert sorted(n for n in os.listdir(table) if n.startswith((".", "_"))) == ["_delta_log"]
    assert table_versions(table) == table_versions(clean.table_path) == [0]
    # The killed run's files are gone: every data file on disk is one the table holds.
    on_disk = {str(p.relative_to(table)) for p in table.glob("sender=*/*/*/*.parquet")}
    logged = delta_log.read(table).files.values()
    assert on_disk == {str(Path(f.path).relative_to(table)) for f in logged}


def _uncommitted(config: LoaderConfig) -> list[str]:
    """The files a running load has moved into the table and not committed yet."""
    try:
        doc = json.loads(uncommitted_list(config).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(f) for f in doc["files"]]


def _parquet_receiver(root: Path, files: int, rows: int, master: str = "local[2]") -> Path:
    """``files`` Parquet files of ``rows`` rows each where a receiver keeps them, in
    ``root/data``; returns a loader config for them (table and state in ``root``)."""
    data_dir = root / "data"
    sender = "00000000-0000-0000-0000-00000000000a"
    for i in range(files):
        folder = data_dir / "sequence" / f"root.sg{i % 3}" / "0" / sender
        folder.mkdir(parents=True, exist_ok=True)
        n = pa.array(range(rows), pa.int64())
        at = pa.array(range(i * rows, (i + 1) * rows), pa.int64())  # no point in two files
        table = pa.table({"time": at, "device": pa.array([f"root.sg{i % 3}.d1"] * rows), "s1": n})
        pq.write_table(table, folder / f"{1_700_000_000_000 + i}-{i}-0.parquet")
    doc = {"receiver_data_dirs": ["data"], "table_path": "table", "state_dir": "state"}
    return write_config(root / "loader.toml", {"loader": {**doc, "master": master}})


def test_ctrl_c_during_the_spark_job_prints_one_line_and_the_rerun_loads_all(
    tmp_path: Path,
) -> None:
    """SIGINT while the Spark job runs: py4j reports the interrupted call with a
    traceback on the root logger; the operator sees only "interrupted" (exit 130), the
    report goes to the driver log, and the next run loads every row exactly once."""
    config = _parquet_receiver(tmp_path, 40, 100_000)
    command = [sys.executable, "-m", "sealsync", "load", "--config", str(config)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    table = tmp_path / "table"
    deadline = time.monotonic() + 240
    while not (
        table.is_dir() and any(n.startswith(".sealsync-staging") for n in os.listdir(table))
    ):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the Spark job never started"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)  # the job is running: the driver is inside a py4j call
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "sealsync: interrupted"
    assert "Traceback" not in err and "ERROR" not in err, err
    assert "while sending command" in (tmp_path / "state" / "spark-driver.log").read_text()
    assert partition_dirs(table) == set()  # nothing committed

    again = subprocess.run(command, capture_output=True, text=True, timeout=400)

    assert again.returncode == 0, again.stderr
    assert read_arrow(table).num_rows == 40 * 100_000
    assert sorted(n for n in os.listdir(table) if n.startswith((".", "_"))) == ["_delta_log"]


def test_a_typod_master_gets_one_line_naming_what_spark_wants(tmp_path: Path) -> None:
    """PySpark says only "Java gateway process exited"; the JVM's log says why, and the
    line comes from this launch, not an earlier run's failure in the same log."""
    config = _parquet_receiver(tmp_path, 1, 10)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "spark-driver.log").write_text(
        "26/01/01 10:00:01 ERROR Old: a failure of an earlier run\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "sealsync", "load", "--config", str(config)]
        + ["--master", "lcoal[2]"],
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 1
    (line,) = [x for x in done.stderr.splitlines() if not x.startswith("load: ")]
    assert line.startswith("sealsync: error: cannot start Spark on lcoal[2]: "), line
    assert "Master must either be yarn or start with spark, k8s, or local" in line
    assert "earlier run" not in line and line.endswith("spark-driver.log)")


def test_run_load_is_wired_for_the_cli(tmp_path: Path, spark: Any) -> None:
    """Progress lines, the report's dict, and the module entry the CLI imports."""
    _, recv = two_senders(tmp_path)
    lines: list[str] = []

    report = run_module.run_load(recv.config(tmp_path), progress=lines.append, spark=spark)

    assert lines[0] == "found 4 loaded files from 2 senders"
    assert any(line.startswith("batch 1/1: 4 files") for line in lines)
    assert report.summary() not in lines  # the CLI prints it, once
    doc = report.to_dict()
    assert doc["ok"] is True and doc["ingested"] == 4 and doc["skipped"] == {}
    assert doc["rows_written"] == 155


def test_load_command_prints_its_summary_once(tmp_path: Path, spark: Any) -> None:
    """`sealsync load` in a terminal: progress on stderr, the summary once on stdout."""
    from click.testing import CliRunner

    from sealsync.app.cli import cli

    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    toml = loader_config_file(tmp_path / "loader.toml", config, master="local[2]")

    result = CliRunner().invoke(cli, ["load", "--config", str(toml)])  # the fixture's session

    assert result.exit_code == 0, result.output
    summary = [ln for ln in result.stdout.splitlines() if ln.strip()]
    assert len(summary) == 1 and "4 files" in summary[0], result.stdout
    assert summary[0] not in result.stderr
    assert "load: found 4 loaded files from 2 senders" in result.stderr


def _counts(table_path: Path) -> dict[tuple[str, str], int]:
    """(sender, source_file) -> rows in the table."""
    out: dict[tuple[str, str], int] = {}
    for row in read_arrow(table_path).select(["sender", "source_file"]).to_pylist():
        key = (row["sender"], row["source_file"])
        out[key] = out.get(key, 0) + 1
    return out


def _points(rows: list[tuple]) -> set[tuple[str, str, int, str]]:
    """Canonical rows as (sender, source_file, time, device)."""
    return {row[:4] for row in rows}


def test_mods_deletions_are_applied_on_both_formats(tmp_path: Path, spark: Any) -> None:
    edge, recv = two_senders(tmp_path)
    ts_a, pq_a, ts_b, pq_b = list(recv.placed)
    # Read by the same Parquet scan as pq_a (same schema, same device), without a .mods:
    # the filter is per file, so none of its points may go.
    twin = (
        SENDER_A,
        edge.write_file(
            "root.sg1",
            2,
            devices=["root.sg1.d1"],
            rows_per_device=25,
            start_ms=2 * PARQUET_A_START,  # no point of another file's: all its own
            fmt="parquet",
            measurements=("s1", "s3"),
        ),
    )
    recv.place(edge, twin[1], twin[0])
    edge.add_mods(ts_a[1], "root.sg1.d1", 9000)  # times 0..9000: 10 points
    edge.add_mods(ts_a[1], "root.sg1.d1", 4000)  # covered by the line before
    edge.add_mods(ts_a[1], "root.sg1.d7", 99000)  # a device the file does not hold
    edge.add_mods(pq_a[1], "root.sg1.d1", PARQUET_A_START + 2000)  # 3 points
    edge.add_mods(pq_a[1], "root.sg1.d2", 99000)  # only the TsFile has d2: not touched
    edge.add_mods(pq_b[1], "root.sg2.d8", 19000)  # every point: no rows remain
    edge.add_mods(ts_b[1], "root.sg2.d9", -1)  # before the first point: nothing goes
    for sender, rel in (ts_a, pq_a, pq_b, ts_b):
        recv.place(edge, rel, sender)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert report.ok and report.skipped == {} and report.ingested == 5
    independent = {key: file_rows(path).num_rows for key, path in recv.placed.items()}
    assert independent == {ts_a: 70, pq_a: 22, ts_b: 30, pq_b: 0, twin: 25}
    assert report.rows_written == sum(independent.values())
    assert _counts(config.table_path) == {k: n for k, n in independent.items() if n}
    rows = table_rows(config.table_path)
    assert rows == source_rows(recv)
    points = _points(rows)
    assert (*ts_a, 9000, "root.sg1.d1") not in points
    assert (*ts_a, 10000, "root.sg1.d1") in points and (*ts_a, 0, "root.sg1.d2") in points
    assert (*pq_a, PARQUET_A_START + 2000, "root.sg1.d1") not in points
    assert (*pq_a, PARQUET_A_START + 3000, "root.sg1.d1") in points
    assert (*twin, 2 * PARQUET_A_START, "root.sg1.d1") in points
    assert len(partition_dirs(config.table_path)) == 4  # pq_b: recorded, no partition
    assert sorted(r.rows for r in load_state(config.state_dir).files.values()) == [
        0,
        22,
        25,
        30,
        70,
    ]


def test_a_growing_mods_takes_exactly_those_points_out(tmp_path: Path, spark: Any) -> None:
    edge, recv = two_senders(tmp_path)
    ts_a, pq_a, ts_b, pq_b = list(recv.placed)
    edge.add_mods(pq_a[1], "root.sg1.d1", PARQUET_A_START + 2000)
    recv.place(edge, pq_a[1], pq_a[0])
    config = recv.config(tmp_path)
    _load(config, spark)
    before = table_rows(config.table_path)
    before_parts = partition_dirs(config.table_path)
    recv.add_mods(pq_a[1], "root.sg1.d1", PARQUET_A_START + 5000, pq_a[0])  # 3 more go
    recv.add_mods(ts_b[1], "root.sg2.d9", 1000, ts_b[0])  # a first .mods: 0 and 1000 go

    report = _load(config, spark)

    assert report.ok
    assert (report.ingested, report.removed, report.unchanged) == (2, 2, 2)
    assert (report.rows_removed, report.rows_written) == (22 + 30, 19 + 28)
    after = table_rows(config.table_path)
    assert after == source_rows(recv)
    assert _points(after) <= _points(before)
    assert _points(before) - _points(after) == {
        (*pq_a, PARQUET_A_START + 3000, "root.sg1.d1"),
        (*pq_a, PARQUET_A_START + 4000, "root.sg1.d1"),
        (*pq_a, PARQUET_A_START + 5000, "root.sg1.d1"),
        (*ts_b, 0, "root.sg2.d9"),
        (*ts_b, 1000, "root.sg2.d9"),
    }
    after_parts = partition_dirs(config.table_path)
    assert len(before_parts & after_parts) == 2 and len(after_parts - before_parts) == 2
    table = snapshot(config.table_path)

    report = _load(config, spark)

    assert (report.ingested, report.removed, report.unchanged, report.rows_written) == (0, 0, 4, 0)
    assert snapshot(config.table_path) == table


def test_without_the_keyed_writer_spark_partitioned_write_gives_the_same_table(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the loader's jar cannot run (a cluster), Spark's ``partitionBy`` writes the
    key folders instead: the same partitions and rows, deletions applied, both formats."""
    _, recv = two_senders(tmp_path)
    ts_a, pq_a, ts_b, pq_b = list(recv.placed)
    recv.add_mods(ts_a[1], "root.sg1.d1", 2000, ts_a[0])
    recv.add_mods(pq_b[1], "root.sg2.d8", 3000, pq_b[0])
    real = jvm.loadable
    chosen: list[tuple[str, bool]] = []

    def spy(session: Any, name: str, probe: bool = False) -> bool:
        found = real(session, name, probe)
        chosen.append((name, found))
        return found

    monkeypatch.setattr(jvm, "loadable", spy)
    keyed = recv.config(tmp_path, "keyed")
    assert _load(keyed, spark).ok
    assert (KEYED_FORMAT, True) in chosen

    def without_keyed(session: Any, name: str, probe: bool = False) -> bool:
        return name != KEYED_FORMAT and real(session, name, probe)

    monkeypatch.setattr(jvm, "loadable", without_keyed)
    own = recv.config(tmp_path, "partitioned")
    report = _load(own, spark)

    assert report.ok and report.ingested == 4
    assert table_rows(own.table_path) == table_rows(keyed.table_path) == source_rows(recv)
    assert partition_dirs(own.table_path) == partition_dirs(keyed.table_path)
    assert len(partition_dirs(own.table_path)) == 4


def test_a_malformed_mods_skips_its_file_until_fixed(tmp_path: Path, spark: Any) -> None:
    _, recv = two_senders(tmp_path)
    ts_a, pq_a, ts_b, pq_b = list(recv.placed)
    recv.mods_path(ts_a[1], ts_a[0]).write_text("DELETION,root.sg1.d1.*,9,0,soon\n")
    recv.mods_path(pq_b[1], pq_b[0]).write_text("DELETION,root.sg2.d8.*,9,0,1\nhalf a line\n")
    config = recv.config(tmp_path)

    report = _load(config, spark)

    bad_ts, bad_pq = (str(recv.placed[key]) for key in (ts_a, pq_b))
    assert sorted(report.skipped) == sorted([bad_ts, bad_pq])
    assert report.skipped[bad_ts] == ".mods line 1: time 'soon' is not a long"
    assert report.skipped[bad_pq] == ".mods line 2: unknown modification type 'half a line'"
    assert report.ingested == 2 and not report.ok
    assert table_rows(config.table_path) == source_rows(recv, without={ts_a, pq_b})
    assert len(load_state(config.state_dir).files) == 2  # not recorded: retried next run
    recv.mods_path(ts_a[1], ts_a[0]).write_text("")
    recv.mods_path(pq_b[1], pq_b[0]).write_text("")
    recv.add_mods(ts_a[1], "root.sg1.d1", 0, ts_a[0])
    recv.add_mods(pq_b[1], "root.sg2.d8", 1000, pq_b[0])

    report = _load(config, spark)

    assert report.ok and (report.ingested, report.unchanged) == (2, 2)
    assert report.rows_written == 79 + 18
    assert table_rows(config.table_path) == source_rows(recv)


def test_local_writes_set_permissions_in_process_with_hadoops_bits(
    tmp_path: Path, spark: Any
) -> None:
    """The loader's session writes through PosixLocalFileSystem (no forked chmod),
    and what it writes has exactly the modes Hadoop's own local file system gives."""
    assert localfs.implementation(spark) == localfs.CLASS
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    assert _load(config, spark).ok
    files, folders = set(), set()
    for root, dirs, names in os.walk(config.table_path):
        folders |= {stat.S_IMODE(os.stat(Path(root, d)).st_mode) for d in dirs}
        files |= {stat.S_IMODE(os.stat(Path(root, n)).st_mode) for n in names}
    assert len(partition_dirs(config.table_path)) == 4
    assert (files, folders) == ({0o644}, {0o755})  # Hadoop's umask 022, as before

    jvm = spark.sparkContext._jvm
    fs = jvm.io.sealsync.hadoop.PosixLocalFileSystem()
    fs.initialize(jvm.java.net.URI("file:///"), spark.sparkContext._jsc.hadoopConfiguration())
    target = tmp_path / "f"
    target.write_bytes(b"x")
    for mode in ("640", "600", "755", "1750"):  # the last needs the sticky bit: Hadoop's path
        fs.setPermission(
            jvm.org.apache.hadoop.fs.Path(str(target)),
            jvm.org.apache.hadoop.fs.permission.FsPermission(mode),
        )
        assert oct(stat.S_IMODE(target.stat().st_mode)) == oct(int(mode, 8))
