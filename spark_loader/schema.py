"""Column types of the table: one type per measurement column, whatever the file.

Files from different senders and formats disagree on widths (a TsFile ``INT32``,
another file's ``int64``; ``FLOAT`` vs ``DOUBLE``), and Spark refuses to merge the
schemas of Parquet files whose types differ. So every column is normalised when it
is written: integers become ``long``, floating point becomes ``double`` (both
exact conversions); every other type is kept as it is. Then the order in which
files arrive never changes a column's type, and ``--full`` writes the same types
as incremental runs.

A column whose *kind* differs (``string`` in one file, ``double`` in the table) has
no lossless common type: the file that brings the second kind is reported and not
ingested. ``ingested.json`` remembers each column's type across runs for this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql.types import (
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    _parse_datatype_json_string,
)

from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from spark_loader.table_layout import KEY_COLUMN, PARTITION_COLUMNS

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_FLOATING = (FloatType, DoubleType)


def normalize(t: DataType) -> DataType:
    if isinstance(t, _INTEGRAL):
        return LongType()
    if isinstance(t, _FLOATING):
        return DoubleType()
    return t


def to_json(t: DataType) -> str:
    return t.json()


def from_json(text: str) -> DataType:
    return _parse_datatype_json_string(text)


def describe(t: DataType) -> str:
    return t.simpleString()


def file_problem(columns: Mapping[str, DataType]) -> str | None:
    """Why a file with these columns cannot go into the table, or None."""
    t = columns.get(TIME_COLUMN)
    if t is None or not isinstance(t, _INTEGRAL):
        return f"needs an integer {TIME_COLUMN!r} column (epoch ms), got {_shown(t)}"
    d = columns.get(DEVICE_COLUMN)
    if not isinstance(d, StringType):
        return f"needs a string {DEVICE_COLUMN!r} column, got {_shown(d)}"
    for name in (*PARTITION_COLUMNS, KEY_COLUMN):
        if name in columns:
            return f"has a column named {name!r}, which the table uses for provenance"
    seen: dict[str, str] = {}
    for name in columns:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            return f"has columns {other!r} and {name!r} that differ only in case"
    return None


def _shown(t: DataType | None) -> str:
    return "none" if t is None else describe(t)


def measurements(columns: Mapping[str, DataType]) -> dict[str, DataType]:
    return {n: t for n, t in columns.items() if n not in (TIME_COLUMN, DEVICE_COLUMN)}


def admit(registry: dict[str, str], columns: Mapping[str, DataType]) -> str | None:
    """Check a file's measurement types against the table's; record new columns.

    Returns the reason the file is refused, or None after adding its new columns
    to ``registry`` (name -> normalised type JSON).
    """
    problem = file_problem(columns)
    if problem:
        return problem
    by_lower = {name.lower(): name for name in registry}
    new: dict[str, str] = {}
    for name, t in measurements(columns).items():
        norm = normalize(t)
        known = registry.get(name)
        if known is None:
            twin = by_lower.get(name.lower())
            if twin is not None:
                return f"column {name!r} differs from the table's {twin!r} only in case"
            new[name] = to_json(norm)
        elif known != to_json(norm):
            return (
                f"column {name!r} is {describe(t)} here but "
                f"{describe(from_json(known))} in the table"
            )
    registry.update(new)
    return None


def target_schema(registry: Mapping[str, str], names: Sequence[str]) -> StructType:
    """What one Spark write produces: time, device, ``names`` sorted, the file's key."""
    fields = [StructField(TIME_COLUMN, LongType()), StructField(DEVICE_COLUMN, StringType())]
    fields += [StructField(n, from_json(registry[n])) for n in sorted(set(names))]
    fields.append(StructField(KEY_COLUMN, IntegerType()))
    return StructType(fields)
