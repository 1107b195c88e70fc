"""A batch's input files, ready for its Spark job: each source file with its columns
and deletions, linked into the folders one scan reads whole.

A hard link is a snapshot: the receiver may delete the file meanwhile. The link's size
and mtime must still be the discovered ones (else the file changed after discovery and
its id no longer describes it). Where a hard link cannot be made (another file
system), a symbolic link stands in.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from sealsync.formats.deletion import Deletion
from spark_loader import schema as schemas
from spark_loader.discovery import PARQUET, SourceFile
from spark_loader.failure import Failure
from spark_loader.table import Partition
from spark_loader.table_layout import KEY_COLUMN
from spark_loader.tsfile_read import deletion_records

PARQUET_GROUP, TSFILE = "p", "t"
"""The two kinds of link folder: Parquet files of one schema, read by one scan; TsFiles."""
_LINK_KEY_RE = re.compile(rf"/b\d+/{PARQUET_GROUP}\d+/{KEY_COLUMN}=(\d+)/data\.parquet")


@dataclass
class Prepared:
    """A source file ready for a Spark job: its columns known, later linked."""

    source: SourceFile
    file_id: str
    series: list[tuple[str, Any]]  # (measurement, Spark DataType) of each series it holds
    rows: int | None  # the Parquet footer's row count; None for TsFiles
    schema_key: str  # Parquet files with equal keys are read by one scan
    partition: Partition  # where its rows go in the table
    # set when admitted: (measurement, kind) -> the table column of those values
    mapping: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    kind: str = ""  # set when linked: PARQUET_GROUP or TSFILE
    key: int | None = None  # set when linked: the file's number in its batch
    link: str | None = None  # where the job reads it: a local path, or a URI
    folder: str | None = None  # the link folder one scan reads
    on_store: bool = False  # set when copied to the table's store (link and folder are URIs)
    # The deletions of its X.mods and X.mods2, in file order; empty if none.
    deleted: list[Deletion] = dataclasses.field(default_factory=list)

    def deletion_records(self) -> list[tuple[list[str | None], int, int, int | None, str]] | None:
        """The deletions as the readers take them (``tsfile_read.DELETIONS_DDL``)."""
        if not self.deleted:
            return None
        return deletion_records(self.deleted)


def _spark_columns(arrow: pa.Schema) -> dict[str, Any]:
    from pyspark.sql.pandas.types import from_arrow_type

    if len(set(arrow.names)) != len(arrow.names):
        raise ValueError("duplicate column names")
    out = {}
    for f in arrow:
        t = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        try:
            out[f.name] = from_arrow_type(t)
        except Exception:
            raise ValueError(f"column {f.name!r} has a type Spark cannot read: {t}") from None
    return out


def parquet_input(source: SourceFile, partition: Partition, deleted: list[Deletion]) -> Prepared:
    """A Parquet file ready for its job: its footer read (no data), its columns as
    Spark types; ValueError (or pyarrow's) if it is not a whole Parquet file."""
    import pyarrow.parquet as pq

    from sealsync import formats

    if not formats.is_complete(source.path):
        raise ValueError("not a complete Parquet file")
    meta = pq.read_metadata(source.path)
    arrow = meta.schema.to_arrow_schema()
    columns = _spark_columns(arrow)
    problem = schemas.file_problem(columns)
    if problem is not None:
        raise ValueError(problem)
    key = arrow.remove_metadata().to_string()
    series = schemas.measurements(columns)
    return Prepared(source, source.file_id, series, meta.num_rows, key, partition, deleted=deleted)


def link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst, follow_symlinks=True)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        os.symlink(os.path.abspath(src), dst)


def link_batch(
    batch: list[Prepared], root: Path
) -> tuple[list[Prepared], list[tuple[Prepared, str]], int]:
    """Link ``batch``'s files under ``root``: the linked ones, the ones that could not
    be linked with why, and how many changed since discovery (left for the next run)."""
    groups: dict[str, Path] = {}
    linked: list[Prepared] = []
    failed: list[tuple[Prepared, str]] = []
    changed = 0
    for number_in_batch, item in enumerate(batch):
        source, fid = item.source, item.file_id
        item.key = number_in_batch
        if item.on_store:
            linked.append(item)  # staged before its metadata was read (:func:`stage_tsfiles`)
            continue
        if source.suffix != PARQUET:
            folder = root / TSFILE
            local = folder / f"{fid}.tsfile"
            item.kind = TSFILE
        else:
            folder = groups.setdefault(item.schema_key, root / f"{PARQUET_GROUP}{len(groups)}")
            local = folder / f"{KEY_COLUMN}={item.key}" / "data.parquet"
            item.kind = PARQUET_GROUP
        item.folder, item.link = str(folder), str(local)
        try:
            link(source.path, local)
            st = os.stat(local)
        except OSError as exc:
            failed.append((item, f"cannot link it for reading: {exc.strerror or exc}"))
            continue
        if (st.st_size, st.st_mtime_ns) != (source.size, source.mtime_ns):
            changed += 1
            continue
        linked.append(item)
    return linked, failed, changed


def culprit(failure: Failure, group: list[Prepared]) -> Prepared | None:
    """The file of ``group`` a failed job names: by the TsFile reader's file id, or by
    the link Spark's Parquet reader failed on (its key is in the link's path)."""
    if failure.file_id is not None:
        for item in group:
            if item.file_id == failure.file_id:
                return item
    by_key = {str(p.key): p for p in group if p.kind == PARQUET_GROUP}
    for key in _LINK_KEY_RE.findall(failure.path or failure.text):
        if key in by_key:
            return by_key[key]
    return None


def stage_inputs(
    batch: list[Prepared],
    root: Path,
    local_root: Path,
    remote_root: str,
    store: Any,
    parquet: bool = True,
) -> tuple[list[Prepared], list[tuple[Prepared, str]], int]:
    """:func:`link_batch` under ``root`` (below ``local_root``); for a table on another
    file system, each linked file then copied to ``remote_root`` (:func:`upload_batch`),
    the Parquet files only with ``parquet`` (else the loader copies them into the table
    itself, :func:`.arrow_write.copy_here`)."""
    linked, failed, changed = link_batch(batch, root)
    if not store.local:
        lost = upload_batch(linked, local_root, remote_root, store, parquet)
        gone = {id(item) for item, _ in lost}
        linked = [item for item in linked if id(item) not in gone]
        failed += lost
    return linked, failed, changed


def stage_tsfiles(
    items: list[Prepared],
    root: Path,
    local_root: Path,
    remote_root: str,
    store: Any,
    java_reader: bool,
) -> tuple[list[Prepared], list[tuple[Prepared, str]], int]:
    """TsFiles of a table on another file system, linked and copied to the store before
    their metadata is read: the executors read the metadata there too, and every later
    job reads the same copy (each file crosses to the store once). Only the Java reader
    reads a file on a store (the Python one opens local paths)."""
    if not java_reader:
        why = (
            f"a table on {remote_root.split(':', 1)[0]}:// needs the Java TsFile reader "
            "(in the session sealsync load starts)"
        )
        return [], [(item, why) for item in items], 0
    staged, failed, changed = stage_inputs(items, root, local_root, remote_root, store)
    for item in items:
        item.key = None  # numbered again in its batch (:func:`link_batch`)
    return staged, failed, changed


def upload_batch(
    linked: list[Prepared], local_root: Path, remote_root: str, store: Any, parquet: bool = True
) -> list[tuple[Prepared, str]]:
    """Copy the linked files of a batch to the table's store (the Parquet files only
    with ``parquet``), each at the place its link has below ``local_root`` (executors
    that share no folder with this machine read them there), several at once; the
    items then name their remote copy. A Parquet file with deletions is copied with its
    deletions applied (the executors' Parquet path is Spark's, which cannot apply
    them). The ones that could not be copied, with why."""
    failed = []
    pairs: list[tuple[Path, str]] = []
    sent: list[Prepared] = []
    for item in linked:
        assert item.link is not None and item.folder is not None
        if item.on_store or (item.kind == PARQUET_GROUP and not parquet):
            continue
        local = Path(item.link)
        try:
            if item.kind == PARQUET_GROUP and item.deleted:
                local, item.rows = _without_deletions(item, local)
                item.deleted = []
        except OSError as exc:
            failed.append((item, f"cannot copy it to the table's store: {exc.strerror or exc}"))
            continue
        pairs.append((local, store.join(remote_root, _below(local_root, item.link))))
        sent.append(item)
    for item, (_, remote), error in zip(sent, pairs, store.upload_many(pairs), strict=True):
        if error is not None:
            failed.append((item, f"cannot copy it to the table's store: {error}"))
            continue
        assert item.folder is not None
        item.link, item.on_store = remote, True
        item.folder = store.join(remote_root, _below(local_root, item.folder))
    return failed


def _below(root: Path, path: str) -> str:
    return Path(path).relative_to(root).as_posix()


def _without_deletions(item: Prepared, local: Path) -> tuple[Path, int]:
    """A copy of a Parquet file beside its link with its deletions applied, and its rows."""
    import pyarrow.parquet as pq

    from sealsync.formats import deletion

    table = pq.read_table(local)
    kept = deletion.apply(table, item.deleted, os.path.getsize(local))
    out = local.with_name("applied.parquet")
    pq.write_table(kept, out)
    return out, kept.num_rows
