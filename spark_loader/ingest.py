"""The Spark side of a run: source files in, one table partition per file out.

Per batch of files, one Spark job per kind of write:

* **Parquet** files are each first linked (hard link, else symlink) into a hidden
  folder of the table, ``.sealsync-links/<run>/b<batch>/p<n>/__sealsync_key=<k>/``
  ``data.parquet``, where ``<k>`` is the file's number in the batch. The hard link is
  a snapshot: a file the receiver deletes meanwhile stays readable until the run
  ends. On ingest, Arrow copies them on the executors (:mod:`.arrow_write`); in a
  resolved group (:mod:`.resolve`), or where Arrow cannot write the session's codec,
  Spark's own Parquet reader scans them, one scan per batch and file schema, the
  scan of ``p<n>`` yielding the key as a constant column: no per-row lookup, no join.
* **TsFiles** are read on the executors (:mod:`.tsfile_read`) over a DataFrame of
  file paths: by Apache TsFile's Java reader in the executors' JVMs (formats 3 and
  4), or, in a session without it, by the ``tsfile`` package through ``mapInArrow``
  (format 4 only); either adds the key.

**Deletions.** A file's ``X.mods`` and ``X.mods2`` (points the database deleted
after sealing: :mod:`sealsync.formats.deletion`) are read here on the driver, once per
run, when the file is prepared (they are small; the data never is), and checked to be
the versions its ``file_id`` names. The file's row carries the deletions, parsed, to
the executors' reader, which drops those points per series (path patterns, closed
time ranges, and in IoTDB 0.12-1.x only from the chunks that start below the
deletion's file offset; a table-model deletion by its table, tag predicate and fields)
and the rows left with no value. A Parquet file with
deletions is read by Arrow (:mod:`.arrow_write`, or :func:`.tsfile_read.data_batches`
in a resolved group) instead of a Spark Parquet scan, since a per-series deletion
blanks columns, not whole rows. A
deletion file that does not read makes its file skipped and reported and retried on the
next run;
:mod:`.ingest` checks that before any row of an older version leaves the table.

**Writing.** The rows are written into a fresh hidden staging folder of the table,
one folder ``__sealsync_key=<k>`` per file. Parquet files are copied there by Arrow on
the executors (:mod:`.arrow_write`), column by column; TsFiles and resolved groups by
Spark's write, whose job commit makes the folder complete or leaves it unfinished.
Then each key folder's files are moved into its file's
partition folder ``sender=/source_file=/file_id=`` (:mod:`.table`), where no reader
sees them until the run's one Delta commit adds them. Provenance is the table's
partition columns: no data file stores it, and a short int key is all the write
looks at per row. Where the loader's jar runs
(a local master, :mod:`.jvm`), its ``KeyedParquetFileFormat`` writes Spark's folders:
a task's rows come grouped by file already, so it opens a file's folder when the key
changes, where Spark's ``partitionBy`` (used everywhere else, same folders) sorts
every row by the key and copies it to drop the column (measured in
docs/performance.md).

A failing job is retried without the file that broke it, when the error names it
(our TsFile reader's marker, or the link Spark's Parquet reader failed on), else split
in halves, until each bad file is alone; only it is reported and skipped
(:mod:`.failure`).
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from sealsync.errors import FormatError
from sealsync.formats import deletion, mods, mods2
from sealsync.formats.common import TIME_COLUMN
from sealsync.ttl import database_of
from spark_loader import arrow_write, jvm, localfs, resolve
from spark_loader import schema as schemas
from spark_loader.columns import MAX_NEW_COLUMNS_PER_RUN, Assigner, kind_of
from spark_loader.discovery import PARQUET, SourceFile
from spark_loader.expiry import Expiry
from spark_loader.failure import SplitRetry, describe
from spark_loader.inputs import (
    PARQUET_GROUP,
    TSFILE,
    Prepared,
    culprit,
    parquet_input,
    stage_inputs,
    stage_tsfiles,
)
from spark_loader.report import LoadReport
from spark_loader.spark_session import stage_progress
from spark_loader.state import FileRecord, IngestState
from spark_loader.table import Partition, Table
from spark_loader.table_layout import KEY_COLUMN
from spark_loader.tsfile_read import (
    FILES_DDL,
    SCHEMA_DDL,
    data_batches,
    java_data,
    java_schema,
    schema_rows,
    series_of,
)

#: Spark's Parquet writer with a folder per key and no sort (java/, :mod:`.jvm`).
KEYED_FORMAT = "io.sealsync.spark.KeyedParquetFileFormat"


def _sender(item: Prepared) -> str:
    """Whose file it is: a failing job is split by sender first (failure.SplitRetry)."""
    return item.source.sender


def _databases(items: list[Prepared]) -> dict[int, str]:
    """key -> table-model database of the batch's files that have one (their TTL)."""
    out = {}
    for item in items:
        database = database_of(item.source.name)
        if database is not None and item.key is not None:
            out[item.key] = database
    return out


def read_deletions(source: SourceFile) -> list[deletion.Deletion] | None:
    """The deletions of ``source``'s ``.mods`` then ``.mods2``; None when either is no
    longer the version the file's id names (the next run sees the new one).

    FormatError for a file that does not read (its text names which file, and the line
    or byte); OSError as raised.
    """
    found: list[deletion.Deletion] = []
    for version, path, module in (
        (source.mods, source.mods_path, mods.read_version),
        (source.mods2, source.mods2_path, mods2.read_version),
    ):
        if version is None:
            continue
        got, read = module(path)
        if read != version:
            return None
        found.extend(got)
    return found


def file_deletions(
    source: SourceFile,
) -> tuple[list[deletion.Deletion] | None, str | None]:
    """The file's ``.mods``/``.mods2`` deletions; else None and why the file is skipped
    (None: a deletion file replaced since discovery, left to the next run, which gives
    the file a new id). Read once per run, on the driver (they are small)."""
    try:
        return read_deletions(source), None
    except FormatError as exc:  # its text names the file kind and the line or byte
        return None, str(exc)
    except OSError as exc:
        return None, f"cannot read its deletions: {exc.strerror or exc}"


def _stored(target: Any) -> pa.Schema:
    """The table's columns as a data file stores them (no key), in Arrow's types."""
    from pyspark.sql.types import StructType

    return schemas.arrow_schema(StructType([f for f in target.fields if f.name != KEY_COLUMN]))


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def conform(df: Any, target: Any) -> Any:
    """``df`` with exactly the target's columns, in order, cast, each from the series it
    holds (the target field's metadata, :mod:`.columns`); missing ones null."""
    from pyspark.sql import functions as F

    have = {f.name: f.dataType for f in df.schema.fields}
    cols = []
    for field in target.fields:
        source, kind = schemas.source_of(field)  # the series the column holds (.columns)
        if source in have and kind_of(schemas.to_json(schemas.normalize(have[source]))) == kind:
            col = F.col(_quoted(source))
            if have[source] != field.dataType:
                col = col.cast(field.dataType)
        else:
            col = F.lit(None).cast(field.dataType)
        cols.append(col.alias(field.name))
    return df.select(*cols)


def spark_write(
    spark: Any,
    frame: Any,
    target: Any,
    staging: str,
    ranks: tuple[dict[int, int], dict[int, int]] | None,
    local: bool,
) -> None:
    """Spark's write of a batch's rows into ``staging``, a folder per key; with
    ``ranks``, resolved first (:mod:`.resolve`); ``local``: the table is a local folder."""
    from pyspark.sql.types import DoubleType, FloatType

    if ranks is not None:
        frame = resolve.resolved_frame(frame, ranks[0], ranks[1], target)
    writer = frame.write.mode("errorifexists")
    if jvm.loadable(spark, KEYED_FORMAT, probe=True):
        writer = writer.format(KEYED_FORMAT)  # the same folders, without the sort
    else:
        writer = writer.format("parquet").partitionBy(KEY_COLUMN)
    writer = (
        writer.option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        # Version 1 renames each task's folders whole at commit; version 2
        # re-creates every partition folder file by file.
        .option("mapreduce.fileoutputcommitter.algorithm.version", "1")
    )
    if local:
        # The table is a local (or mounted) folder: write it without Hadoop's
        # ``.crc`` sidecar per file (Parquet pages carry their own checksums), and
        # without a forked ``chmod`` per file and folder where we can (:mod:`.localfs`).
        writer = writer.option("fs.file.impl", localfs.implementation(spark))
        writer = writer.option("fs.file.impl.disable.cache", "true")
    # Time stamps and floating point values are nearly all distinct: building a
    # dictionary per (small) partition file only to drop it is wasted work.
    for field in target.fields:
        if field.name == TIME_COLUMN or isinstance(field.dataType, (DoubleType, FloatType)):
            writer = writer.option(f"parquet.enable.dictionary#{field.name}", "false")
    writer.save(staging)


class Ingest:
    """Runs the Spark jobs of one loader run and records what they wrote."""

    def __init__(
        self,
        spark: Any,
        table: Table,
        state: IngestState,
        state_dir: Path,
        report: LoadReport,
        progress: Callable[[str], None] | None,
        run_id: str,
        sync: bool = True,
        max_new_columns: int = MAX_NEW_COLUMNS_PER_RUN,
        expiry: Expiry | None = None,
    ) -> None:
        self.spark = spark
        #: The edges' TTL at the run's ``now``: rows it expired are not written.
        self.expiry = expiry if expiry is not None and expiry.active else None
        self._tags = self.expiry.tags() if self.expiry is not None else {}
        self.table = table
        self.state = state
        self.state_dir = state_dir
        self.report = report
        self.progress = progress
        # Inputs are linked (a snapshot) into a local folder; for a table on another
        # file system they are then copied beside the table, where executors read them.
        local = table.path if table.store.local else state_dir
        self.local_links = local / table.names.links / run_id
        self.links = table.links_folder(run_id)
        self.sync = sync
        self._members: dict[str, set[str]] = {}
        self._staged: list[Path] = []  # folders of TsFiles staged for their metadata pass
        # TsFiles are read by the Java reader wherever the session has it (:mod:`.tsfile_read`).
        self.java_tsfile = jvm.tsfile_reader(spark)
        self.columns = Assigner(state.columns, state.keys, max_new_columns)

    def admit(self, item: Prepared) -> bool:
        """Give each of the file's series its table column (:mod:`.columns`); False, the
        file reported, if its sender may add no more columns this run."""
        mapping = schemas.admit(self.columns, item.series, item.source.sender)
        if isinstance(mapping, str):
            self._skip(item.source, mapping)
            return False
        item.mapping = mapping
        return True

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def _skip(self, source: SourceFile, reason: str) -> None:
        """Report a file not ingested, unless it merely left the receiver meanwhile.

        A file deleted (or replaced, or its ``.mods`` changed) on the receiver during
        the run is no failure: the next run sees the receiver as it is then.
        """
        if source.unchanged():
            self.report.skip(str(source.path), reason)
        else:
            self.report.changed += 1

    # ------------------------------------------------------------------ prepare

    def prepare(self, files: list[SourceFile]) -> list[Prepared]:
        """Read every file's columns (Parquet footers here, TsFile metadata on
        executors) and its ``.mods``/``.mods2`` deletions."""
        ready: list[Prepared] = []
        tsfiles: list[Prepared] = []
        for source in files:
            try:
                partition = self.table.partition(source.sender, source.name, source.file_id)
            except ValueError as exc:  # a name no partition folder can hold
                self._skip(source, str(exc))
                continue
            deleted, why = file_deletions(source)
            if deleted is None:
                if why is None:
                    self.report.changed += 1  # replaced since discovery: the next run
                else:
                    self._skip(source, why)
                continue
            if source.suffix != PARQUET:
                tsfiles.append(
                    Prepared(source, source.file_id, [], None, TSFILE, partition, deleted=deleted)
                )
                continue
            try:
                ready.append(parquet_input(source, partition, deleted))
            except Exception as exc:
                self._skip(source, describe(exc).reason)
        if tsfiles and not self.table.store.local:
            tsfiles = self._stage_tsfiles(tsfiles)
        if tsfiles:
            self._say(f"reading the metadata of {len(tsfiles)} TsFiles")
            found = self._tsfile_columns(tsfiles)
            for item in tsfiles:
                got = found.get(item.file_id, "no metadata returned")
                if isinstance(got, str):
                    self._skip(item.source, got)
                else:
                    item.series = got
                    ready.append(item)
        return ready

    def _stage_tsfiles(self, items: list[Prepared]) -> list[Prepared]:
        """For a table on another file system, the TsFiles copied to it before their
        metadata is read (:func:`.inputs.stage_tsfiles`); one that cannot be is skipped."""
        self._say(f"copying {len(items)} TsFiles to the table's store")
        root = self.local_links / f"s{len(self._staged)}"
        self._staged.append(root)
        staged, failed, changed = stage_tsfiles(
            items, root, self.local_links, self.links, self.table.store, self.java_tsfile
        )
        for item, reason in failed:
            self._skip(item.source, reason)
        self.report.changed += changed
        return staged

    def _link_batch(
        self, batch: list[Prepared], number: int, spark: bool = False
    ) -> list[Prepared]:
        """The batch's inputs, where the job reads them (:func:`.inputs.stage_inputs`); a
        file that cannot be staged is skipped, one replaced since discovery waits.
        ``spark``: Spark's job reads the Parquet files too (else the loader's copy)."""
        root = self.local_links / f"b{number}"
        parquet = spark or not self._copies_here()
        if not self.table.store.local and parquet:
            self._say("copying the batch's files to the table's store")
        linked, failed, changed = stage_inputs(
            batch, root, self.local_links, self.links, self.table.store, parquet
        )
        for item, reason in failed:
            self._skip(item.source, reason)
        self.report.changed += changed
        self._members = {}
        for item in linked:
            assert item.folder is not None
            self._members.setdefault(item.folder, set()).add(item.file_id)
        return linked

    def _files_df(self, items: list[Prepared], deletions: bool = False) -> Any:
        """One row per file (``FILES_DDL``); with ``deletions``, its parsed deletions.

        A local relation: Spark splits it over its default parallelism, so each task
        reads several files. One task per file (an RDD of one row per partition) cost
        more in task and Python round trips than reading the files.
        """
        rows = [
            (
                str(p.link or p.source.path),
                p.file_id,
                p.key,  # None in the schema pass, which runs before linking
                p.deletion_records() if deletions else None,
            )
            for p in items
        ]
        return self.spark.createDataFrame(rows, FILES_DDL)

    def _tsfile_columns(self, items: list[Prepared]) -> dict[str, list[tuple[str, Any]] | str]:
        """file_id -> its series (measurement, Spark type: a measurement its devices give
        two kinds has both) or the reason it cannot be read."""
        out: dict[str, list[tuple[str, Any]] | str] = {}

        def give_up(item: Prepared, reason: str) -> None:
            out[item.file_id] = f"reading metadata failed: {reason}"

        retry = SplitRetry(items, give_up, culprit, owner=_sender)
        for group in retry:
            try:
                with stage_progress(self.spark, self.progress, "TsFile metadata"):
                    files = self._files_df(group)
                    if self.java_tsfile:
                        rows = java_schema(self.spark, files).collect()
                    else:
                        rows = files.mapInArrow(schema_rows, SCHEMA_DDL).collect()
            except Exception as exc:  # a worker died: isolate the file that killed it
                retry.failed(group, exc)
                continue
            out.update(series_of(rows))
        self.report.quarantined |= retry.blamed
        return out

    # ------------------------------------------------------------------ write

    def _frame(self, batch: list[Prepared], target: Any) -> Any:
        from pyspark.sql import DataFrame

        parts = []
        groups: dict[str, list[Prepared]] = {}
        for item in batch:
            assert item.folder is not None
            groups.setdefault(item.folder, []).append(item)
        for folder, items in sorted(groups.items()):
            if items[0].kind == TSFILE and self.java_tsfile:
                parts.append(java_data(self.spark, self._files_df(items, deletions=True), target))
                continue
            plain = [p for p in items if not p.deleted]
            if items[0].kind == TSFILE or len(plain) < len(items):
                # the Arrow path: TsFiles without the Java reader, Parquet files with
                # deletions (read whole, then the deletions applied per series)
                arrow = schemas.arrow_schema(target)
                body = functools.partial(data_batches, schema=arrow)
                arrowed = items if items[0].kind == TSFILE else [p for p in items if p.deleted]
                parts.append(self._files_df(arrowed, deletions=True).mapInArrow(body, target))
                if items[0].kind == TSFILE or not plain:
                    continue
                items = plain
            reader = self.spark.read.option("basePath", folder)
            if {p.file_id for p in items} == self._members.get(folder):
                df = reader.parquet(folder)  # one listing instead of a path per file
            else:  # part of a batch being retried
                paths = [str(p.link) for p in items]
                df = reader.option("__globPaths__", "false").parquet(*paths)
            parts.append(conform(df, target))
        return functools.reduce(DataFrame.union, parts)

    def _write(
        self,
        batch: list[Prepared],
        staging: str,
        ranks: tuple[dict[int, int], dict[int, int]] | None = None,
    ) -> None:
        """Write the batch's rows by key; with ``ranks`` (key -> priority, key ->
        group), resolved to one row per group and (device, time) first (:mod:`.resolve`).

        Without ``ranks``, Parquet files are copied by Arrow on the executors
        (:mod:`.arrow_write`), where it writes the session's codec; the rest by Spark.
        """
        names = {column for p in batch for column in p.mapping.values()}
        target = schemas.target_schema(self.state.columns, self.state.keys, names)
        local = self.table.store.local
        # Arrow's copy bypasses the frame the TTL filters (:mod:`.expiry`): Spark writes.
        copy = ranks is None and self.expiry is None
        compression = arrow_write.codec(self.spark) if copy else None
        arrowed = [p for p in batch if p.kind == PARQUET_GROUP] if compression else []
        rest = [p for p in batch if p.kind != PARQUET_GROUP] if arrowed else batch
        if rest:  # first: Spark's write makes the staging folder, which must not exist
            frame = self._frame(rest, target)
            if self.expiry is not None:
                frame = self.expiry.keep(frame, _databases(rest))
            spark_write(self.spark, frame, target, staging, ranks, local)
        if arrowed and not local:  # the files are here, the table and executors are not
            assert compression is not None
            files = [(str(p.link), p.key or 0, p.deleted, p.file_id) for p in arrowed]
            arrow_write.copy_here(files, _stored(target), self._here(staging), compression)
        elif arrowed:
            assert compression is not None
            self._arrow_write(arrowed, target, staging, compression)

    def _arrow_write(
        self, items: list[Prepared], target: Any, staging: str, compression: str
    ) -> None:
        body = functools.partial(
            arrow_write.written_batches,
            schema=_stored(target),
            staging=staging,
            compression=compression,
        )
        files = self._files_df(items, deletions=True)
        written = files.mapInArrow(body, arrow_write.WRITTEN_DDL).collect()
        arrow_write.keep_returned(
            Path(staging), [p.key for p in items if p.key is not None], written
        )

    def _record(self, batch: list[Prepared], staging: str) -> None:
        """After a committed job: check each file's rows, move its partition into the
        table, make them durable, record them."""
        written = []
        moves: list[tuple[str, Partition]] = []
        store = self.table.store
        for item in batch:
            src, partition = item.source, item.partition
            copied = item.kind == PARQUET_GROUP and self._copies_here()
            output = store.join(
                self._here(staging) if copied else staging, f"{KEY_COLUMN}={item.key}"
            )
            made = self.table.is_folder(output)
            rows = self.table.staged_rows(output) if made else 0
            # Parquet: the footer's row count must be what was written. With deletions
            # the table holds fewer, and how many fewer only the file's time and device
            # columns tell: reading them here would read data on the driver, and a second
            # Spark scan would read each such file twice. So then the check is a bound,
            # which still catches rows written twice; without deletions it stays exact.
            # (TsFiles have no footer count: rows is None.) A TTL is deletions too.
            exact = not item.deleted and self.expiry is None
            if item.rows is not None and (rows > item.rows or (exact and rows != item.rows)):
                held = f"{item.rows} before its deletions" if item.deleted else item.rows
                self._skip(src, f"wrote {rows} rows, the file holds {held}")
                continue
            if made or self.expiry is not None:  # all expired: an empty file keeps the tag
                moves.append((output, partition))
                written.append(partition)
            self.state.files[item.file_id] = FileRecord(
                src.sender, src.name, src.size, src.mtime_ns, rows, str(src.data_dir or "")
            )
            self.report.ingested += 1
            self.report.rows_written += rows
        self.table.move_in_all(moves, self._tags)
        if self.sync:
            self.table.sync(written)

    def write(self, batch: list[Prepared], number: int, label: str) -> None:
        """Write a batch; isolate and report the files that make its job fail."""
        batch = self._link_batch(batch, number)
        if not batch:
            return
        retry = SplitRetry(
            batch,
            lambda item, reason: self._skip(item.source, reason),
            culprit,
            lambda: self._say(f"{label}: a Spark job failed; retrying its files in smaller jobs"),
            owner=_sender,
        )
        for group in retry:
            self._clear_partitions(group)
            staging = self.table.staging_folder()
            try:
                with stage_progress(self.spark, self.progress, label):
                    self._write(group, staging)
            except Exception as exc:
                self.table.remove_run_folder(staging)
                shutil.rmtree(self._here(staging), ignore_errors=True)
                retry.failed(group, exc)
                continue
            try:
                self._record(group, staging)
            finally:
                self.table.remove_run_folder(staging)
                shutil.rmtree(self._here(staging), ignore_errors=True)
        self.report.quarantined |= retry.blamed

    def _copies_here(self) -> bool:
        """Whether the loader copies the Parquet files into a remote table itself
        (:func:`.arrow_write.copy_here`): Arrow writes the session's codec, and no TTL
        filters the rows (:meth:`_write`)."""
        if self.table.store.local or self.expiry is not None:
            return False
        return arrow_write.codec(self.spark) is not None

    def _here(self, staging: str) -> str:
        """The local folder of a job's copies made here (a table on another store)."""
        return str(self.local_links / "out" / staging.rstrip("/").rpartition("/")[2])

    def _clear_partitions(self, group: list[Prepared]) -> None:
        """Take out of the run's view any files these files' partitions have (a job of
        this run that failed after some of its files had moved in): a partition is
        written whole by one job. The run's view knows them: no request to the store."""
        for item in group:
            self.table.delete(item.partition)

    # ------------------------------------------------------------------ resolve

    def rewrite_groups(self, groups: list[list[resolve.Member]], number: int) -> bool:
        """Read groups of overlapping files and write each file's partition anew with
        the rows it wins (:mod:`.resolve`), in one Spark job: two groups share no
        (device, time), their bounds being apart. False, and nothing changed, if a
        member cannot be read now (reported; the next run tries again)."""
        members = [m for g in groups for m in g]
        by_id = {m.source.file_id: m for m in members}
        group_of = {m.source.file_id: n for n, g in enumerate(groups) for m in g}
        ids = [sorted(m.source.file_id for m in g) for g in groups]
        items = self.prepare([m.source for m in members])
        for item in items:
            if not self.admit(item):
                return False
        if len(items) != len(members):
            return False
        linked = self._link_batch(items, number, spark=True)
        if len(linked) != len(members):
            return False
        order = sorted(linked, key=lambda p: resolve.priority(p.source.name))
        ranks = {p.key: rank for rank, p in enumerate(order) if p.key is not None}
        sets = {p.key: group_of[p.file_id] for p in linked if p.key is not None}
        keyed = [(p.key, by_id[p.file_id]) for p in linked if p.key is not None]
        staging = self.table.staging_folder()
        try:
            with stage_progress(self.spark, self.progress, f"resolving {len(members)} files"):
                self._write(linked, staging, (ranks, sets))
            by_file = {m.source.file_id: ids[group_of[m.source.file_id]] for m in members}
            resolve.replace_partitions(self.table, staging, keyed, by_file, self._tags)
        except Exception as exc:
            for item in linked:
                self._skip(
                    item.source, f"resolving its overlapping files failed: {describe(exc).reason}"
                )
            return False
        finally:
            self.table.remove_run_folder(staging)
        if self.sync:
            self.table.sync([m.partition for m in members])
        return True
