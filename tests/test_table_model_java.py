"""The loader's Java reader names table-model devices and applies table-model deletions
as the Python side does (``tests/test_table_model.py``): the shared table of device
names, a file of the ``tsfile`` package read through the loader's Java read path with
IoTDB 2.x's ``.mods2`` table deletions against ``deletion.apply`` on the same rows, and
a whole ``run_load`` of table-model files into the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import tsfile as native
from test_table_model import CASES, ROWS, expected_rows, write_colliding
from tsfile_read_helpers import java_main

from sealsync.formats import deletion, mods2, tsfile
from sealsync.formats.deletion import MAX_TIME, MIN_TIME
from spark_loader import read_arrow, run_load
from spark_loader import schema as schemas
from spark_loader.tsfile_read import FILES_DDL, deletion_records, java_data, java_schema, series_of

pytestmark = pytest.mark.slow  # a JVM, Spark


def test_the_java_names_answer_every_shared_case() -> None:
    lines = ["\t".join("\0" if s is None else s for s in c["segments"]) for c in CASES]
    got = java_main("io.sealsync.tsfile.TableDevice", lines)
    assert got == [c["name"] for c in CASES]


def _java_rows(spark: Any, path: Path, entries: bytes) -> list[tuple[str, int, float]]:
    records = deletion_records(mods2.parse(entries)) if entries else None
    files = spark.createDataFrame([(str(path), "f0", 0, records)], FILES_DDL)
    series = series_of(java_schema(spark, files).collect())["f0"]
    assert not isinstance(series, str), series
    target, mapping = schemas.new_table_target(series)
    (column,) = mapping.values()
    rows = java_data(spark, files, target).collect()
    return sorted((r["device"], r["time"], r[column]) for r in rows)


def _python_rows(path: Path, entries: bytes) -> list[tuple[str, int, float]]:
    table = deletion.apply(tsfile.to_arrow(path), mods2.parse(entries))
    return sorted((r["device"], r["time"], r["v"]) for r in table.to_pylist())


def test_the_java_reader_keeps_colliding_devices_apart_and_applies_table_deletions(
    spark: Any, tmp_path: Path
) -> None:
    path = write_colliding(tmp_path / "t3.tsfile")
    cases = {
        "none": b"",
        # DELETE FROM t3 WHERE time <= 3 AND region = 'north'
        "north": mods2.table_entry("t3", MIN_TIME, 3, mods2.segment_match("north", 1)),
        "region is null": mods2.table_entry("t3", MIN_TIME, MAX_TIME, mods2.segment_match(None, 1)),
        "region = 'null'": mods2.table_entry("t3", 2, 3, mods2.segment_match("null", 1)),
        "site is null": mods2.table_entry("t3", MIN_TIME, MAX_TIME, mods2.segment_match(None, 2)),
        "and, full, fields": mods2.table_entry(
            "t3",
            0,
            1,
            mods2.and_match(mods2.segment_match("a", 1), mods2.full_match(("t3", "a", "b.c"))),
            ("v",),
        )
        + mods2.table_entry("t3", 0, 9, mods2.nop(), ("w",))
        + mods2.tree_entry("root.**", MIN_TIME, MAX_TIME),
    }
    found = {}
    for name, entries in cases.items():
        got = _java_rows(spark, path, entries)
        assert got == _python_rows(path, entries), name
        found[name] = got
    assert len(found["none"]) == len(ROWS) == 9
    assert len({d for d, _, _ in found["none"]}) == 5
    assert ("t3.north", 1, 8.0) not in found["north"] and len(found["north"]) == 8
    assert {d for d, _, _ in found["region is null"]} == {
        "t3.`a.b`.c",
        "t3.`null`.x",
        "t3.a.`b.c`",
        "t3.north",
    }
    assert [r for r in found["region = 'null'"] if r[0] == "t3.`null`.x"] == [
        ("t3.`null`.x", 1, 6.0)
    ]
    assert "t3.north" not in {d for d, _, _ in found["site is null"]}
    assert len(found["and, full, fields"]) == 8
    json.dumps(found)  # plain values only


def test_a_load_puts_the_tables_rows_in_the_table_and_a_later_deletion_takes_its_points(
    spark: Any, tmp_path: Path
) -> None:
    """``run_load`` end to end: a table-model file (two tables, a field null in some
    rows) gives one table row per (device, time) with IoTDB's values; a ``.mods2`` table
    deletion that arrives later is a new version of the file, without those points."""
    from spark_loader_helpers import SENDER_A, Receiver

    recv = Receiver(tmp_path / "r")
    rel = "sequence/db1/1/0/1700000000000-1-0-0.tsfile"
    target = recv.storage.target(recv.data_dirs[0], SENDER_A, rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_colliding(target)
    other = "sequence/db1/1/0/1700000000001-2-0-0.tsfile"
    second = recv.storage.target(recv.data_dirs[0], SENDER_A, other)
    frame = pd.DataFrame(
        {
            "time": [1, 2, 3],
            "line": ["L.1", "L.1", None],
            "speed": [1.5, None, 3.5],
            "load": pd.array([10, 20, None], dtype="Int64"),
        }
    )
    native.dataframe_to_tsfile(frame, str(second), table_name="trains", tag_column=["line"])
    config = recv.config(tmp_path / "r")

    report = run_load(config, spark=spark)
    assert report.ingested == 2 and not report.skipped, report.skipped

    def rows() -> list[tuple[str, int, Any, Any, Any]]:
        return sorted(
            (r["device"], r["time"], r.get("v"), r.get("speed"), r.get("load"))
            for r in read_arrow(config.table_path).to_pylist()
        )

    want = sorted(
        [(str(r["device"]), int(str(r["time"])), r["v"], None, None) for r in expected_rows()]
        + [
            ("trains.`L.1`", 1, None, 1.5, 10),
            ("trains.`L.1`", 2, None, None, 20),
            ("trains", 3, None, 3.5, None),
        ]
    )
    assert rows() == want
    Path(f"{target}.mods2").write_bytes(
        mods2.table_entry("t3", MIN_TIME, 3, mods2.segment_match("north", 1))
        + mods2.table_entry("t3", 2, 2, mods2.segment_match(None, 1), ("v",))
    )
    report = run_load(config, spark=spark)
    assert report.ingested == 1 and not report.skipped, report.skipped
    gone = {("t3.north", 1), ("t3.null.x", 2)}
    assert rows() == [r for r in want if (r[0], r[1]) not in gone]
