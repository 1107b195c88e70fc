"""The table on disk: a plain Parquet dataset, one partition per source file.

Layout::

    <table>/sender=<uuid>/file_id=<id>/part-*.parquet   data: time, device,
                                                        measurements..., source_file

``sender`` and ``file_id`` are Hive-style partition columns, so every reader gets
them as columns: ``spark.read.option("mergeSchema", "true").parquet(table)`` or
:func:`read_arrow` (pyarrow with the schemas of all files unified). Files written
by different runs can hold different measurement columns; a reader that does not
merge schemas sees only the columns of whichever file it samples.

Invariant the loader relies on: a ``file_id=`` folder appears in the table only by
one atomic rename (Spark's dynamic partition overwrite moves each finished
partition out of its staging folder) and leaves it only by one atomic rename into
a hidden trash folder. So any partition a run finds is complete, and a crash at
any moment leaves either all of a file's rows in the table or none.

Hidden folders (``.``-prefixed: Spark's ``.spark-staging-*``, our trash and link
folders) are ignored by Spark and pyarrow readers and are swept at every run.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sealsync import durable

SENDER_COLUMN = "sender"
SOURCE_COLUMN = "source_file"
FILE_ID_COLUMN = "file_id"
PARTITION_COLUMNS = (SENDER_COLUMN, FILE_ID_COLUMN)
PROVENANCE_COLUMNS = (SENDER_COLUMN, SOURCE_COLUMN, FILE_ID_COLUMN)  # link folder order

TRASH = ".sealsync-trash"
LINKS = ".sealsync-links"
_SWEPT_PREFIXES = (".spark-staging-", TRASH, LINKS)
_SWEPT_NAMES = ("_temporary",)


def unescape(value: str) -> str:
    """A partition folder value as Spark and pyarrow read it (``%XX`` -> character)."""
    out, i = [], 0
    while i < len(value):
        if value[i] == "%" and _is_hex(value[i + 1 : i + 3]):
            out.append(chr(int(value[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _is_hex(text: str) -> bool:
    return len(text) == 2 and all(c in "0123456789abcdefABCDEF" for c in text)


@dataclass(frozen=True)
class Partition:
    sender: str
    file_id: str
    path: Path


class Table:
    """The partitions of the table folder, and the two ways they change on our side."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def ensure(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def partition(self, sender: str, file_id: str) -> Partition:
        """Where Spark puts a file's partition (a UUID and a hex id need no escaping)."""
        folder = self.path / f"{SENDER_COLUMN}={sender}" / f"{FILE_ID_COLUMN}={file_id}"
        return Partition(sender, file_id, folder)

    def partitions(self) -> dict[str, Partition]:
        """Every ``sender=*/file_id=*`` folder, by file id."""
        found: dict[str, Partition] = {}
        if not self.path.is_dir():
            return found
        for outer in sorted(os.scandir(self.path), key=lambda e: e.name):
            if not outer.name.startswith(f"{SENDER_COLUMN}=") or not outer.is_dir():
                continue
            sender = unescape(outer.name.split("=", 1)[1])
            for inner in sorted(os.scandir(outer.path), key=lambda e: e.name):
                if inner.name.startswith(f"{FILE_ID_COLUMN}=") and inner.is_dir():
                    fid = unescape(inner.name.split("=", 1)[1])
                    found[fid] = Partition(sender, fid, Path(inner.path))
        return found

    def sweep(self) -> None:
        """Remove what an interrupted run left: staging, trash, links, empty senders.

        Only safe while no Spark job writes to the table: the caller holds the locks.
        """
        if not self.path.is_dir():
            return
        for entry in os.scandir(self.path):
            if entry.name.startswith(_SWEPT_PREFIXES) or entry.name in _SWEPT_NAMES:
                _rmtree(Path(entry.path))
            elif entry.name.startswith(f"{SENDER_COLUMN}=") and entry.is_dir():
                _rmdir_if_empty(Path(entry.path))

    def delete(self, partition: Partition) -> None:
        """Take one file's rows out of the table: all of them or, after a crash, none.

        The one place rows leave the table. A local (or shared POSIX) file system
        is assumed, as for the receiver's storage itself.
        """
        trash = self.path / TRASH
        trash.mkdir(exist_ok=True)
        target = trash / f"{partition.file_id}.{uuid.uuid4().hex}"
        durable.rename(partition.path, target)
        _rmtree(target)
        _rmdir_if_empty(trash)
        _rmdir_if_empty(partition.path.parent)

    def part_files(self, partition: Partition) -> list[Path]:
        return sorted(
            Path(e.path) for e in os.scandir(partition.path)
            if e.is_file() and not e.name.startswith((".", "_"))
        )

    def rows(self, partition: Partition) -> int:
        """Rows of one partition, from the Parquet footers (no data read)."""
        return sum(pq.read_metadata(p).num_rows for p in self.part_files(partition))

    def schema(self, partition: Partition) -> pa.Schema:
        return pa.unify_schemas([pq.read_schema(p) for p in self.part_files(partition)])

    def sync(self, partitions: Iterable[Partition]) -> None:
        """Make newly written partitions durable before the state records them.

        Spark does not fsync what it writes; a power cut after the state says
        "ingested" must not leave empty files behind.
        """
        parents: set[Path] = set()
        for partition in partitions:
            for path in self.part_files(partition):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            durable.fsync_dir(partition.path)
            parents.add(partition.path.parent)
        for parent in parents:
            durable.fsync_dir(parent)
        if parents:
            durable.fsync_dir(self.path)


def _rmtree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass  # not empty (or gone): nothing to do


def read_arrow(table_path: str | os.PathLike[str]) -> pa.Table:
    """The whole table with pyarrow, every file's columns unified (missing -> null).

    ``pyarrow.dataset.dataset(table, partitioning="hive")`` alone takes the schema
    of the first file it finds; passing the unified schema is what merges them.
    """
    dataset = ds.dataset(os.fspath(table_path), format="parquet", partitioning="hive")
    schemas = [pq.read_schema(f) for f in dataset.files]
    if not schemas:
        return dataset.to_table()
    partition_fields = [f for f in dataset.schema if f.name in PARTITION_COLUMNS]
    unified = pa.unify_schemas([*schemas, pa.schema(partition_fields)])
    return ds.dataset(
        os.fspath(table_path), format="parquet", partitioning="hive", schema=unified
    ).to_table()
