"""Tree-model TsFiles: the column-wise reader returns exactly the row-wise reader's table.

``tsfile.to_arrow`` reads a tree-model device series by series (prepared series,
Arrow batches) and merges them on time; the row-wise path (``query_timeseries`` ->
pandas -> Arrow) is the reference it replaced. Files are written with the
``tsfile`` package's own writer, in shapes the sealsync writer never makes: many
devices with different measurement sets, every data type, nulls at different
places per measurement, series with different timestamps, several chunks per
series.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import tsfile as native
from tsfile import Tablet, TimeseriesSchema, TSDataType, TsFileWriter

from sealsync.errors import FormatError
from sealsync.formats import tsfile

T = TSDataType
#: Measurement name -> type; each file uses a random subset per device.
POOL: dict[str, Any] = {
    "b": T.BOOLEAN,
    "i32": T.INT32,
    "i64": T.INT64,
    "f32": T.FLOAT,
    "f64": T.DOUBLE,
    "text": T.TEXT,
    "str": T.STRING,
    "ts": T.TIMESTAMP,
    "date": T.DATE,
    "blob": T.BLOB,
}
DEVICES = ["root.sg1.d2", "root.sg1.d1", "root.sg2.x.d3", "root.sg1.d10", "root.a.b.c.d"]


def _value(kind: Any, rng: np.random.Generator) -> Any:
    """One non-null point the row-wise reader reads exactly: no NaN, no NUL bytes, no
    integer beyond 2**53 (see the test on those below)."""
    if kind == T.BOOLEAN:
        return bool(rng.integers(2))
    if kind == T.INT32:
        return int(rng.integers(-(2**31), 2**31))
    if kind in (T.INT64, T.TIMESTAMP):
        return int(rng.integers(-(2**53), 2**53))
    if kind in (T.FLOAT, T.DOUBLE):
        return float(rng.normal() * 1e3)
    if kind in (T.TEXT, T.STRING):
        return "".join(rng.choice(list("abcxyz é漢"), size=int(rng.integers(0, 6))))
    if kind == T.DATE:
        return datetime.date(2000, 1, 1) + datetime.timedelta(days=int(rng.integers(0, 20000)))
    if kind == T.BLOB:
        return bytes(rng.integers(1, 256, size=int(rng.integers(0, 6))).tolist())
    raise AssertionError(kind)


def _write_random(path: Path, seed: int) -> None:
    """Devices get random measurement sets and 1-3 tablets each, interleaved across
    devices (several chunk groups per device); each tablet writes a random subset of
    the device's measurements at random increasing times, with random nulls."""
    rng = np.random.default_rng(seed)
    plan: dict[str, list[str]] = {}
    for device in DEVICES[: int(rng.integers(1, len(DEVICES) + 1))]:
        plan[device] = list(rng.choice(sorted(POOL), size=int(rng.integers(1, 6)), replace=False))
    writer = TsFileWriter(str(path))
    for device, names in plan.items():
        for name in names:
            writer.register_timeseries(device, TimeseriesSchema(name, POOL[name]))
    for part in range(int(rng.integers(1, 4))):
        for device, names in plan.items():
            subset = [n for n in names if rng.random() < 0.8] or names[:1]
            rows = int(rng.integers(1, 300))
            span = range(part * 10_000, (part + 1) * 10_000)
            times = np.sort(rng.choice(span, size=rows, replace=False)).tolist()
            tablet = Tablet(subset, [POOL[n] for n in subset], rows)
            tablet.set_table_name(device)
            tablet.set_timestamp_list(times)
            for i, name in enumerate(subset):
                null_share = rng.choice([0.0, 0.3, 0.9])
                tablet.data_list[i] = [
                    None if rng.random() < null_share else _value(POOL[name], rng)
                    for _ in range(rows)
                ]
            writer.write_tablet(tablet)
    writer.close()


def _rowwise(path: Path) -> pa.Table:
    """What ``to_arrow`` returned before the column-wise path: the reference."""
    return tsfile._native(
        path,
        "reading data",
        lambda r: tsfile._assemble(list(tsfile._tree_batches_rowwise(r)), False),
    )


def _columnwise_only(monkeypatch: pytest.MonkeyPatch, path: Path) -> pa.Table:
    """``to_arrow`` with the row-wise fallback made to fail, so a pass proves the
    column-wise path read every device."""

    def refuse(*args: object) -> Iterator[pa.Table]:
        raise AssertionError(f"fell back to the row-wise reader for {args[1]}")

    with monkeypatch.context() as patch:
        patch.setattr(tsfile, "_device_rows", refuse)
        return tsfile.to_arrow(path)


def _assert_same(got: pa.Table, want: pa.Table) -> None:
    assert got.schema == want.schema
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        left, right = got.column(name), want.column(name)
        assert left.is_null().equals(right.is_null()), f"null positions differ in {name}"
        assert left.equals(right), f"values differ in {name}"


@pytest.mark.parametrize("seed", range(8))
def test_random_tree_files_read_the_same_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    path = tmp_path / "tree.tsfile"
    _write_random(path, seed)
    want = _rowwise(path)
    got = _columnwise_only(monkeypatch, path)
    _assert_same(got, want)
    assert want.num_rows > 0 and want.column("device").null_count == 0
    assert tsfile.row_count(path) == want.num_rows
    assert tsfile.inspect(path).rows == want.num_rows


def test_every_type_with_nulls_and_unaligned_series(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each measurement of one device has its own times and its own nulls."""
    rng = np.random.default_rng(99)
    path = tmp_path / "types.tsfile"
    writer = TsFileWriter(str(path))
    for name, kind in POOL.items():
        writer.register_timeseries("root.sg.d1", TimeseriesSchema(name, kind))
    writer.register_timeseries("root.sg.d0", TimeseriesSchema("i64", T.INT64))
    for step, (name, kind) in enumerate(POOL.items(), start=2):
        times = list(range(0, 400, step))  # a different time grid per measurement
        tablet = Tablet([name], [kind], len(times))
        tablet.set_table_name("root.sg.d1")
        tablet.set_timestamp_list(times)
        tablet.data_list[0] = [None if t % 7 == 3 else _value(kind, rng) for t in times]
        writer.write_tablet(tablet)
    tablet = Tablet(["i64"], [T.INT64], 3)
    tablet.set_table_name("root.sg.d0")
    tablet.set_timestamp_list([5, 6, 1000])
    tablet.data_list[0] = [1, None, 3]
    writer.write_tablet(tablet)
    writer.close()

    want = _rowwise(path)
    got = _columnwise_only(monkeypatch, path)
    _assert_same(got, want)
    assert got.column_names == ["time", "device", *sorted(POOL)]
    assert [str(f.type) for f in got.schema][2:] == [
        "bool", "binary", "date32[day]", "float", "double", "int32", "int64",
        "string", "string", "int64",
    ]  # fmt: skip
    d1 = got.filter(pc.equal(got.column("device"), "root.sg.d1"))
    assert d1.column("time").to_pylist() == sorted(
        {t for step in range(2, 2 + len(POOL)) for t in range(0, 400, step) if t % 7 != 3}
    )
    assert d1.column("b").null_count > 0  # times where only other measurements have points


def test_long_series_over_many_native_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = 150_000
    times = np.arange(rows, dtype=np.int64) * 10
    path = tmp_path / "long.tsfile"
    writer = TsFileWriter(str(path))
    for name, kind in (("a", T.DOUBLE), ("b", T.INT32)):
        writer.register_timeseries("root.sg.d1", TimeseriesSchema(name, kind))
    tablet = Tablet(["a", "b"], [T.DOUBLE, T.INT32], rows)
    tablet.set_table_name("root.sg.d1")
    tablet.set_timestamp_list(times.tolist())
    tablet.data_list[0] = [None if i % 5 == 0 else i / 2 for i in range(rows)]
    tablet.data_list[1] = [i if i % 3 == 0 else None for i in range(rows)]
    writer.write_tablet(tablet)
    writer.close()
    want = _rowwise(path)
    _assert_same(_columnwise_only(monkeypatch, path), want)
    index = np.arange(rows)
    assert want.num_rows == int(np.sum(~((index % 5 == 0) & (index % 3 != 0))))  # no all-null rows


def test_sealsync_written_files_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = pa.table(
        {
            "time": pa.array([3, 1, 2, 1, 5, 9], pa.int64()),
            "device": ["root.a.d1", "root.a.d1", "root.a.d1", "root.a.d2", "root.a.d2", "root.b"],
            "s1": pa.array([10, None, 30, None, None, 1], pa.int64()),
            "s2": pa.array([None, 2.5, 3.5, 1.5, None, None], pa.float64()),
            "flag": pa.array([None, None, None, True, False, None], pa.bool_()),
        }
    )
    path = tmp_path / "mixed.tsfile"
    tsfile.write_arrow(path, table)
    _assert_same(_columnwise_only(monkeypatch, path), _rowwise(path))


def _write_chunks(path: Path, ranges: list[tuple[int, int]]) -> None:
    """root.sg.d1 written in one tablet per range; root.sg.d2 once, in order."""
    writer = TsFileWriter(str(path))
    for device in ("root.sg.d1", "root.sg.d2"):
        for name in ("s1", "s2"):
            writer.register_timeseries(device, TimeseriesSchema(name, T.INT64))
    for part, (start, stop) in enumerate(ranges):
        tablet = Tablet(["s1", "s2"], [T.INT64, T.INT64], stop - start)
        tablet.set_table_name("root.sg.d1")
        tablet.set_timestamp_list(list(range(start, stop)))
        tablet.data_list[0] = [part * 1000 + t for t in range(start, stop)]
        tablet.data_list[1] = [None if t % 2 else part for t in range(start, stop)]
        writer.write_tablet(tablet)
        writer.flush()
    tablet = Tablet(["s1"], [T.INT64], 3)
    tablet.set_table_name("root.sg.d2")
    tablet.set_timestamp_list([1, 2, 3])
    tablet.data_list[0] = [1, 2, 3]
    writer.write_tablet(tablet)
    writer.close()


@pytest.mark.parametrize(
    "ranges",
    [[(0, 5), (5, 10)], [(0, 6), (3, 9)], [(5, 10), (0, 5)]],
    ids=["in-order", "overlapping", "backwards"],
)
def test_series_with_chunks_out_of_time_order_go_row_wise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranges: list[tuple[int, int]]
) -> None:
    """Chunks of one series that overlap or go back in time (the writer allows it)
    are merged by the row-wise query its own way; those devices keep that path."""
    path = tmp_path / "chunks.tsfile"
    _write_chunks(path, ranges)
    fallen: list[str] = []
    rowwise = tsfile._device_rows

    def spy(reader: Any, device: str, *rest: Any) -> Iterator[pa.Table]:
        fallen.append(device)
        return rowwise(reader, device, *rest)

    want = _rowwise(path)
    with monkeypatch.context() as patch:
        patch.setattr(tsfile, "_device_rows", spy)
        got = tsfile.to_arrow(path)
    _assert_same(got, want)
    in_order = all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert fallen == ([] if in_order else ["root.sg.d1"])


def test_values_the_rowwise_reader_altered_come_back_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NaN stays NaN, a BLOB stays whole, a 64-bit integer stays exact, as the
    table-model and Parquet readers return them. The row-wise reader turned NaN into
    null, cut a BLOB at its first NUL byte and rounded INT64/TIMESTAMP values past
    2**53 through a double; every other value is the same both ways."""
    path = tmp_path / "exact.tsfile"
    big = [2**62 + 1, None, -(2**63) + 7]
    written: dict[str, tuple[Any, list[Any]]] = {
        "d": (T.DOUBLE, [float("nan"), None, 1.5]),
        "f": (T.FLOAT, [0.5, float("nan"), None]),
        "bl": (T.BLOB, [b"a\x00b", None, b"\x00"]),
        "l": (T.INT64, big),
        "ts": (T.TIMESTAMP, big[::-1]),
        "n": (T.INT32, [1, 2, 3]),
    }
    writer = TsFileWriter(str(path))
    for name, (kind, _) in written.items():
        writer.register_timeseries("root.sg.d1", TimeseriesSchema(name, kind))
    tablet = Tablet(list(written), [kind for kind, _ in written.values()], 3)
    tablet.set_table_name("root.sg.d1")
    tablet.set_timestamp_list([1, 2, 3])
    for i, (_, values) in enumerate(written.values()):
        tablet.data_list[i] = values
    writer.write_tablet(tablet)
    writer.close()
    got = _columnwise_only(monkeypatch, path)
    d, f = got.column("d").to_pylist(), got.column("f").to_pylist()
    assert np.isnan(d[0]) and d[1:] == [None, 1.5]
    assert f[0] == 0.5 and np.isnan(f[1]) and f[2] is None
    for name in ("bl", "l", "ts", "n"):
        assert got.column(name).to_pylist() == written[name][1], name
    want = _rowwise(path)
    assert got.schema == want.schema
    _assert_same(got.select(["time", "device", "n"]), want.select(["time", "device", "n"]))


def test_reader_failure_in_the_columnwise_path_is_a_format_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A locator the native side rejects surfaces as the usual one-line FormatError."""
    path = tmp_path / "f.tsfile"
    _write_random(path, 1)
    real: Callable[..., Any] = native.TsFileReader.get_timeseries_metadata

    def shifted(self: Any, devices: Any) -> Any:
        groups = real(self, devices)
        for group in groups.values():
            for meta in group.timeseries:
                meta.value_metadata_offset += 10**9
        return groups

    class Reader:
        """The native reader with its metadata offsets pushed past the file."""

        def __init__(self, p: str) -> None:
            self._inner = native.TsFileReader(p)

        def get_timeseries_metadata(self, devices: Any) -> Any:
            return shifted(self._inner, devices)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    monkeypatch.setattr(native, "TsFileReader", Reader)
    with pytest.raises(FormatError) as info:
        tsfile.to_arrow(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
