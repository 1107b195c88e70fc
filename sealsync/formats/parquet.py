"""Parquet data files (docs/design.md §1.3), read and written with pyarrow.

The layout sealsync expects: an int64 ``time`` column (epoch milliseconds), a
string ``device`` column, then measurement columns of any type Spark reads. One
Parquet row is one row of the table: ``row_count`` is the footer's row count and
costs no data read; ``devices`` reads the ``device`` column only.

A complete file is ``PAR1`` at head and tail, a footer length (little-endian
int32 before the tail magic) that fits the file and :data:`MAX_FOOTER`, and a footer
that pyarrow parses.

What a file decodes to is bounded before its values are decoded: Parquet compresses
a run of one value to almost nothing, so a file of a few KiB can hold a column of a
million copies of a long string, gigabytes as strings. The footer gives each column
chunk's value count, and each fixed-width column's decoded size follows from it; a
plain string column's is at most its uncompressed bytes; a dictionary-encoded one's is
measured from its indices and dictionary, read as such (4 bytes a value, never the
strings). A file whose columns add up to more than :data:`MAX_DECODED` is refused
(:func:`decoded_size`); the receiver's check reads the ``device`` column the same way,
as a dictionary, so no check ever holds a column as strings.

pyarrow bounds-checks what it reads: in 800 truncated or byte-flipped
variants of a file none crashed, hung, or raised anything but FormatError here
(unlike TsFile). Bytes flipped inside data pages go unnoticed unless the writer
stored page checksums; ``write_arrow`` stores them and every read verifies them.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import numpy as np
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
MAX_FOOTER = 16 << 20
"""The largest footer parsed (bytes): a thousand row groups of a hundred columns each
take a few MiB."""
MAX_DECODED = 1 << 30
"""The most bytes a file's columns may decode to (as Arrow holds them: strings as
their bytes and a 4-byte offset each). The loader reads a file with deletions whole
into memory, and Spark reads every file's rows; a file past this is refused."""
_BATCH = 1 << 16
"""Rows measured at a time: what is held is this many 4-byte indices and the
dictionary they index."""
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
_PLAIN_STRINGS = frozenset({"PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "RLE", "BIT_PACKED"})
"""Encodings a string column chunk may use for its decoded size to be at most its
uncompressed bytes: each value's bytes are written out (RLE and bit packing are the
levels')."""


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
    if footer_len > MAX_FOOTER:
        raise unreadable(path, KIND, f"a footer of {footer_len} bytes (at most {MAX_FOOTER})")


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


def _too_large(path: str | os.PathLike[str], size: int, how: str) -> FormatError:
    return FormatError(
        f"{os.fspath(path)}: its columns decode to {how}{size} bytes, over the limit of "
        f"{MAX_DECODED} for one Parquet file (write smaller files)"
    )


def _footer_size(meta: pq.FileMetaData) -> tuple[int, list[str]]:
    """What the footer alone says the columns decode to at least, and the top-level
    string columns whose size must be measured (dictionary-encoded or prefix-coded
    somewhere: their values' bytes are not in the file)."""
    total = 0
    measure: dict[str, None] = {}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            values = max(chunk.num_values, 0)
            kind = chunk.physical_type
            if kind in _WIDTH:
                total += values * _WIDTH[kind]
            elif kind == "FIXED_LEN_BYTE_ARRAY":
                width = meta.schema.column(c).length or 0
                total += values * max(width, 1)
            elif set(chunk.encodings) <= _PLAIN_STRINGS:
                total += 4 * values + max(chunk.total_uncompressed_size, 0)
            else:
                total += 4 * values
                measure[chunk.path_in_schema] = None
    return total, list(measure)


def decoded_size(path: str | os.PathLike[str], meta: pq.FileMetaData | None = None) -> int:
    """The bytes the file's columns decode to (at most; exactly for the dictionary-
    encoded string columns, which are measured); FormatError past :data:`MAX_DECODED`,
    as soon as the count passes it, without decoding a string."""
    meta = _metadata(path) if meta is None else meta
    total, measure = _footer_size(meta)
    if total > MAX_DECODED:
        raise _too_large(path, total, "at least ")
    names = set(meta.schema.to_arrow_schema().names)
    for name in measure:
        if name not in names:
            raise FormatError(
                f"{os.fspath(path)}: column {name!r} is a nested column of encoded strings, "
                "whose decoded size cannot be told before decoding it"
            )
        for column in _dictionary_batches(path, name):
            total += _string_bytes(column)
            if total > MAX_DECODED:
                raise _too_large(path, total, "more than ")
    return total


def _dictionary_batches(path: str | os.PathLike[str], name: str) -> Iterator[pa.DictionaryArray]:
    """Column ``name`` in batches of :data:`_BATCH` rows, as dictionary arrays."""
    try:
        reader = pq.ParquetFile(
            os.fspath(path), read_dictionary=[name], page_checksum_verification=True
        )
        for batch in reader.iter_batches(batch_size=_BATCH, columns=[name]):
            column = batch.column(0)
            if not pa.types.is_dictionary(column.type):
                column = column.dictionary_encode()
            yield column
    except (FormatError, MemoryError):
        raise
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise unreadable(path, KIND, f"column {name!r}: {one_line(exc)}") from exc


def _string_bytes(column: pa.DictionaryArray) -> int:
    """The bytes of ``column``'s values as strings (their offsets are counted from the
    footer)."""
    lengths = pc.binary_length(column.dictionary).to_numpy(zero_copy_only=False)
    indices = column.indices.to_numpy(zero_copy_only=False)
    valid = np.asarray(column.is_valid())
    used = np.bincount(indices[valid].astype(np.int64), minlength=len(lengths))
    return int(used @ np.nan_to_num(lengths).astype(np.int64))


def _device_values(path: str | os.PathLike[str]) -> tuple[list[str], int]:
    """The distinct ``device`` values and how many rows hold one, read as a
    dictionary (its strings are never repeated per row); FormatError for a null."""
    found: set[str] = set()
    rows = 0
    for column in _dictionary_batches(path, DEVICE_COLUMN):
        if column.null_count:
            raise FormatError(f"{os.fspath(path)}: 'device' column holds nulls")
        rows += len(column)
        used = np.unique(column.indices.to_numpy(zero_copy_only=False))
        found.update(column.dictionary.cast(pa.string()).take(pa.array(used)).to_pylist())
    return sorted(found), rows


def _read(path: str | os.PathLike[str], columns: list[str] | None) -> pa.Table:
    meta = _metadata(path)
    _check_schema(path, meta.schema.to_arrow_schema())
    decoded_size(path, meta)
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
    """Sorted distinct ``device`` values; reads that one column only, as a dictionary."""
    return list(inspect(path).devices)


def row_count(path: str | os.PathLike[str]) -> int:
    """Rows in the file, from the footer."""
    meta = _metadata(path)
    _check_schema(path, meta.schema.to_arrow_schema())
    return int(meta.num_rows)


def inspect(path: str | os.PathLike[str]) -> FileInfo:
    """Devices from the data, rows from the footer (checked against the data read);
    FormatError for a file that would decode to more than :data:`MAX_DECODED`."""
    meta = _metadata(path)
    _check_schema(path, meta.schema.to_arrow_schema())
    decoded_size(path, meta)
    found, rows = _device_values(path)
    if rows != meta.num_rows:
        raise FormatError(f"{os.fspath(path)}: footer says {meta.num_rows} rows, data has {rows}")
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
