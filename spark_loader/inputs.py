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

from sealsync.formats.deletion import SeriesDeletion
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
    columns: dict[str, Any]  # name -> Spark DataType, as the file stores it
    rows: int | None  # the Parquet footer's row count; None for TsFiles
    schema_key: str  # Parquet files with equal keys are read by one scan
    partition: Partition  # where its rows go in the table
    kind: str = ""  # set when linked: PARQUET_GROUP or TSFILE
    key: int | None = None  # set when linked: the file's number in its batch
    link: Path | None = None
    folder: Path | None = None  # the link folder one scan reads
    # The deletions of its X.mods and X.mods2, in file order; empty if none.
    deleted: list[SeriesDeletion] = dataclasses.field(default_factory=list)

    def deletion_records(self) -> list[tuple[list[str], int, int, int | None, str]] | None:
        """The deletions as the readers take them (``tsfile_read.DELETIONS_DDL``)."""
        if not self.deleted:
            return None
        return deletion_records(self.deleted)


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
        if source.suffix != PARQUET:
            item.kind, item.folder = TSFILE, root / TSFILE
            item.link = item.folder / f"{fid}.tsfile"
        else:
            item.kind = PARQUET_GROUP
            item.folder = groups.setdefault(item.schema_key, root / f"{PARQUET_GROUP}{len(groups)}")
            item.link = item.folder / f"{KEY_COLUMN}={item.key}" / "data.parquet"
        try:
            link(source.path, item.link)
            st = os.stat(item.link)
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
