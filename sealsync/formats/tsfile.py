"""Apache TsFile data files, read and written with the ``tsfile`` package (2.5).

What the package offers, as learned from the installed 2.5 wheel:

* **Writing, tree model** — ``TsFileWriter(path)``, ``register_timeseries(device,
  TimeseriesSchema(name, TSDataType))`` per measurement, then one ``Tablet`` per
  device (``tablet.set_table_name(device)``; ``write_tablet``). ``None`` in a
  tablet column is a missing point. Assigning ``tablet.timestamp_list`` and
  ``tablet.data_list[i]`` whole is far faster than ``add_value_by_index``.
  This is the model sealsync writes (:func:`write_arrow`, the simulator): devices
  like ``root.sg1.d1``, measurements like ``s1``.
* **Writing, table model** — ``TsFileTableWriter`` with a ``TableSchema``; the
  device id is the table name plus the tag values (``DeviceID.path`` renders it
  dotted, a null tag as ``null``: ``trains.L2.null``). sealsync reads such files
  but never writes them.
* **Devices** — ``TsFileReader.get_all_devices()`` lists ``DeviceID(path, ...)``
  from the file's metadata index, for both models; ``path`` is the device.
* **Model** — ``get_all_table_schemas()`` is empty for a tree-model file.
* **Data, tree** — per series, column-wise: ``prepare_series(locator,
  trust_index=True)`` on the locator a series' ``TimeseriesMetadata`` carries
  (``get_timeseries_metadata(None)``: layout, value and time metadata offsets and
  lengths), then ``query_prepared`` and ``read_arrow_record_batch()`` until
  ``None``: ``time`` plus the typed values (TIMESTAMP as ``timestamp[ns]`` over the
  stored millisecond number). The locator tuple is (index identity, file id, file
  size, fingerprint, locator id, flags, layout, value offset, value length, time
  offset, time length); identity, file id, fingerprint and locator id only matter
  to the package's own dataset index, and ``trust_index`` skips its file
  generation check, not the bounds checks. A device's rows are then the union of
  its series' timestamps, merged here (:func:`_device_columns`).
  Per device, row-wise: ``query_timeseries(device, measurements, t0, t1)``
  returns ``time`` plus one column per measurement (named
  ``<device>.<measurement>``), one row per timestamp at which any of them has a
  point (nulls elsewhere); ``read_data_frame(n)`` turns up to ``n`` rows into
  pandas, which turns NaN into null, rounds INT64/TIMESTAMP values past 2**53
  through a double, and cuts BLOB values at the first NUL byte. Only the
  fallback (:func:`_device_rows`) still reads this way. ``read_arrow_batch``
  refuses (invalid argument) the results of ``query_timeseries``,
  ``query_tree_by_row`` and ``query_table_on_tree``: only table queries and
  prepared series produce Arrow.
* **Data, table** — ``query_table(table, columns, batch_size=N)`` then
  ``read_arrow_batch()`` until ``None``; first column is the time.
* **Row counts** — per-measurement statistics hold a count, but a device's rows
  are the *union* of its measurements' timestamps, which metadata cannot give
  exactly. So :func:`row_count` scans the data; that also proves every chunk
  decodes, which the receiver wants of an untrusted file anyway.

Robustness: the C++ reader trusts what it reads. A file cut in the middle with
its tail glued back on made ``get_all_devices()`` segfault, so before the native
reader sees a file we check, in Python: head magic and version, tail magic, the
metadata length, and (version 4) the whole top of the metadata up to
``meta_offset`` (table -> device index map, table schemas, every length, every
offset in order inside the index region, ``meta_offset`` on the index
separator). Fuzzing 7 kinds of file: ~1000 truncations and ~800 flipped footer
bytes gave no crash, and all but 2 truncations were rejected up front. But
flipped bytes *before* the footer, in the measurement index or in data pages,
still crash the reader (SIGSEGV, SIGABRT from heap corruption) or make it loop
forever, in ~2-4% of cases. So untrusted files must be read in a worker
process that is killed on a timeout (``receiver.inspect_pool``).
Flips that decode fine go unnoticed (TsFile has no checksums); MD5 on transfer
covers those.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sealsync.errors import FormatError
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
KIND = "TsFile"
MAGIC = b"TsFile"
HEADER_LEN = len(MAGIC) + 1  # magic + version byte
TAIL_LEN = 4 + len(MAGIC)  # int32 metadata length + magic
KNOWN_VERSIONS = (3, 4)
SEPARATOR_MARKER = 0x02
_DEVICE_NODE_TYPES = (0, 1)  # INTERNAL_DEVICE, LEAF_DEVICE
_DATA_TYPES = (0, 1, 2, 3, 4, 5, 8, 9, 10, 11)  # BOOLEAN .. STRING, no VECTOR
_COLUMN_CATEGORIES = (0, 1, 2, 3)  # TAG, FIELD, ATTRIBUTE, TIME
_BATCH_ROWS = 65536
_T_MIN = -(2**63)
_T_MAX = 2**63 - 1


class _Corrupt(Exception):
    """The footer does not parse; internal, always turned into FormatError."""


# --------------------------------------------------------------------------- framing


class _Cursor:
    """Reads the TsFile serialisation primitives with bounds checks."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def u8(self) -> int:
        if self.pos >= len(self.data):
            raise _Corrupt("metadata ends early")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def var_uint(self) -> int:
        # Same loop as the C++ reader (including its 0x0F stop quirk).
        value, shift = 0, 0
        byte = self.u8()
        while byte != 0x0F and byte & 0x80:
            value |= (byte & 0x7F) << shift
            shift += 7
            if shift > 28:
                raise _Corrupt("varint too long")
            byte = self.u8()
        return (value | (byte << shift)) & 0xFFFFFFFF

    def var_int(self) -> int:
        raw = self.var_uint()
        value = raw >> 1
        return ~value if raw & 1 else value

    def var_str(self, nullable: bool = False) -> str | None:
        length = self.var_int()
        if length == -1 and nullable:
            return None
        if length < 0 or length > self.remaining():
            raise _Corrupt("string length out of range")
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def i64(self) -> int:
        if self.remaining() < 8:
            raise _Corrupt("metadata ends early")
        value: int
        (value,) = struct.unpack_from(">q", self.data, self.pos)
        self.pos += 8
        return value

    def i32(self) -> int:
        if self.remaining() < 4:
            raise _Corrupt("metadata ends early")
        value: int
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def i32_str(self) -> str:
        length = self.i32()
        if length < 0 or length > self.remaining():
            raise _Corrupt("string length out of range")
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def count(self) -> int:
        """An element count: each element takes at least one byte, so bound it."""
        n = self.var_uint()
        if n > self.remaining():
            raise _Corrupt("element count larger than the metadata")
        return n


def _check_footer(meta: bytes, meta_start: int, byte_at: Any) -> None:
    """Walk a version-4 TsFileMeta up to ``meta_offset``; check every length and offset.

    Layout (tsfile C++ ``TsFileMeta::deserialize_from``): table name -> device
    index node; table name -> table schema; ``meta_offset``; bloom filter;
    properties. The native reader does not stop on a short read here, which is
    how a bad length becomes a wild pointer, so each one is bounded first.
    """
    cur = _Cursor(meta)
    nodes: list[list[int]] = []  # per top node: child offsets then its end offset
    for _ in range(cur.count()):  # table name -> device index node
        cur.var_str()
        offsets = []
        for _ in range(cur.count()):
            for _ in range(cur.count()):  # device id segments
                cur.var_str(nullable=True)
            offsets.append(cur.i64())
        offsets.append(cur.i64())  # end offset
        if cur.u8() not in _DEVICE_NODE_TYPES:
            raise _Corrupt("bad index node type")
        nodes.append(offsets)
    for _ in range(cur.count()):  # table name -> table schema
        cur.var_str()
        for _ in range(cur.count()):  # columns: measurement schema + category
            cur.i32_str()
            if cur.u8() not in _DATA_TYPES:
                raise _Corrupt("bad column data type")
            cur.u8()  # encoding
            cur.u8()  # compression
            props = cur.i32()
            if not 0 <= props <= cur.remaining():
                raise _Corrupt("bad column property count")
            for _ in range(2 * props):
                cur.i32_str()
            if cur.i32() not in _COLUMN_CATEGORIES:
                raise _Corrupt("bad column category")
    meta_offset = cur.i64()
    if not HEADER_LEN <= meta_offset < meta_start:
        raise _Corrupt("meta offset outside the file body")
    if byte_at(meta_offset) != SEPARATOR_MARKER:
        raise _Corrupt("meta offset does not point at the index separator")
    for offsets in nodes:  # children live after the separator, in file order
        bounds = [meta_offset, *offsets]
        if not all(a < b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise _Corrupt("index offsets out of order or before the index")
        if offsets[-1] > meta_start:
            raise _Corrupt("index offset past the metadata")


_END_READ = 64 << 10
"""Bytes read from a file's end at once: the tail and, in most files, all the metadata
and the index separator before it, so the framing check reads a file twice, not five
times (it runs for every file received, in the format-check workers)."""


def _check_frame(path: str | os.PathLike[str]) -> None:
    """Reject, without the native reader, anything that is not a whole TsFile."""
    try:
        with open(path, "rb", buffering=0) as f:
            _check_frame_of(f.fileno(), path)
    except _Corrupt as exc:
        raise unreadable(path, KIND, f"metadata corrupt: {exc}") from None
    except OSError as exc:
        raise unreadable(path, KIND, one_line(exc)) from exc


def _check_frame_of(fd: int, path: str | os.PathLike[str]) -> None:
    size = os.fstat(fd).st_size
    if size < HEADER_LEN + TAIL_LEN:
        raise unreadable(path, KIND, f"only {size} bytes")
    head = os.pread(fd, HEADER_LEN, 0)
    end_at = max(size - _END_READ, 0)
    end = os.pread(fd, size - end_at, end_at)
    tail = end[-TAIL_LEN:]
    if head[: len(MAGIC)] != MAGIC:
        raise unreadable(path, KIND, "no TsFile magic at the head")
    if len(end) != size - end_at or tail[-len(MAGIC) :] != MAGIC:
        raise unreadable(path, KIND, "no TsFile magic at the tail (truncated?)")
    version = head[len(MAGIC)]
    if version not in KNOWN_VERSIONS:
        raise unreadable(path, KIND, f"unknown version byte {version}")
    (meta_len,) = struct.unpack(">i", tail[:4])
    meta_start = size - TAIL_LEN - meta_len
    if meta_len <= 0 or meta_start < HEADER_LEN:
        raise unreadable(path, KIND, f"metadata length {meta_len} does not fit the file")
    if version != 4:
        return
    if meta_start >= end_at:
        meta = end[meta_start - end_at : len(end) - TAIL_LEN]
    else:
        meta = os.pread(fd, meta_len, meta_start)

    def byte_at(pos: int) -> int:
        if end_at <= pos < size:
            return end[pos - end_at]
        got = os.pread(fd, 1, pos)
        return got[0] if got else -1

    _check_footer(meta, meta_start, byte_at)


# --------------------------------------------------------------------------- reading


def _native_module() -> Any:
    """The ``tsfile`` package, imported on first use: it drags in pandas and a C++
    library, which commands that never read a TsFile should not pay for."""
    import tsfile

    return tsfile


def _reader(path: str | os.PathLike[str]) -> Any:
    """A native reader, opened only once the framing checks pass."""
    _check_frame(path)
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
    return sorted({d.path for d in reader.get_all_devices()})


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
    """Per table, batches with the device rendered like ``DeviceID.path``."""
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
                if tags:
                    parts = [pc.fill_null(batch.column(t).cast(pa.string()), "null") for t in tags]
                    device = pc.binary_join_element_wise(table_name, *parts, ".")
                else:
                    device = pa.array([table_name] * batch.num_rows, pa.string())
                columns = {
                    TIME_COLUMN: batch.column(0).cast(pa.int64()),
                    DEVICE_COLUMN: device,
                }
                for name in fields:
                    columns[name] = batch.column(name)
                yield pa.table(columns)
        finally:
            result.close()


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
    """Magic at head and tail, a sane footer, and metadata the native reader can read."""
    try:
        _native(
            path, "reading metadata", lambda r: (r.get_all_devices(), r.get_timeseries_metadata())
        )
    except FormatError:
        return False
    return True


def devices(path: str | os.PathLike[str]) -> list[str]:
    """Sorted distinct devices, from the file's metadata index only."""
    return _native(path, "listing devices", _device_list)


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


def verify(path: str | os.PathLike[str]) -> FileInfo:
    """The receiver's check (docs/design.md §1.3): whole framing, readable metadata, devices.

    Rows are not counted (``rows == -1``): that decodes every chunk, orders of
    magnitude slower than this check (docs/performance.md), and the transfer's MD5
    already proves the bytes are the sender's sealed file.
    """

    def run(reader: Any) -> FileInfo:
        found = _device_list(reader)
        reader.get_timeseries_metadata()
        return FileInfo(devices=tuple(found), rows=-1)

    return _native(path, "reading metadata", run)


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
