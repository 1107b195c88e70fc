"""One sender cannot take the table's schema from the others, and no file is refused or
converted for a name or a type (spark_loader/columns.py, docs/design.md §6.6).

Before, a column's type was first come and global: a sender that shipped ``s1`` as
TEXT first kept every other sender's INT64 ``s1`` out of the table on every run; ``S2``
kept ``s2`` out; a name like ``a b=c;{x}`` switched the whole table to column mapping
(reader version 2, writer 7) for everyone; a measurement named ``sender`` refused its
file; INT64 and DOUBLE ``s1`` on two devices of one file made every INT64 value a
double; 2,000 measurements in one file made every reader's table 2,010 columns wide.
Each case runs the real loader on a real Spark session against files the edge's own
writer made, and compares the table, read back by measurement, with the files.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from reliability.figures import record
from spark_loader_helpers import Receiver, source_rows, table_rows

from sealsync.config import LoaderConfig
from sealsync.formats import tsfile as tsfile_format
from sealsync.simulator import EdgeInstance
from spark_loader import delta_log, read_arrow, run_load

pytestmark = pytest.mark.slow  # Spark

HONEST = "00000000-0000-4000-8000-000000000001"
HOSTILE = "00000000-0000-4000-8000-0000000000ff"


def _load(config: LoaderConfig, spark: Any) -> Any:
    return run_load(config, spark=spark, sync=False)


def _frame(device: str, times: list[int], **columns: pa.Array) -> pa.Table:
    return pa.table(
        {"time": pa.array(times, pa.int64()), "device": [device] * len(times), **columns}
    )


def _fields(table: Path) -> dict[str, dict[str, Any]]:
    meta = delta_log.read(table).metadata or {}
    return {f["name"]: f for f in json.loads(meta["schemaString"])["fields"]}


@pytest.mark.parametrize("first", [HOSTILE, HONEST])
def test_a_kind_taken_first_keeps_no_sender_out(tmp_path: Path, spark: Any, first: str) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    text = edge.write_table(_frame("root.h.d1", [1, 2], s1=pa.array(["x", "y"])), "root.h", 0)
    ints = edge.write_table(
        _frame("root.w.d1", [1, 2], s1=pa.array([9007199254740993, -1], pa.int64())),
        "root.w",
        0,
    )
    second = HONEST if first == HOSTILE else HOSTILE
    recv.place(edge, text if first == HOSTILE else ints, first)
    config = recv.config(tmp_path)
    assert _load(config, spark).ok
    recv.place(edge, ints if first == HOSTILE else text, second)

    report = _load(config, spark)

    held = report.ok and report.ingested == 1 and not report.skipped
    assert held, report.skipped
    assert table_rows(config.table_path) == source_rows(recv)
    honest = read_arrow(config.table_path).filter(
        pa.compute.equal(pa.compute.field("sender"), HONEST)
    )
    ints_column = "s1" if first == HONEST else "s1__long"
    assert honest.column(ints_column).to_pylist() == [9007199254740993, -1]  # exact, not doubles
    record(
        "security",
        attack=f"a TEXT s1 first ({'hostile' if first == HOSTILE else 'honest'} sender)",
        tried=1,
        held=held,
    )


def test_case_twins_provenance_names_and_names_delta_refuses_all_load(
    tmp_path: Path, spark: Any
) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    recv.place(
        edge, edge.write_table(_frame("root.w.d1", [1], s2=pa.array([1.5])), "root.w", 0), HONEST
    )
    config = recv.config(tmp_path)
    assert _load(config, spark).ok
    before = delta_log.read(config.table_path).protocol
    odd = _frame(
        "root.h.d1",
        [1, 2],
        sender=pa.array(["not", "me"]),
        source_file=pa.array([1, 2], pa.int64()),
        file_id=pa.array([True, False]),
        **{"a b=c;{x}": pa.array([7, 8], pa.int64())},
    )
    recv.place(edge, edge.write_table(odd, "root.h", 0), HOSTILE)
    # IoTDB keeps case; the TsFile package's writer does not, so the twins come as Parquet
    twins = _frame(
        "root.h.d2",
        [1, 2],
        S2=pa.array([2.5, 3.5]),
        Val=pa.array([1, 2], pa.int64()),
        val=pa.array(["a", "b"]),
    )
    recv.place(edge, edge.write_table(twins, "root.h", 1, fmt="parquet"), HOSTILE)

    report = _load(config, spark)

    held = report.ok and report.ingested == 2
    assert held, report.skipped
    assert table_rows(config.table_path) == source_rows(recv)
    snap = delta_log.read(config.table_path)
    assert snap.protocol == before  # no column mapping, no reader or writer version raised
    assert "delta.columnMapping.mode" not in (snap.metadata or {})["configuration"]
    fields = _fields(config.table_path)
    for column, measurement in [
        ("S2__double", "S2"),
        ("Val", "Val"),
        ("val__string", "val"),
        ("sender__string", "sender"),
        ("source_file__long", "source_file"),
        ("file_id__boolean", "file_id"),
        ("a%20b%3Dc%3B%7Bx%7D", "a b=c;{x}"),
    ]:
        assert fields[column]["metadata"]["sealsync.measurement"] == measurement
    assert fields["sender"]["metadata"] == {}  # the provenance column is untouched
    record(
        "security", attack="case twins, provenance names, a name Delta refuses", tried=1, held=held
    )


def _devices_file(path: Path, devices: dict[str, dict[str, tuple[Any, list[Any]]]]) -> None:
    """A tree-model TsFile whose devices declare one measurement with different types:
    device -> measurement -> (TsFile type, values at times 1, 2, ...)."""
    native = tsfile_format._native_module()
    writer = native.TsFileWriter(os.fspath(path))
    try:
        for device, series in devices.items():
            names = list(series)
            for name in names:
                writer.register_timeseries(device, native.TimeseriesSchema(name, series[name][0]))
            n = len(next(iter(series.values()))[1])
            tablet = native.Tablet(names, [series[m][0] for m in names], n)
            tablet.set_table_name(device)
            tablet.set_timestamp_list(list(range(1, n + 1)))
            for i, name in enumerate(names):
                tablet.data_list[i] = series[name][1]
            writer.write_tablet(tablet)
    finally:
        writer.close()


def test_one_measurement_of_two_types_in_one_file_keeps_both_exact(
    tmp_path: Path, spark: Any
) -> None:
    import tsfile

    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    rel = "sequence/root.w7/1/0/1-1-0-0.tsfile"
    path = edge.path(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    _devices_file(
        path,
        {
            "root.w7.a0": {"s1": (tsfile.TSDataType.INT64, [9007199254740993, 3])},
            "root.w7.a1": {"s1": (tsfile.TSDataType.DOUBLE, [0.5, 9007199254740993.0])},
        },
    )
    path.with_name(path.name + ".resource").write_bytes(b"")
    recv.place(edge, rel, HONEST)
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert report.ok and report.ingested == 1, report.skipped
    data = read_arrow(config.table_path).sort_by([("device", "ascending"), ("time", "ascending")])
    assert data.column("s1").to_pylist() == [9007199254740993, 3, None, None]
    assert data.column("s1__double").to_pylist() == [None, None, 0.5, 9007199254740993.0]
    assert data.schema.field("s1").type == pa.int64()
    # a full rebuild keeps each column's series: no column made again under another name
    fields = set(_fields(config.table_path))
    assert run_load(config, full=True, spark=spark, sync=False).ok
    assert set(_fields(config.table_path)) == fields
    again = read_arrow(config.table_path).sort_by([("device", "ascending"), ("time", "ascending")])
    assert again.select(["s1", "s1__double"]) == data.select(["s1", "s1__double"])


def test_what_one_sender_adds_to_the_schema_is_bounded(tmp_path: Path, spark: Any) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    wide = _frame("root.h.d1", [1], **{f"m{i}": pa.array([float(i)]) for i in range(2000)})
    hostile = recv.place(edge, edge.write_table(wide, "root.h", 0, fmt="parquet"), HOSTILE)
    recv.place(
        edge, edge.write_table(_frame("root.w.d1", [1], v=pa.array([1.0])), "root.w", 0), HONEST
    )
    config = recv.config(tmp_path)

    report = _load(config, spark)

    reason = report.skipped.get(str(hostile), "")
    held = (
        report.ingested == 1
        and "max_new_columns" in reason
        and len(_fields(config.table_path)) < 10
    )
    assert held, (report.ingested, report.skipped, sorted(_fields(config.table_path)))
    assert "\n" not in reason
    honest = read_arrow(config.table_path)
    assert honest.column("v").to_pylist() == [1.0]
    record("security", attack="2,000 new measurements in one file", tried=1, held=held)
    # an operator who wants such devices says so
    wider = dataclasses.replace(config, max_new_columns=5000)
    assert _load(wider, spark).ok
    assert len(_fields(config.table_path)) == 2000 + 1 + 2 + 3
