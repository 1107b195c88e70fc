"""Parquet data files (docs/design.md §1.3), read and written with pyarrow.

The layout sealsync expects: an int64 ``time`` column (epoch milliseconds), a
string ``device`` column, then measurement columns of any type Spark reads. One
Parquet row is one row of the table: ``row_count`` is the footer's row count and
costs no data read; ``devices`` reads the ``device`` column only.

A complete file is ``PAR1`` at head and tail, a footer length (little-endian
int32 before the tail magic) that fits the file, and a footer that pyarrow
parses. pyarrow bounds-checks what it reads: in 800 truncated or byte-flipped
variants of a file none crashed, hung, or raised anything but FormatError here
(unlike TsFile). Bytes flipped inside data pages go unnoticed unless the writer
stored page checksums; ``write_arrow`` stores them and every read verifies them.
"""

from __future__ import annotations

import os
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sealsync.errors import FormatError
from sealsync.formats.common import (
    DEVICE_COLUMN,
    RESERVED_COLUMNS,
    TIME_COLUMN,
    FileInfo,
    one_line,
    read_head_tail,
    unreadable,
)

SUFFIX = ".parquet"
KIND = "Parquet file"
MAGIC = b"PAR1"
TAIL_LEN = 4 + len(MAGIC)  # int32 footer length + magic


def _check_frame(path: str | os.PathLike[str]) -> None:
    """Reject a truncated or foreign file before pyarrow parses anything."""
    try:
        size, head, tail = read_head_tail(path, len(MAGIC), TAIL_LEN)
    except OSError as exc:
        raise unreadable(path, KIND, one_line(exc)) from exc
    if size < len(MAGIC) + TAIL_LEN:
        raise unreadable(path, KIND, f"only {size} bytes")
    if head != MAGIC:
        raise unreadable(path, KIND, "no PAR1 magic at the head")
    if tail[-len(MAGIC) :] != MAGIC:
        raise unreadable(path, KIND, "no PAR1 magic at the tail (truncated?)")
    (footer_len,) = struct.unpack("<i", tail[:4])
    if footer_len <= 0 or footer_len > size - len(MAGIC) - TAIL_LEN:
        raise unreadable(path, KIND, f"footer length {footer_len} does not fit the file")


def _metadata(path: str | os.PathLike[str]) -> pq.FileMetaData:
    _check_frame(path)
    try:
        return pq.read_metadata(os.fspath(path))
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise unreadable(path, KIND, f"footer: {one_line(exc)}") from exc


def _check_schema(path: str | os.PathLike[str], schema: pa.Schema) -> None:
    """The columns every sealsync Parquet file must have, with their types."""
    names = schema.names
    for name in RESERVED_COLUMNS:
        if names.count(name) != 1:
            raise FormatError(f"{os.fspath(path)}: Parquet file needs one {name!r} column")
    time_type = schema.field(TIME_COLUMN).type
    if not pa.types.is_int64(time_type):
        raise FormatError(f"{os.fspath(path)}: 'time' column is {time_type}, not int64")
    dev_type = schema.field(DEVICE_COLUMN).type
    if not (
        pa.types.is_string(dev_type)
        or pa.types.is_large_string(dev_type)
        or (pa.types.is_dictionary(dev_type) and pa.types.is_string(dev_type.value_type))
    ):
        raise FormatError(f"{os.fspath(path)}: 'device' column is {dev_type}, not string")


def _read(path: str | os.PathLike[str], columns: list[str] | None) -> pa.Table:
    meta = _metadata(path)
    _check_schema(path, meta.schema.to_arrow_schema())
    try:
        table = pq.read_table(os.fspath(path), columns=columns, page_checksum_verification=True)
    except Exception as exc:
        raise unreadable(path, KIND, f"data: {one_line(exc)}") from exc
    if table.column(DEVICE_COLUMN).null_count:
        raise FormatError(f"{os.fspath(path)}: 'device' column holds nulls")
    return table


def is_complete(path: str | os.PathLike[str]) -> bool:
    """``PAR1`` at head and tail and a footer that parses."""
    try:
        _metadata(path)
    except FormatError:
        return False
    return True


def devices(path: str | os.PathLike[str]) -> list[str]:
    """Sorted distinct ``device`` values; reads that one column only."""
    column = _read(path, [DEVICE_COLUMN]).column(DEVICE_COLUMN)
    return sorted(pc.unique(column.cast(pa.string())).to_pylist())


def row_count(path: str | os.PathLike[str]) -> int:
    """Rows in the file, from the footer."""
    meta = _metadata(path)
    _check_schema(path, meta.schema.to_arrow_schema())
    return int(meta.num_rows)


def inspect(path: str | os.PathLike[str]) -> FileInfo:
    """Devices from the data, rows from the footer (checked against the data read)."""
    meta = _metadata(path)
    column = _read(path, [DEVICE_COLUMN]).column(DEVICE_COLUMN)
    if len(column) != meta.num_rows:
        raise FormatError(
            f"{os.fspath(path)}: footer says {meta.num_rows} rows, data has {len(column)}"
        )
    found = sorted(pc.unique(column.cast(pa.string())).to_pylist())
    return FileInfo(devices=tuple(found), rows=meta.num_rows)


def verify(path: str | os.PathLike[str]) -> FileInfo:
    """The receiver's check: for Parquet ``inspect`` already reads only the footer and
    the ``device`` column, so it is cheap enough (rows come from the footer)."""
    return inspect(path)


def to_arrow(path: str | os.PathLike[str]) -> pa.Table:
    """``time`` (int64 ms), ``device`` (string), then the measurements in file order."""
    table = _read(path, None)
    measurements = [n for n in table.column_names if n not in RESERVED_COLUMNS]
    table = table.set_column(
        table.column_names.index(DEVICE_COLUMN),
        DEVICE_COLUMN,
        table.column(DEVICE_COLUMN).cast(pa.string()),
    )
    return table.select([TIME_COLUMN, DEVICE_COLUMN, *measurements])


def write_arrow(path: str | os.PathLike[str], table: pa.Table) -> None:
    """Write a ``to_arrow``-shaped table at ``path``, which must not exist yet.

    Like the TsFile writer, the file is written in place (an edge database's file
    is not sealed until its ``X.resource`` exists); on failure nothing is left.
    """
    for name in RESERVED_COLUMNS:
        if name not in table.column_names:
            raise ValueError(f"table has no {name!r} column")
    target = os.fspath(path)
    if os.path.exists(target):
        raise FileExistsError(f"{target} already exists")
    try:
        pq.write_table(table, target, write_page_checksum=True)
    except BaseException:
        try:
            os.unlink(target)
        except FileNotFoundError:
            pass
        raise
