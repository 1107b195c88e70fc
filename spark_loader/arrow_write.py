"""Parquet files in, the table's Parquet files out: Arrow's C++ reader and writer on the
executors, run by one Spark job.

A received Parquet file becomes its partition's data file by a copy that changes only
its shape (the table's columns, in order, cast; the points of its ``X.mods``/``X.mods2``
gone). Spark's own write does that row by row (each value through an ``InternalRow``
into parquet-mr's column writers); Arrow reads and writes whole columns, and so does
the copy in a fraction of the time (docs/performance.md). Spark still runs it: one task
per slice of the batch's files, in its Python workers (``mapInArrow`` over a DataFrame
of file rows), so on a cluster the work spreads over the executors as every other read.

Each task writes ``<staging>/__sealsync_key=<key>/part-<uuid>.parquet`` itself and
returns, per file, its key, the path it wrote and the rows in it. Spark's commit
protocol does not see these files, so the driver keeps exactly the ones the job's
result names (:func:`keep_returned`): a failed or repeated task attempt's files are
removed, and the staging folder is then laid out as Spark's keyed write lays it out
(:mod:`.job` reads and moves it the same way).

A file that fails raises :data:`.tsfile_read.FILE_ERROR` with its id, so that the
driver can isolate it, as the TsFile readers do.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sealsync.formats import deletion
from sealsync.formats.common import TIME_COLUMN, one_line
from spark_loader.table_layout import KEY_COLUMN, part_files
from spark_loader.tsfile_read import FILE_ERROR, conform, deletions_of

#: The job's result: one row per file written (a file whose rows were all deleted
#: writes none, as Spark's write makes no folder for a key without rows).
WRITTEN_DDL = "key int, path string, rows bigint"
#: Rows per row group of a written file: Arrow's default.
_GROUP = 1 << 20
_WRITTEN = pa.schema([("key", pa.int32()), ("path", pa.string()), ("rows", pa.int64())])

#: Spark's Parquet codec names (``spark.sql.parquet.compression.codec``) -> Arrow's, for
#: the codecs both write the same way. Spark's ``lz4`` is Hadoop's framing, which Arrow
#: does not write: a session set to it (or to a codec missing here) writes with Spark.
CODECS = {
    "snappy": "snappy",
    "gzip": "gzip",
    "zstd": "zstd",
    "none": "none",
    "uncompressed": "none",
    "lz4_raw": "lz4",
    "lz4raw": "lz4",
}


def codec(spark: Any) -> str | None:
    """The session's Parquet codec as Arrow names it; None if Arrow cannot write it."""
    name = spark.conf.get("spark.sql.parquet.compression.codec", "snappy") or "snappy"
    return CODECS.get(name.strip().lower())


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth a dictionary: not the time stamps and floating point values,
    which are nearly all distinct (the choice :mod:`.job`'s Spark write makes too)."""
    return [f.name for f in schema if f.name != TIME_COLUMN and not pa.types.is_floating(f.type)]


def written_batches(
    batches: Iterator[pa.RecordBatch], schema: pa.Schema, staging: str, compression: str
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: write each file row's file as ``schema`` under ``staging``.

    ``schema`` is the table's columns (no key); rows of ``.tsfile_read.FILES_DDL``.
    A file without deletions is copied a row group at a time (a large file never sits
    whole in a worker's memory); one with deletions is read whole, as the deletions
    are applied to its time and device columns at once.
    """
    dictionary = _dictionary_columns(schema)
    for batch in batches:
        out: list[tuple[int, str, int]] = []
        for row in batch.to_pylist():
            try:
                written = _write_one(row, schema, staging, compression, dictionary)
            except Exception as exc:
                raise RuntimeError(f"{FILE_ERROR}[{row['file_id']}]: {one_line(exc)}") from None
            if written is not None:
                out.append(written)
        columns = list(zip(*out, strict=True)) if out else [(), (), ()]
        yield pa.RecordBatch.from_arrays(
            [pa.array(list(c), f.type) for c, f in zip(columns, _WRITTEN, strict=True)],
            schema=_WRITTEN,
        )


def copy_here(
    files: list[tuple[str, int, list[deletion.Deletion], str]],
    schema: pa.Schema,
    staging: str,
    compression: str,
    threads: int = 4,
) -> list[tuple[int, str, int]]:
    """The same copy run in this process, for a table on another file system: the
    received files are here and the executors cannot see them, so they are written
    here (``files``: path, key, deletions, file id) and the caller uploads what this
    returns (key, path, rows), each byte crossing to the store once, already in the
    table's shape. Arrow's reader and writer release the GIL: files are copied side by
    side. A file that fails raises as on an executor (:data:`FILE_ERROR`, its id)."""
    from concurrent.futures import ThreadPoolExecutor

    dictionary = _dictionary_columns(schema)

    def one(item: tuple[str, int, list[deletion.Deletion], str]) -> Any:
        source, key, deleted, file_id = item
        try:
            row = {"path": source, "key": key}
            return _write_one(row, schema, staging, compression, dictionary, deleted)
        except Exception as exc:
            raise RuntimeError(f"{FILE_ERROR}[{file_id}]: {one_line(exc)}") from None

    with ThreadPoolExecutor(max(1, threads)) as pool:
        return [w for w in pool.map(one, files) if w is not None]


def _write_one(
    row: dict[str, Any],
    schema: pa.Schema,
    staging: str,
    compression: str,
    dictionary: list[str],
    deleted: Sequence[deletion.Deletion] | None = None,
) -> tuple[int, str, int] | None:
    source = row["path"]
    if deleted is None and row["deletions"]:
        deleted = deletions_of(row["deletions"])
    if deleted:
        table = pq.read_table(source)
        table = deletion.apply(table, deleted, os.path.getsize(source))
        parts: Iterable[pa.Table] = [conform(table, schema, row)]
    else:
        parquet = pq.ParquetFile(source)
        parts = (
            conform(parquet.read_row_group(i), schema, row) for i in range(parquet.num_row_groups)
        )
    folder = os.path.join(staging, f"{KEY_COLUMN}={row['key']}")
    path = os.path.join(folder, f"part-{uuid.uuid4().hex}.parquet")
    rows = 0
    writer = None
    buffer: list[pa.Table] = []
    try:
        # The source's row groups are gathered up to Arrow's row group size: a sender's
        # small row groups do not make the table's small.
        for part in [*parts, None]:
            if part is not None and part.num_rows:
                buffer.append(part)
                rows += part.num_rows
            if not buffer or (part is not None and sum(b.num_rows for b in buffer) < _GROUP):
                continue
            if writer is None:
                os.makedirs(folder, exist_ok=True)
                writer = pq.ParquetWriter(
                    path, schema, compression=compression, use_dictionary=dictionary
                )
            writer.write_table(pa.concat_tables(buffer), row_group_size=_GROUP)
            buffer = []
    finally:
        if writer is not None:
            writer.close()
    return (row["key"], path, rows) if writer is not None else None


def keep_returned(staging: Path, keys: Iterable[int], written: list[Any]) -> None:
    """Remove from the ``keys``' folders of ``staging`` every part file the job's result
    ``written`` does not name: a failed or repeated task attempt's."""
    named = {str(r["path"]) for r in written}
    for key in keys:
        folder = staging / f"{KEY_COLUMN}={key}"
        if folder.is_dir():
            for path in part_files(folder):
                if str(path) not in named:
                    path.unlink()
