"""Column types of the table, and the columns a file's series go to.

Files from different senders and formats disagree on widths (a TsFile ``INT32``,
another file's ``int64``; ``FLOAT`` vs ``DOUBLE``), and Spark refuses to merge the
schemas of Parquet files whose types differ. So every column is normalised when it
is written: integers become ``long``, floating point becomes ``double`` (both
exact conversions); every other type is kept as it is.

Which column a series goes to is :mod:`.columns`'s: one column per measurement and
kind, so no value is converted to another kind and no file is refused for a name or
a type (a measurement of two kinds has two columns).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
from spark_loader.columns import (
    META_KIND,
    META_MEASUREMENT,
    Assigner,
    ColumnLimit,
    field_metadata,
    key_of,
    kind_of,
)
from spark_loader.table_layout import KEY_COLUMN

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
    """Why a Parquet file with these columns cannot go into the table, or None: it must
    say when (an integer ``time``, epoch ms) and which device (a string ``device``)."""
    t = columns.get(TIME_COLUMN)
    if t is None or not isinstance(t, _INTEGRAL):
        return f"needs an integer {TIME_COLUMN!r} column (epoch ms), got {_shown(t)}"
    d = columns.get(DEVICE_COLUMN)
    if not isinstance(d, StringType):
        return f"needs a string {DEVICE_COLUMN!r} column, got {_shown(d)}"
    return None


def _shown(t: DataType | None) -> str:
    return "none" if t is None else describe(t)


def measurements(columns: Mapping[str, DataType]) -> list[tuple[str, DataType]]:
    """A Parquet file's series: every column but time and device."""
    return [(n, t) for n, t in columns.items() if n not in (TIME_COLUMN, DEVICE_COLUMN)]


def admit(
    assigner: Assigner, series: Sequence[tuple[str, DataType]], sender: str
) -> dict[tuple[str, str], str] | str:
    """The table column of each of a file's series (``(measurement, kind)`` -> column,
    new columns made in the assigner's registry), or the reason it must wait."""
    try:
        return assigner.assign([(name, to_json(normalize(t))) for name, t in series], sender)
    except ColumnLimit as exc:
        return str(exc)


def target_schema(
    registry: Mapping[str, str], keys: Mapping[str, Sequence[str]], names: Iterable[str]
) -> StructType:
    """What one Spark write produces: time, device, the columns ``names`` (sorted), each
    saying in its metadata which measurement and kind it holds, the file's key."""
    fields = [StructField(TIME_COLUMN, LongType()), StructField(DEVICE_COLUMN, StringType())]
    for n in sorted(set(names)):
        measurement, kind = key_of(n, registry[n], keys)
        fields.append(
            StructField(n, from_json(registry[n]), True, field_metadata(measurement, kind))
        )
    fields.append(StructField(KEY_COLUMN, IntegerType()))
    return StructType(fields)


def new_table_target(
    series: Sequence[tuple[str, DataType]],
) -> tuple[StructType, dict[tuple[str, str], str]]:
    """The write schema of these series into a table that has no columns yet, and each
    series' column ((measurement, kind) -> column): what a reader outside a run (a
    benchmark, a differential test) reads files with, named as a run would."""
    assigner = Assigner({}, {}, limit=max(1, len(series)))
    mapping = admit(assigner, series, "")
    assert not isinstance(mapping, str)  # the limit is the series' count
    return target_schema(assigner.columns, assigner.keys, mapping.values()), mapping


def source_of(field: StructField) -> tuple[str, str]:
    """(measurement, kind) a target field takes its values from."""
    meta = field.metadata or {}
    return str(meta.get(META_MEASUREMENT, field.name)), str(
        meta.get(META_KIND) or kind_of(field.dataType.json())
    )


def arrow_schema(target: StructType) -> Any:
    """``target`` as an Arrow schema, each column's metadata kept (PySpark's own
    conversion drops it; the Arrow readers need it to find each column's series)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    converted = to_arrow_schema(target)
    fields = []
    for arrow_field, spark_field in zip(converted, target.fields, strict=True):
        meta = {str(k): str(v) for k, v in (spark_field.metadata or {}).items()}
        fields.append(arrow_field.with_metadata(meta) if meta else arrow_field)
    return pa.schema(fields)
