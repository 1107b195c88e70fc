"""Apache TsFile data files: the receiver's check, reading and writing.

The check that a received file is whole, and the devices it holds, come from the
file's own metadata, walked in Python (:mod:`sealsync.formats.tsfile_meta`) for the
formats every IoTDB release from 0.12 on writes (3 and 4). Data is read and written
with the ``tsfile`` package, whose C++ reader reads format 4 only; a format-3 file is
refused here with that reason, not read wrong.

The C++ reader trusts what it reads: a bad length in a file's metadata can become a
wild pointer. So no file reaches it before the metadata check has passed, and even
then flipped bytes in pages can crash it or make it loop (TsFile has no checksums),
so untrusted files are read in worker processes killed on a timeout
(``receiver.inspect_pool``).

How the package is used, where its API is not obvious: writing goes one ``Tablet``
per device, whole columns assigned at once (far faster than ``add_value_by_index``).
A tree-model file is read column-wise, series by series, from the locator each
``TimeseriesMetadata`` carries (``prepare_series``/``query_prepared``), and a device's
rows are then the union of its series' timestamps (:func:`_device_columns`); the
row-wise ``query_timeseries`` (through pandas, which turns NaN into null, rounds int64
through a double and cuts BLOB values at a NUL byte) serves only what that cannot
read (:func:`_device_rows`). A table-model file is read per table with
``query_table`` into Arrow. Row counts scan the data: a device's rows are the union
of its series' timestamps, which statistics cannot give.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sealsync.errors import FormatError
from sealsync.formats import table_device, tsfile_meta, tsfile_support
from sealsync.formats.common import (
    DEVICE_COLUMN,
    RESERVED_COLUMNS,
    TIME_COLUMN,
    FileInfo,
    one_line,
    unreadable,
)

_T = TypeVar("_T")

SUFFIX = ".tsfile"
KIND = tsfile_meta.KIND
#: The format versions the ``tsfile`` package reads data of.
NATIVE_VERSIONS = (4,)
_BATCH_ROWS = 65536
_T_MIN = -(2**63)
_T_MAX = 2**63 - 1


# --------------------------------------------------------------------------- reading


def _native_module() -> Any:
    """The ``tsfile`` package, imported on first use: it drags in pandas and a C++
    library, which commands that never read a TsFile should not pay for."""
    import tsfile

    return tsfile


def _reader(path: str | os.PathLike[str]) -> Any:
    """A native reader, opened only once the whole metadata check has passed."""
    summary = check(path)
    if summary.version not in NATIVE_VERSIONS:
        raise FormatError(
            f"{os.fspath(path)}: TsFile format version {summary.version} is complete but "
            "its data cannot be read here: the Python tsfile package reads format 4 only"
        )
    try:
        return _native_module().TsFileReader(os.fspath(path))
    except Exception as exc:  # the native reader raises many unrelated types
        raise unreadable(path, KIND, one_line(exc)) from exc


def _native(path: str | os.PathLike[str], what: str, fn: Callable[[Any], _T]) -> _T:
    """Run ``fn`` against the file and turn any reader failure into FormatError."""
    reader = _reader(path)
    try:
        return fn(reader)
    except FormatError:
        raise
    except Exception as exc:
        raise unreadable(path, KIND, f"{what}: {one_line(exc)}") from exc
    finally:
        try:
            reader.close()
        except Exception:  # closing a broken reader must not mask the cause
            pass


def _device_list(reader: Any) -> list[str]:
    """Each device as the loader names it: a table-model one by :mod:`.table_device`."""
    tables = set(reader.get_all_table_schemas() or ())
    return sorted(
        {
            table_device.name(d.segments) if d.table_name in tables else d.path
            for d in reader.get_all_devices()
        }
    )


def _arrow_type(ts_type: Any) -> pa.DataType:
    TSDataType = _native_module().TSDataType

    mapping = {
        TSDataType.BOOLEAN: pa.bool_(),
        TSDataType.INT32: pa.int32(),
        TSDataType.INT64: pa.int64(),
        TSDataType.FLOAT: pa.float32(),
        TSDataType.DOUBLE: pa.float64(),
        TSDataType.TEXT: pa.string(),
        TSDataType.STRING: pa.string(),
        TSDataType.TIMESTAMP: pa.int64(),
        TSDataType.DATE: pa.date32(),
        TSDataType.BLOB: pa.binary(),
    }
    try:
        return mapping[ts_type]
    except KeyError:
        raise ValueError(f"unsupported TsFile data type {ts_type}") from None


def _check_names(measurements: list[str]) -> None:
    clash = sorted(set(measurements) & set(RESERVED_COLUMNS))
    if clash:
        raise ValueError(f"measurement named {clash[0]!r} clashes with a reserved column")


def _device_rows(
    reader: Any, device: str, names: list[str], types: list[pa.DataType]
) -> Iterator[pa.Table]:
    """One device through the row-wise query (``query_timeseries`` -> pandas -> Arrow).

    The fallback for what :func:`_device_columns` does not read: aligned devices
    (the ``tsfile`` package cannot write a tree-model aligned device, so the
    column-wise merge was never checked against this query on one) and series whose
    times are not strictly increasing (chunks that overlap or go back in time, which
    this query merges in its own way; keeping that is safer than guessing a rule).
    """
    result = reader.query_timeseries(device, names, _T_MIN, _T_MAX)
    try:
        while result.next():
            frame = result.read_data_frame(_BATCH_ROWS)
            if frame.shape[1] != len(names) + 1:
                raise ValueError("query returned unexpected columns")
            if len(frame) == 0:
                continue
            columns = {
                TIME_COLUMN: pa.Array.from_pandas(frame.iloc[:, 0]).cast(pa.int64()),
                DEVICE_COLUMN: pa.array([device] * len(frame), pa.string()),
            }
            for i, (name, typ) in enumerate(zip(names, types, strict=True)):
                columns[name] = pa.Array.from_pandas(frame.iloc[:, i + 1]).cast(typ)
            yield pa.table(columns)
    finally:
        result.close()


def _tree_batches_rowwise(reader: Any) -> Iterator[pa.Table]:
    """The whole file through :func:`_device_rows`: the reference the columnar path
    is tested against, and what every tree file went through before it."""
    schemas = reader.get_all_timeseries_schemas()
    for device in _device_list(reader):
        series = schemas[device].get_timeseries_list()
        names = [s.get_timeseries_name() for s in series]
        _check_names(names)
        types = [_arrow_type(s.get_data_type()) for s in series]
        yield from _device_rows(reader, device, names, types)


def _series_points(reader: Any, file_size: int, meta: Any) -> tuple[np.ndarray, pa.Array] | None:
    """Times and values of one non-aligned series, read column-wise from its chunks.

    The series is prepared from the locator its ``TimeseriesMetadata`` holds (read
    from the file's own index; the native side bounds-checks it against the file),
    so the native reader hands over whole columns instead of building a row record
    per timestamp. ``None`` when the times are not strictly increasing.
    """
    locator = (
        0,  # index identity: only the package's dataset index uses it
        0,  # file id, likewise
        file_size,
        0,  # fingerprint of size and mtime: trust_index skips that check
        0,  # locator id
        0,  # flags: aligned time/value pairing, non-aligned here
        meta.layout,
        meta.value_metadata_offset,
        meta.value_metadata_length,
        meta.time_metadata_offset,
        meta.time_metadata_length,
    )
    prepared = reader.prepare_series(locator, trust_index=True)
    try:
        result = reader.query_prepared(prepared)
        try:
            batches = []
            while (batch := result.read_arrow_record_batch()) is not None:
                if batch.num_rows:
                    batches.append(batch)
        finally:
            result.close()
    finally:
        prepared.close()
    if not batches:
        return np.empty(0, np.int64), pa.array([], pa.null())
    times = np.concatenate([b.column(0).to_numpy() for b in batches]).astype(np.int64, copy=False)
    if times.size > 1 and not bool(np.all(times[1:] > times[:-1])):
        return None
    return times, pa.concat_arrays([b.column(1) for b in batches])


def _device_columns(
    reader: Any, file_size: int, device: str, series: list[Any], types: list[pa.DataType]
) -> pa.Table | None:
    """One device's rows built from its series read column by column.

    A row per timestamp any series has a point at, in time order, nulls where a
    series has none: the same rows ``query_timeseries`` gives. ``None`` when a
    series is unfit (see :func:`_device_rows`) and the row-wise query must serve.
    """
    if any(meta.layout != 0 for meta in series):
        return None
    points = []
    for meta in series:
        got = _series_points(reader, file_size, meta)
        if got is None:
            return None
        points.append(got)
    first = points[0][0]
    if all(np.array_equal(t, first) for t, _ in points[1:]):
        times = first
        columns = [values for _, values in points]
    else:
        times = np.unique(np.concatenate([t for t, _ in points]))
        columns = []
        for t, values in points:
            if t.size == times.size:  # unique, sorted and a subset: the same times
                columns.append(values)
                continue
            index = np.full(times.size, -1, np.int64)
            index[np.searchsorted(times, t)] = np.arange(t.size)
            columns.append(values.take(pa.array(index, mask=index < 0)))
    if times.size == 0:
        return pa.table({TIME_COLUMN: pa.array([], pa.int64())})
    table: dict[str, pa.Array] = {
        TIME_COLUMN: pa.array(times, pa.int64()),
        DEVICE_COLUMN: pa.array([device], pa.string()).take(np.zeros(times.size, np.int32)),
    }
    for meta, typ, values in zip(series, types, columns, strict=True):
        table[meta.measurement_name] = values.cast(typ)
    return pa.table(table)


def _tree_batches(reader: Any, file_size: int) -> Iterator[pa.Table]:
    """Per device, in device order, its rows in time order: column-wise where it can,
    else row-wise. Already in ``to_arrow`` order, so it needs no sort of the whole file
    (Arrow's sort is stable, so sorting them again would change nothing)."""
    groups = reader.get_timeseries_metadata(None)
    paths = {tuple(d.segments): d.path for d in reader.get_all_devices()}
    for segments, device in sorted(paths.items(), key=lambda item: item[1]):
        group = groups.get(segments)
        series = list(group.timeseries) if group is not None else []
        names = [meta.measurement_name for meta in series]
        _check_names(names)
        types = [_arrow_type(meta.data_type) for meta in series]
        table = _device_columns(reader, file_size, device, series, types) if series else None
        if table is None:
            rows = list(_device_rows(reader, device, names, types))
            if rows:
                yield pa.concat_tables(rows).sort_by(TIME_COLUMN)
        elif table.num_rows:
            yield table


def _table_batches(reader: Any, tables: dict[str, Any]) -> Iterator[pa.Table]:
    """Per table, batches with the device named by its table and tags
    (:mod:`.table_device`: unambiguous, unlike ``DeviceID.path``)."""
    ColumnCategory = _native_module().ColumnCategory

    for table_name in sorted(tables):
        schema = tables[table_name]
        tags = [
            c.get_column_name()
            for c in schema.get_columns()
            if c.get_category() == ColumnCategory.TAG
        ]
        fields = [
            c.get_column_name()
            for c in schema.get_columns()
            if c.get_category() == ColumnCategory.FIELD
        ]
        _check_names(fields)
        result = reader.query_table(table_name, tags + fields, batch_size=_BATCH_ROWS)
        try:
            while True:
                batch = result.read_arrow_batch()
                if batch is None:
                    break
                if batch.num_rows == 0:
                    continue
                device = _table_devices(table_name, [batch.column(t) for t in tags], batch.num_rows)
                columns = {
                    TIME_COLUMN: batch.column(0).cast(pa.int64()),
                    DEVICE_COLUMN: device,
                }
                for name in fields:
                    columns[name] = batch.column(name)
                yield pa.table(columns)
        finally:
            result.close()


def _table_devices(table_name: str, tags: list[pa.Array], rows: int) -> pa.Array:
    """The device of each of ``rows`` rows of a table whose tag columns are ``tags``:
    each distinct tag tuple named once (:func:`.table_device.name`)."""
    if not tags:
        return pa.array([table_device.name([table_name])] * rows, pa.string())
    columns = [t.cast(pa.string()).to_pylist() for t in tags]
    names: dict[tuple[str | None, ...], str] = {}
    out = []
    for values in zip(*columns, strict=True):
        found = names.get(values)
        if found is None:
            found = names[values] = table_device.name([table_name, *values])
        out.append(found)
    return pa.array(out, pa.string())


def _batches(reader: Any, path: str | os.PathLike[str]) -> tuple[Iterator[pa.Table], bool]:
    """The file's batches, and whether they already come in ``to_arrow`` order."""
    tables = reader.get_all_table_schemas()
    if tables:
        return _table_batches(reader, tables), False
    return _tree_batches(reader, os.path.getsize(path)), True


def _assemble(batches: list[pa.Table], ordered: bool) -> pa.Table:
    if not batches:
        return pa.table(
            {TIME_COLUMN: pa.array([], pa.int64()), DEVICE_COLUMN: pa.array([], pa.string())}
        )
    table = pa.concat_tables(batches, promote_options="permissive")
    measurements = sorted(n for n in table.column_names if n not in RESERVED_COLUMNS)
    table = table.select([TIME_COLUMN, DEVICE_COLUMN, *measurements])
    if not ordered:  # table-model batches come per table, not per device
        table = table.sort_by([(DEVICE_COLUMN, "ascending"), (TIME_COLUMN, "ascending")])
    return table.combine_chunks()


def _count(reader: Any, path: str | os.PathLike[str]) -> int:
    batches, _ = _batches(reader, path)
    return sum(b.num_rows for b in batches)


def _read(reader: Any, path: str | os.PathLike[str]) -> pa.Table:
    batches, ordered = _batches(reader, path)
    return _assemble(list(batches), ordered)


# --------------------------------------------------------------------------- interface


def is_complete(path: str | os.PathLike[str]) -> bool:
    """Magic at head and tail and whole, consistent metadata (format 3 or 4)."""
    try:
        tsfile_meta.read(path)
    except FormatError:
        return False
    return True


def devices(path: str | os.PathLike[str]) -> list[str]:
    """Sorted distinct devices, from the file's metadata index only."""
    return list(tsfile_meta.read(path).devices)


def row_count(path: str | os.PathLike[str]) -> int:
    """Rows as Spark sees them; scans the data (see the module docstring for why)."""
    return _native(path, "reading data", lambda r: _count(r, path))


def inspect(path: str | os.PathLike[str]) -> FileInfo:
    """Devices and rows, proving on the way that the metadata and every chunk decode."""

    def run(reader: Any) -> FileInfo:
        found = _device_list(reader)
        rows = _count(reader, path)
        return FileInfo(devices=tuple(found), rows=rows)

    return _native(path, "reading data", run)


def check(path: str | os.PathLike[str]) -> tsfile_meta.Summary:
    """The whole metadata checked, and every chunk's data type and encoding one the
    loader reads exactly (:mod:`sealsync.formats.tsfile_support`, the loader's own
    table); FormatError with one line naming the file and the cause if not."""
    summary = tsfile_meta.read(path)
    refused = tsfile_support.file_refusal(summary.version, dict(summary.properties), summary.codecs)
    if refused is not None:
        raise FormatError(f"{os.fspath(path)}: TsFile {refused}; the loader cannot read it")
    return summary


def verify(path: str | os.PathLike[str]) -> FileInfo:
    """The receiver's check (docs/design.md §1.3): the whole metadata, every chunk's
    codec one the loader reads (:func:`check`), and the devices.

    Rows are not counted (``rows == -1``): that decodes every chunk, orders of
    magnitude slower than this check, and the transfer's MD5 already proves the bytes
    are the sender's sealed file.
    """
    return FileInfo(devices=check(path).devices, rows=-1)


def to_arrow(path: str | os.PathLike[str]) -> pa.Table:
    """``time`` (int64 ms), ``device`` (string), then measurements sorted by name.

    Rows are grouped by device (sorted), in time order within a device; a
    measurement a device lacks is null in that device's rows.
    """
    return _native(path, "reading data", lambda r: _read(r, path))


# --------------------------------------------------------------------------- writing


def _ts_type(typ: pa.DataType) -> Any:
    TSDataType = _native_module().TSDataType

    if pa.types.is_int64(typ):
        return TSDataType.INT64
    if pa.types.is_int32(typ):
        return TSDataType.INT32
    if pa.types.is_float64(typ):
        return TSDataType.DOUBLE
    if pa.types.is_float32(typ):
        return TSDataType.FLOAT
    if pa.types.is_boolean(typ):
        return TSDataType.BOOLEAN
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return TSDataType.STRING
    raise ValueError(f"no TsFile type for Arrow type {typ}")


def write_arrow(path: str | os.PathLike[str], table: pa.Table) -> None:
    """Write a ``to_arrow``-shaped table as a tree-model TsFile at ``path``.

    Each device gets the measurements it has at least one value for. A
    (time, device) pair may appear once only: TsFile cannot hold two rows for it.
    The file is complete when this returns; on failure no partial file is left.
    """
    native = _native_module()

    for name in RESERVED_COLUMNS:
        if name not in table.column_names:
            raise ValueError(f"table has no {name!r} column")
    measurements = [n for n in table.column_names if n not in RESERVED_COLUMNS]
    types = {n: _ts_type(table.schema.field(n).type) for n in measurements}
    table = table.sort_by([(DEVICE_COLUMN, "ascending"), (TIME_COLUMN, "ascending")])
    dev_col = table.column(DEVICE_COLUMN)
    if dev_col.null_count:
        raise ValueError("device column holds nulls")
    target = Path(path)
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    writer = native.TsFileWriter(os.fspath(target))
    try:
        for device in pc.unique(dev_col).to_pylist():
            rows = table.filter(pc.equal(dev_col, device))
            times = rows.column(TIME_COLUMN).to_pylist()
            if len(set(times)) != len(times):
                raise ValueError(f"device {device} has two rows with the same time")
            present = [n for n in measurements if rows.column(n).null_count < rows.num_rows]
            if not present:
                continue
            for name in present:
                writer.register_timeseries(device, native.TimeseriesSchema(name, types[name]))
            tablet = native.Tablet(present, [types[n] for n in present], rows.num_rows)
            tablet.set_table_name(device)
            tablet.set_timestamp_list(times)
            for i, name in enumerate(present):
                tablet.data_list[i] = rows.column(name).to_pylist()
            writer.write_tablet(tablet)
        writer.close()
    except BaseException:
        try:
            writer.close()
        except Exception:  # the original error matters, not this one
            pass
        target.unlink(missing_ok=True)
        raise
