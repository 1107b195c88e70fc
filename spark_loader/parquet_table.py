"""The plain Parquet table earlier releases wrote (the same partition folders, no Delta
log): what the first run of this release converts to Delta (:mod:`.table`) without
rewriting a data file, and the partitions of an even earlier layout it removes.

Local tables only: a table on HDFS or S3 was always a Delta table.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from spark_loader.store import LocalStore
from spark_loader.table_layout import (
    BOUNDS_TAG,
    FILE_ID_COLUMN,
    GROUP_TAG,
    OLD_SIDECAR,
    SENDER_COLUMN,
    SOURCE_COLUMN,
    part_files,
    unescape,
)


def partitions(root: Path) -> Iterator[tuple[dict[str, str], dict[str, str], list[str], Path]]:
    """Each ``file_id=`` folder of the plain layout under ``root``: its partition
    values, the tags its group sidecar gives (:mod:`.resolve`), its part files, and
    the folder."""
    for outer in _subfolders(root, SENDER_COLUMN):
        sender = unescape(outer.name.split("=", 1)[1])
        for middle in _subfolders(Path(outer.path), SOURCE_COLUMN):
            source = unescape(middle.name.split("=", 1)[1])
            for inner in _subfolders(Path(middle.path), FILE_ID_COLUMN):
                fid = unescape(inner.name.split("=", 1)[1])
                folder = Path(inner.path)
                values = {SENDER_COLUMN: sender, SOURCE_COLUMN: source, FILE_ID_COLUMN: fid}
                files = [str(p) for p in part_files(folder)]
                yield values, _old_sidecar_tags(folder / OLD_SIDECAR), files, folder


def remove_old_layout(root: Path) -> None:
    """Remove the partitions of the layout before ``source_file`` was a partition
    column (``sender=*/file_id=*``): the next run loads their files again."""
    for outer in _subfolders(root, SENDER_COLUMN):
        for old in _subfolders(Path(outer.path), FILE_ID_COLUMN):
            LocalStore().delete(old.path, recursive=True)


def empty_parquet() -> bytes:
    """A Parquet file of no rows (a partition that keeps its place)."""
    schema = pa.schema([(TIME_COLUMN, pa.int64()), (DEVICE_COLUMN, pa.string())])
    out = io.BytesIO()
    pq.write_table(schema.empty_table(), out)
    return out.getvalue()


def _old_sidecar_tags(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {GROUP_TAG: json.dumps(data.get("group")), BOUNDS_TAG: json.dumps(data.get("bounds"))}


def _subfolders(path: Path, column: str) -> list[os.DirEntry[str]]:
    """The ``column=*`` folders directly in ``path``, by name."""
    if not path.is_dir():
        return []
    return sorted(
        (
            e
            for e in os.scandir(path)
            if e.name.startswith(f"{column}=") and e.is_dir(follow_symlinks=False)
        ),
        key=lambda e: e.name,
    )
