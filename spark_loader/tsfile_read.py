"""TsFile reading on the executors: Apache TsFile's Java reader, or the ``tsfile`` package.

The driver never opens a TsFile: readers run on the executors, so the work spreads
over a cluster and a malformed file costs a task (the driver isolates the file),
never the driver.

Two readers, each where it gives the answer IoTDB's own reader gives (the
differential test, ``tests/test_loader_tsfile_corpus.py``, holds both to it):

* **Java** (:func:`java_schema`, :func:`java_data`): the loader's ``TsFileRows``
  over Apache TsFile's Java library, inside the executors' JVMs (:mod:`.jvm`). It
  reads format 3 (IoTDB 0.12-1.3) and format 4 (TsFile 2.x), aligned devices and
  the table model, every encoding the library has, and where a file holds a series'
  point at one time twice the later one wins, as in IoTDB.
* **C++** (:func:`schema_rows`, :func:`data_batches`, through ``mapInArrow`` in
  Spark's Python workers): ``formats.tsfile.to_arrow``. It reads only format 4, gets
  some encodings wrong and keeps a repeated point twice, so it serves only a session
  without the Java reader (one the loader did not start), and there a file of
  format 3 is refused (:func:`cpp_refusal`).

Two passes each, because the output schema must be known before rows are read: the
schema pass reads only each file's metadata (measurement names and types), the
driver merges them into one schema, then the data pass reads the rows, drops the
points the file's ``X.mods``/``X.mods2`` delete and conforms them to that schema.
The deletions come with the file's row already parsed (:data:`DELETIONS_DDL`: the
driver read the very versions the file's id names, with the one parser of each
format, :mod:`sealsync.formats.mods` and :mod:`sealsync.formats.mods2`). The Arrow
path also reads the Parquet files that have deletions.

A file that fails raises an error whose text carries :data:`FILE_ERROR` and the
file id, so the driver can tell which file of a batch broke the job.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sealsync.errors import FormatError
from sealsync.formats import deletion, tsfile_support
from sealsync.formats import tsfile as tsfile_format
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN, one_line
from spark_loader.columns import arrow_source, kind_of_arrow
from spark_loader.table_layout import KEY_COLUMN

FILE_ERROR = "sealsync-file-error"
_FILE_ERROR_RE = re.compile(re.escape(FILE_ERROR) + r"\[(f[0-9a-f]+)\]: ([^\n]*)")

#: A file's deletions (:class:`sealsync.formats.deletion.SeriesDeletion`): every point of
#: every series ``pattern`` (its nodes as written, its rules first: ``deletion.to_wire``)
#: matches whose time is in [``since``, ``until``], in the chunks that start below
#: ``below`` (null: every chunk), is gone; a table-model deletion
#: (:class:`~sealsync.formats.deletion.TableDeletion`) has its table, fields and
#: conditions in ``pattern`` instead (``deletion.to_wire``), ``below`` null;
#: ``where`` names the line or byte of the deletion file, for messages.
DELETIONS_DDL = (
    "array<struct<pattern:array<string>,since:bigint,until:bigint,below:bigint,where:string>>"
)
#: Input rows of both passes: one per file, with its deletions (read on the driver; null
#: in the schema pass and without deletions).
FILES_DDL = f"path string, file_id string, key int, deletions {DELETIONS_DDL}"
#: Output rows of the schema pass: one per measurement, plus one (name null) per file.
SCHEMA_DDL = "file_id string, name string, type string, error string"

_TYPES = {
    "BOOLEAN": pa.bool_(),
    "INT32": pa.int32(),
    "INT64": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "TEXT": pa.string(),
    "STRING": pa.string(),
    "TIMESTAMP": pa.int64(),
    "DATE": pa.date32(),
    "BLOB": pa.binary(),
}
_BATCH_ROWS = 65536


def file_error(text: str) -> tuple[str, str] | None:
    """``(file_id, reason)`` of the first per-file error in an exception's text."""
    found = _FILE_ERROR_RE.search(text)
    return (found.group(1), found.group(2).strip()) if found else None


def _arrow_type(ts_type: Any) -> pa.DataType:
    name = getattr(ts_type, "name", str(ts_type))
    try:
        return _TYPES[name]
    except KeyError:
        raise FormatError(f"unsupported TsFile data type {name}") from None


def measurement_types(path: str) -> dict[str, pa.DataType]:
    """Measurement name -> Arrow type, from the file's metadata only.

    Tree model: every device's timeseries; table model: every table's FIELD
    columns (tags become part of ``device``). These are the columns ``to_arrow``
    returns besides ``time`` and ``device``.
    """
    tsfile_format.check(path)  # framing, metadata and codec checks before the native reader
    import tsfile

    reader = tsfile.TsFileReader(path)
    try:
        found: dict[str, list[pa.DataType]] = {}
        tables = reader.get_all_table_schemas()
        if tables:
            for schema in tables.values():
                for column in schema.get_columns():
                    if column.get_category() == tsfile.ColumnCategory.FIELD:
                        found.setdefault(column.get_column_name(), []).append(
                            _arrow_type(column.get_data_type())
                        )
        else:
            for device_schema in reader.get_all_timeseries_schemas().values():
                for series in device_schema.get_timeseries_list():
                    found.setdefault(series.get_timeseries_name(), []).append(
                        _arrow_type(series.get_data_type())
                    )
    finally:
        reader.close()
    out: dict[str, pa.DataType] = {}
    for name, types in found.items():
        if name in (TIME_COLUMN, DEVICE_COLUMN):
            raise FormatError(f"measurement named {name!r} clashes with a reserved column")
        out[name] = _widest(name, types)
    return out


def _widest(name: str, types: list[pa.DataType]) -> pa.DataType:
    """One type for a measurement that devices of one file declare differently."""
    kinds = set(types)
    if len(kinds) == 1:
        return types[0]
    if all(pa.types.is_integer(t) for t in kinds):
        return pa.int64()
    if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in kinds):
        return pa.float64()
    shown = ", ".join(sorted(str(t) for t in kinds))
    raise FormatError(f"measurement {name!r} has incompatible types in one file: {shown}")


def schema_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the schema pass; per-file failures become ``error`` rows."""
    from pyspark.sql.pandas.types import from_arrow_type

    for batch in batches:
        out: list[tuple[str, str | None, str | None, str | None]] = []
        for row in batch.to_pylist():
            refused = cpp_refusal(row["path"])
            if refused:
                out.append((row["file_id"], None, None, refused))
                continue
            try:
                types = measurement_types(row["path"])
            except Exception as exc:  # the native reader raises many unrelated types
                out.append((row["file_id"], None, None, one_line(exc)))
                continue
            out.append((row["file_id"], None, None, None))
            for name, typ in sorted(types.items()):
                out.append((row["file_id"], name, from_arrow_type(typ).json(), None))
        columns = list(zip(*out, strict=True)) if out else [(), (), (), ()]
        yield pa.RecordBatch.from_arrays(
            [pa.array(list(c), pa.string()) for c in columns], schema=_SCHEMA_ARROW
        )


_SCHEMA_ARROW = pa.schema([(n, pa.string()) for n in ("file_id", "name", "type", "error")])


def series_of(rows: Iterable[Any]) -> dict[str, list[tuple[str, Any]] | str]:
    """The schema pass's rows (of either reader) per file: its series (measurement,
    Spark type), one per kind a measurement has there, or why it cannot be read."""
    from pyspark.sql.types import _parse_datatype_json_string

    out: dict[str, list[tuple[str, Any]] | str] = {}
    for row in rows:
        fid = row["file_id"]
        if row["error"] is not None:
            out[fid] = row["error"]
        elif row["name"] is None:
            out[fid] = []
        else:
            found = out.get(fid)
            if isinstance(found, list):
                found.append((row["name"], _parse_datatype_json_string(row["type"])))
    return out


def _constant(value: object, n: int, typ: pa.DataType) -> pa.Array:
    return pa.array([value], typ).take(pa.array(np.zeros(n, dtype=np.int32)))


def conform(table: pa.Table, schema: pa.Schema, row: dict[str, Any]) -> pa.Table:
    """``to_arrow`` output shaped as one Spark write: every column, in order, typed,
    each from the measurement of its kind it holds (its metadata: :mod:`.columns`)."""
    n = table.num_rows
    columns = []
    for field in schema:
        source, kind = arrow_source(field)  # the series a column holds (.columns)
        if field.name == KEY_COLUMN:
            columns.append(_constant(row["key"], n, field.type))
        elif source in table.column_names and (
            kind is None or kind_of_arrow(table.schema.field(source).type) == kind
        ):
            columns.append(table.column(source).cast(field.type))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def deletion_records(
    deletions: list[deletion.Deletion],
) -> list[tuple[list[str | None], int, int, int | None, str]]:
    """``deletions`` as rows of :data:`DELETIONS_DDL`."""
    return [
        (
            deletion.to_wire(d),
            d.start,
            d.end,
            d.below_offset if isinstance(d, deletion.SeriesDeletion) else None,
            d.where,
        )
        for d in deletions
    ]


def deletions_of(records: list[dict[str, Any]]) -> list[deletion.Deletion]:
    """Rows of :data:`DELETIONS_DDL` back as the records they were made from."""
    out: list[deletion.Deletion] = []
    for d in records:
        found = deletion.from_wire(d["pattern"], d["since"], d["until"], d["where"])
        if isinstance(found, deletion.SeriesDeletion) and d["below"] is not None:
            found = dataclasses.replace(found, below_offset=d["below"])
        out.append(found)
    return out


def _read(path: str) -> pa.Table:
    if path.endswith(".parquet"):
        return pq.read_table(path)
    return tsfile_format.to_arrow(path)


def data_batches(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the data pass: every row of every file but the points its
    deletion files delete, conformed."""
    for batch in batches:
        for row in batch.to_pylist():
            try:
                table = _read(row["path"])
                if row["deletions"]:
                    size = os.path.getsize(row["path"])
                    table = deletion.apply(table, deletions_of(row["deletions"]), size)
                table = conform(table, schema, row)
            except Exception as exc:
                raise RuntimeError(f"{FILE_ERROR}[{row['file_id']}]: {one_line(exc)}") from None
            yield from table.to_batches(max_chunksize=_BATCH_ROWS)


def cpp_refusal(path: str) -> str | None:
    """Why the C++ reader must not read ``path`` (a format it cannot read), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(7)
    except OSError:
        return None  # the reader says why
    if len(head) == 7 and head[:6] == b"TsFile" and head[6] != 4:
        return (
            f"TsFile format version {head[6]} needs the Java TsFile reader, which this "
            "Spark session lacks (start it with spark.jars.packages="
            "org.apache.tsfile:tsfile and the loader's jar, or let the loader start it)"
        )
    return None


def java_schema(spark: Any, files: Any) -> Any:
    """The schema pass on the Java reader: rows of :data:`SCHEMA_DDL`."""
    from pyspark.sql import DataFrame

    rows = spark.sparkContext._jvm.io.sealsync.spark.TsFileRows
    return DataFrame(rows.schema(files._jdf, tsfile_support.java_table()), spark)


def java_data(spark: Any, files: Any, target: Any) -> Any:
    """The data pass on the Java reader: every row of ``files``, shaped as ``target``."""
    from pyspark.sql import DataFrame

    rows = spark.sparkContext._jvm.io.sealsync.spark.TsFileRows
    return DataFrame(rows.data(files._jdf, target.json(), tsfile_support.java_table()), spark)
