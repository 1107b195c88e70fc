"""The table's readers: Spark SQL, the PySpark DataFrame API and ``deltalake`` (no JVM)
poll it while a ``sealsync load`` and a ``sealsync load --full`` run as processes, and
every answer any of them gets is the row count (and file count) of one committed
version, as the log tells them apart afterwards; none sees a run half applied. And
``examples/query_table.py`` as an operator runs it: its answers, its error lines."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from config_helpers import loader_config_file
from spark_loader_helpers import (
    SENDER_A,
    SENDER_B,
    source_rows,
    table_rows,
    table_versions,
    two_senders,
)

from sealsync.config import LoaderConfig
from spark_loader import run_load

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "query_table.py"

#: (rows, source files) of a version, or what a reader got.
Answer = tuple[int, int]


def _example() -> ModuleType:
    """The example script as a module, to run its checks in this process."""
    spec = importlib.util.spec_from_file_location("query_table_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _deltalake_answer(table: Path, version: int | None = None) -> tuple[Answer, int]:
    """The rows and source files of ``version`` (default: the latest) read by
    ``deltalake``, and the version it read."""
    from deltalake import DeltaTable

    dt = DeltaTable(str(table), version=version)
    data = dt.to_pyarrow_table(columns=["source_file"])
    return (data.num_rows, len(pc.unique(data.column("source_file")))), dt.version()


def _spark_sql_answer(spark: Any, table: Path) -> Answer:
    row = spark.sql(
        f"SELECT count(*) AS n, count(DISTINCT source_file) AS files FROM delta.`{table}`"
    ).collect()[0]
    return int(row.n), int(row.files)


def _dataframe_answer(spark: Any, table: Path) -> Answer:
    from pyspark.sql import functions as F

    row = (
        spark.read.format("delta")
        .load(str(table))
        .agg(F.count(F.lit(1)).alias("n"), F.countDistinct("source_file").alias("files"))
        .collect()[0]
    )
    return int(row.n), int(row.files)


class Poller(threading.Thread):
    """Reads the table again and again until stopped: (start, end, answer or error)."""

    def __init__(self, name: str, read: Callable[[], Any], pause: float) -> None:
        super().__init__(name=name, daemon=True)
        self.read, self.pause = read, pause
        self.reads: list[tuple[float, float, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.time()
            try:
                got = self.read()
            except Exception as exc:  # the test reports it; a reader must never fail
                got = f"{type(exc).__name__}: {str(exc)[:300]}"
            self.reads.append((start, time.time(), got))
            self.stop.wait(self.pause)

    def answers(self) -> list[Any]:
        return [got for _, _, got in self.reads]

    def within(self, start: float, end: float) -> list[Any]:
        """What the reads that began and ended inside [start, end] got."""
        return [got for s, e, got in self.reads if s >= start and e <= end]

    def reads_after(self, when: float) -> int:
        return len([1 for s, _, _ in self.reads if s > when])


def _answer(got: Any) -> Any:
    """A reader's (rows, files); ``deltalake``'s comes with the version it read."""
    return got[0] if isinstance(got, tuple) and isinstance(got[0], tuple) else got


def _run_load(
    config_file: Path, *extra: str
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "sealsync", "load", "--config", str(config_file), "--json", *extra],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    return done, started, time.time()


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.slow  # Spark in this process, and two sealsync load processes
def test_every_reader_sees_whole_versions_during_a_load_and_a_full_rebuild(
    tmp_path: Path, spark: Any
) -> None:
    edge, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    assert run_load(config, spark=spark, sync=False).ok  # version 0
    config_file = loader_config_file(tmp_path / "loader.toml", config)
    table = Path(config.table_path).resolve()
    readers = [
        Poller("spark-sql", lambda: _spark_sql_answer(spark, table), 0.1),
        Poller("dataframe", lambda: _dataframe_answer(spark, table), 0.1),
        Poller("deltalake", lambda: _deltalake_answer(table), 0.05),
    ]
    for reader in readers:
        reader.start()
    try:
        _wait_for(lambda: all(r.reads for r in readers), "a reader never read")
        # load 1: a file removed on the receiver, another one new
        gone = [rel for (sender, rel) in recv.placed if sender == SENDER_B][0]
        recv.remove(gone, SENDER_B)
        recv.place(
            edge, edge.write_file("root.sg9", 0, devices=["root.sg9.d1"], rows_per_device=33)
        )
        load, load_start, load_end = _run_load(config_file)
        # load 2: one more file, and the whole table rebuilt in one overwrite
        recv.place(
            edge,
            edge.write_file("root.sg7", 0, devices=["root.sg7.d1"], rows_per_device=17),
            SENDER_B,
        )
        full, full_start, full_end = _run_load(config_file, "--full")
        _wait_for(
            lambda: all(r.reads_after(full_end) >= 2 for r in readers),
            "a reader did not read the rebuilt table",
        )
    finally:
        for reader in readers:
            reader.stop.set()
        for reader in readers:
            reader.join(120)
    assert load.returncode == 0, load.stderr[-2000:]
    assert full.returncode == 0, full.stderr[-2000:]
    assert (json.loads(load.stdout)["ingested"], json.loads(load.stdout)["removed"]) == (1, 1)
    assert json.loads(full.stdout)["ingested"] == 5

    # the versions, read back from the log after the fact: one per run, each different
    assert table_versions(table) == [0, 1, 2]
    versions = {v: _deltalake_answer(table, v)[0] for v in (0, 1, 2)}
    assert len(set(versions.values())) == 3, versions
    assert versions[2] == (len(source_rows(recv)), 5)
    assert table_rows(table) == source_rows(recv)
    known = set(versions.values())
    for reader in readers:
        got = reader.answers()
        errors = [a for a in got if isinstance(a, str)]
        assert errors == [], (reader.name, errors[:3])
        seen = [_answer(a) for a in got]
        assert set(seen) <= known, (reader.name, set(seen) - known, versions)
        assert seen[0] == versions[0] and seen[-1] == versions[2], reader.name
        # a read inside a run saw the version before it or the one it committed
        during_load = [_answer(a) for a in reader.within(load_start, load_end)]
        during_full = [_answer(a) for a in reader.within(full_start, full_end)]
        assert during_load and during_full, (reader.name, "no read while a load ran")
        assert set(during_load) <= {versions[0], versions[1]}, reader.name
        assert set(during_full) <= {versions[1], versions[2]}, reader.name
    # deltalake names the version it read: its answer is that version's, exactly
    for answer, version in readers[2].answers():
        assert answer == versions[version], (answer, version, versions)


def _sections(stdout: str) -> dict[str, list[str]]:
    """The example's output: its first line, then each ``# <title>`` section's lines
    under its first word (``Spark``, ``PySpark``, ``Time``, ``deltalake``)."""
    lines = stdout.splitlines()
    out: dict[str, list[str]] = {"head": lines[:1]}
    name = "head"
    for line in lines[1:]:
        if line.startswith("# "):
            name = line[2:].split()[0].rstrip(":")
            out[name] = []
        elif line.strip():
            out[name].append(line)
    return out


def _run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def _per_device(data: pa.Table) -> dict[str, tuple[int, int, int, int, int]]:
    """device -> (rows, files, senders, first_ms, last_ms), as the SQL section prints."""
    out = {}
    for device in set(data.column("device").to_pylist()):
        rows = data.filter(pc.equal(data.column("device"), device))
        out[device] = (
            rows.num_rows,
            len(pc.unique(rows.column("source_file"))),
            len(pc.unique(rows.column("sender"))),
            pc.min(rows.column("time")).as_py(),
            pc.max(rows.column("time")).as_py(),
        )
    return out


def _printed_devices(lines: list[str]) -> dict[str, tuple[int, int, int, int, int]]:
    out = {}
    for line in lines[1:-1]:  # the column names first, the total last
        device, rows, files, senders, first, _, last = line.split()
        out[device] = (int(rows), int(files), int(senders), int(first), int(last))
    return out


def _two_versions(tmp_path: Path, spark: Any) -> tuple[LoaderConfig, pa.Table, pa.Table]:
    """A table of two loads (a file removed by the second): both versions' rows. A
    sender's TEXT ``s1`` beside the others' INT64 ``s1`` gives that measurement two
    columns (``s1``, ``s1__string``)."""
    from deltalake import DeltaTable

    edge, recv = two_senders(tmp_path)
    text = pa.table(
        {
            "time": pa.array([1, 2, 3], pa.int64()),
            "device": ["root.t.d9"] * 3,
            "s1": ["x", None, "z"],
        }
    )
    recv.place(edge, edge.write_table(text, "root.t", 0, fmt="parquet"), SENDER_B)
    config = recv.config(tmp_path)
    assert run_load(config, spark=spark, sync=False).ok
    gone = [rel for (sender, rel) in recv.placed if sender == SENDER_A][0]
    recv.remove(gone, SENDER_A)
    assert run_load(config, spark=spark, sync=False).ok
    assert table_versions(config.table_path) == [0, 1]
    columns = ["device", "time", "sender", "source_file"]
    path = str(config.table_path)
    old = DeltaTable(path, version=0).to_pyarrow_table(columns=columns)
    new = DeltaTable(path, version=1).to_pyarrow_table(columns=columns)
    assert new.num_rows < old.num_rows
    return config, old, new


@pytest.mark.slow  # Spark, and the example as a process
def test_the_example_reads_the_table_with_spark_sql_pyspark_time_travel_and_deltalake(
    tmp_path: Path, spark: Any
) -> None:
    from deltalake import DeltaTable

    config, old, new = _two_versions(tmp_path, spark)
    table = Path(config.table_path).resolve()

    done = _run_example("--table", str(table), "--master", "local[1]")

    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""  # Spark's own lines went to its log
    out = _sections(done.stdout)
    assert out["head"] == [f"table {table}: versions 0 to 1, reading the latest"]
    assert set(out) == {"head", "Spark", "PySpark", "Time", "deltalake"}
    sql = out["Spark"]
    assert _printed_devices(sql) == _per_device(new)
    assert sql[-1].split() == ["total", str(new.num_rows)]
    senders = {
        line.split()[0]: tuple(int(x) for x in line.split()[1:]) for line in out["PySpark"][1:]
    }
    assert senders == {
        sender: (
            (rows := new.filter(pc.equal(new.column("sender"), sender))).num_rows,
            len(pc.unique(rows.column("source_file"))),
            len(pc.unique(rows.column("device"))),
        )
        for sender in (SENDER_A, SENDER_B)
    }
    history = {int(line.split()[0]): int(line.split()[-1]) for line in out["Time"][1:]}
    assert history == {0: old.num_rows, 1: new.num_rows}
    lake = out["deltalake"]
    files = len(DeltaTable(str(table)).file_uris())
    assert lake[0] == f"version 1, {files} files, {new.num_rows} rows"
    devices = Counter(new.column("device").to_pylist())
    assert lake[1].split() == ["device", "rows"]
    assert {line.split()[0]: int(line.split()[1]) for line in lake[2:]} == devices

    # the path from a loader config, an earlier version pinned in every reader
    config_file = loader_config_file(tmp_path / "loader.toml", config)
    done = _run_example(
        "--config",
        str(config_file),
        "--version",
        "0",
        "--readers",
        "sql,deltalake",
        "--measurement",
        "s1",
    )

    assert done.returncode == 0, done.stderr[-2000:]
    out = _sections(done.stdout)
    assert out["head"] == [f"table {table}: versions 0 to 1, reading 0"]
    assert _printed_devices(out["Spark"]) == _per_device(old)
    first, _, rows = out["deltalake"][0].rpartition(", ")
    assert first.startswith("version 0, ") and rows == f"{old.num_rows} rows"
    # a measurement's columns, found by their metadata: one per kind of its values
    want = _values(DeltaTable(str(table), version=0), {"s1": "long", "s1__string": "string"})
    assert want["s1__string"][1] == 2 and want["s1"][1] > 0
    assert _printed_measurement(out["Measurement"]) == want


def _values(dt: Any, kinds: dict[str, str]) -> dict[str, tuple[str, int]]:
    """column -> (kind, its non-null values) of a Delta table's columns."""
    data = dt.to_pyarrow_table(columns=list(kinds))
    return {c: (kind, len(data) - data.column(c).null_count) for c, kind in kinds.items()}


def _printed_measurement(lines: list[str]) -> dict[str, tuple[str, int]]:
    assert lines[0].split() == ["column", "kind", "values"]
    return {c: (kind, int(n)) for c, kind, n in (line.split() for line in lines[1:])}


def test_the_example_finds_a_measurement_by_its_columns_metadata(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a JVM: a table whose columns the loader named ``s1``, ``s1__double`` and
    ``a%20b`` (the schema the loader writes, docs/formats.md), read by ``deltalake``."""
    from deltalake import write_deltalake

    def field(name: str, typ: pa.DataType, measurement: str, kind: str) -> pa.Field:
        meta = {"sealsync.measurement": measurement, "sealsync.kind": kind}
        return pa.field(name, typ, metadata=meta)

    schema = pa.schema(
        [
            pa.field("time", pa.int64()),
            pa.field("device", pa.string()),
            field("s1", pa.int64(), "s1", "long"),
            field("s1__double", pa.float64(), "s1", "double"),
            field("a%20b", pa.int64(), "a b", "long"),
            pa.field("sender", pa.string()),
        ]
    )
    rows = pa.table(
        [
            [1, 2, 3],
            ["d1", "d2", "d2"],
            [7, None, None],
            [None, 0.5, 1.5],
            [None, None, 4],
            ["x"] * 3,
        ],
        schema=schema,
    )
    table = tmp_path / "table"
    write_deltalake(str(table), rows)
    module = _example()

    for measurement, want in [
        ("s1", {"s1": ("long", 1), "s1__double": ("double", 2)}),
        ("a b", {"a%20b": ("long", 1)}),
        ("sender", {}),  # a provenance column holds no measurement
    ]:
        args = ["--table", str(table), "--readers", "deltalake", "--measurement", measurement]
        assert module.main(args) == 0
        out = _sections(capsys.readouterr().out)
        if want:
            assert _printed_measurement(out["Measurement"]) == want
        else:
            assert out["Measurement"] == ["no column holds it"]


def test_the_example_reads_with_deltalake_alone_without_a_jvm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deltalake import write_deltalake

    table = tmp_path / "table"
    rows = pa.table({"time": [1, 2, 3], "device": ["root.a.d1", "root.a.d2", "root.a.d1"]})
    write_deltalake(str(table), rows)
    write_deltalake(str(table), rows.slice(0, 1), mode="append")

    assert _example().main(["--table", str(table), "--readers", "deltalake"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"table {table}: versions 0 to 1, reading the latest"
    assert lines[1] == "# deltalake: DeltaTable(...).to_pyarrow_table()"
    assert lines[2] == "version 1, 2 files, 4 rows"
    assert [line.split() for line in lines[3:]] == [
        ["device", "rows"],
        ["root.a.d1", "3"],
        ["root.a.d2", "1"],
    ]

    assert _example().main(["--table", str(table), "--readers", "deltalake", "--version", "0"]) == 0
    assert "version 0, 1 files, 3 rows" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("layout", "code", "said"),
    [
        ("missing", 66, "no such folder; give the loader's table_path (or --config)"),
        ("empty", 65, "is not a Delta table (no commit in _delta_log/): no sealsync load has run"),
        ("parquet", 65, "an earlier sealsync: the next sealsync load converts it"),
        ("delta", 65, "has no version 7: its log holds versions 0 to 0"),
    ],
)
def test_the_example_says_in_one_line_why_a_path_is_no_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str, code: int, said: str
) -> None:
    table = tmp_path / "table"
    if layout != "missing":
        table.mkdir()
    if layout == "parquet":  # the loader's layout before Delta, no log
        (table / f"sender={SENDER_A}" / "file_id=x").mkdir(parents=True)
    if layout == "delta":
        (table / "_delta_log").mkdir()
        (table / "_delta_log" / f"{0:020d}.json").write_text("{}\n")

    assert _example().main(["--table", str(table), "--version", "7"]) == code

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and said in captured.err
    assert captured.err.startswith(f"query_table: error: {table}")


def test_the_example_refuses_a_bad_config_and_unknown_readers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "loader.toml"
    bad.write_text("[loader]\ntable_path = 3\n")
    assert _example().main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err

    assert _example().main(["--table", str(tmp_path), "--readers", "sql,hive"]) == 2
    err = capsys.readouterr().err
    said = "--readers takes some of sql,dataframe,history,deltalake, not sql,hive"
    assert err == f"query_table: error: {said}\n"
