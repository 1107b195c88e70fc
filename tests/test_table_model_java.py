"""The loader's Java reader names table-model devices and applies table-model deletions
as the Python side does (``tests/test_table_model.py``): the shared table of device
names, and a file of the ``tsfile`` package read through the loader's Java read path
with IoTDB 2.x's ``.mods2`` table deletions, against ``deletion.apply`` on the same rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_table_model import CASES, ROWS, write_colliding
from tsfile_read_helpers import java_main

from sealsync.formats import deletion, mods2, tsfile
from sealsync.formats.deletion import MAX_TIME, MIN_TIME
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
