"""The table on disk: a plain Parquet dataset, one partition per source file.

Layout::

    <table>/sender=<uuid>/source_file=<name>/file_id=<id>/part-*.parquet
                                                  data: time, device, measurements...

``sender``, ``source_file`` and ``file_id`` are Hive-style partition columns: every
reader gets them as columns (``spark.read.option("mergeSchema", "true").parquet(table)``,
or :func:`read_arrow`), and no row stores them, which is what lets the loader write
as fast as a plain Spark copy. ``<name>`` is the file's relative name with every
ASCII character but letters, digits, ``.``, ``_`` and ``-`` written ``%XX``, which
Spark and pyarrow both decode; other characters are kept as they are (UTF-8). A name
whose folder would be longer than a folder name may be (255 bytes) cannot be a
partition and is reported, not loaded (:func:`folder_value`).

Files written by different runs can hold different measurement columns; a reader
that does not merge schemas sees only the columns of whichever file it samples.

Invariant the loader relies on: a ``file_id=`` folder appears in the table only by
one atomic rename (out of the run's hidden staging folder) and leaves it only by
one atomic rename into a hidden trash folder. So any partition a run finds is
complete, and a crash at any moment leaves either all of a file's rows in the
table or none.

Hidden folders (``.``-prefixed: Spark's ``.spark-staging-*``, our staging, trash and
link folders) are ignored by Spark and pyarrow readers and are swept at every run,
as are partitions in the layout of earlier versions (``sender=/file_id=``), which
are then loaded again in this one.
"""

from __future__ import annotations

import os
import shutil
import string
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sealsync import durable

SENDER_COLUMN = "sender"
SOURCE_COLUMN = "source_file"
FILE_ID_COLUMN = "file_id"
PARTITION_COLUMNS = (SENDER_COLUMN, SOURCE_COLUMN, FILE_ID_COLUMN)  # folder order

TRASH = ".sealsync-trash"
LINKS = ".sealsync-links"
STAGING = ".sealsync-staging"
#: The one column a load's Spark job partitions its staging output by: a file's
#: number in the batch. Short, so that Spark's per-row work on it is small; its
#: folders are renamed to the real partitions afterwards.
KEY_COLUMN = "__sealsync_key"
_SWEPT_PREFIXES = (".spark-staging-", TRASH, LINKS, STAGING)
_SWEPT_NAMES = ("_temporary",)
_KEPT = frozenset(string.ascii_letters + string.digits + "._-")
MAX_FOLDER_BYTES = 255


def folder_value(value: str) -> str | None:
    """``value`` as a partition folder value Spark and pyarrow read back as ``value``,
    or None if the folder name would be too long.

    Only ASCII is escaped (``%XX``): Spark decodes each ``%XX`` as one character, so
    escaping the bytes of a multi-byte character would read back as other characters.
    """
    text = "".join(c if c in _KEPT or not c.isascii() else f"%{ord(c):02X}" for c in value)
    if len(f"{SOURCE_COLUMN}={text}".encode()) > MAX_FOLDER_BYTES:
        return None
    return text


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
    source_file: str
    file_id: str
    path: Path


class Table:
    """The partitions of the table folder, and the two ways they change on our side."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def ensure(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def partition(self, sender: str, source_file: str, file_id: str) -> Partition:
        """Where a file's partition goes (a UUID and a hex id need no escaping).

        Raises ValueError for a name that cannot be a folder (:func:`folder_value`).
        """
        value = folder_value(source_file)
        if value is None:
            raise ValueError(
                f"its name is too long for a {SOURCE_COLUMN} partition folder "
                f"(at most {MAX_FOLDER_BYTES} bytes with escapes)"
            )
        folder = (
            self.path
            / f"{SENDER_COLUMN}={sender}"
            / f"{SOURCE_COLUMN}={value}"
            / f"{FILE_ID_COLUMN}={file_id}"
        )
        return Partition(sender, source_file, file_id, folder)

    def partitions(self) -> dict[str, Partition]:
        """Every ``sender=*/source_file=*/file_id=*`` folder, by file id."""
        found: dict[str, Partition] = {}
        for sender, source, inner in self._walk():
            if inner.name.startswith(f"{FILE_ID_COLUMN}=") and inner.is_dir():
                fid = unescape(inner.name.split("=", 1)[1])
                found[fid] = Partition(sender, source, fid, Path(inner.path))
        return found

    def _walk(self) -> Iterator[tuple[str, str, os.DirEntry[str]]]:
        """(sender, source file, entry) for each entry two levels below the senders."""
        for outer in _subfolders(self.path, SENDER_COLUMN):
            sender = unescape(outer.name.split("=", 1)[1])
            for middle in _subfolders(Path(outer.path), SOURCE_COLUMN):
                source = unescape(middle.name.split("=", 1)[1])
                for inner in sorted(os.scandir(middle.path), key=lambda e: e.name):
                    yield sender, source, inner

    def sweep(self) -> None:
        """Remove what an interrupted run left (staging, trash, links, empty folders)
        and partitions in an earlier version's layout (``sender=*/file_id=*``).

        Only safe while no Spark job writes to the table: the caller holds the locks.
        """
        if not self.path.is_dir():
            return
        for entry in os.scandir(self.path):
            if entry.name.startswith(_SWEPT_PREFIXES) or entry.name in _SWEPT_NAMES:
                _rmtree(Path(entry.path))
        for outer in _subfolders(self.path, SENDER_COLUMN):
            for old in _subfolders(Path(outer.path), FILE_ID_COLUMN):
                self._discard(Path(old.path))
            for middle in _subfolders(Path(outer.path), SOURCE_COLUMN):
                _rmdir_if_empty(Path(middle.path))
            _rmdir_if_empty(Path(outer.path))

    def delete(self, partition: Partition) -> None:
        """Take one file's rows out of the table: all of them or, after a crash, none.

        The one place rows leave the table. A local (or shared POSIX) file system
        is assumed, as for the receiver's storage itself.
        """
        self._discard(partition.path)
        _rmdir_if_empty(partition.path.parent)
        _rmdir_if_empty(partition.path.parent.parent)

    def _discard(self, folder: Path) -> None:
        trash = self.path / TRASH
        trash.mkdir(exist_ok=True)
        target = trash / f"{folder.name}.{uuid.uuid4().hex}"
        durable.rename(folder, target)
        _rmtree(target)
        _rmdir_if_empty(trash)

    def move_in(self, folder: Path, partition: Partition) -> None:
        """Put a finished partition written elsewhere in the table: one rename."""
        partition.path.parent.mkdir(parents=True, exist_ok=True)
        os.rename(folder, partition.path)

    def sync(self, partitions: Iterable[Partition]) -> None:
        """Make newly written partitions durable before the state records them.

        Spark does not fsync what it writes; a power cut after the state says
        "ingested" must not leave empty files behind. The fsyncs run in threads:
        the disk gets them together instead of one after another.
        """
        partitions = list(partitions)
        files = [p for partition in partitions for p in part_files(partition.path)]
        folders: set[Path] = set()
        for partition in partitions:
            folders |= {partition.path, partition.path.parent, partition.path.parent.parent}
        with ThreadPoolExecutor(_SYNC_THREADS) as pool:
            list(pool.map(durable.fsync_file, files))
            list(pool.map(durable.fsync_dir, sorted(folders, key=lambda f: -len(f.parts))))
        if partitions:
            durable.fsync_dir(self.path)


_SYNC_THREADS = 8


def part_files(folder: Path) -> list[Path]:
    """The data files of one partition folder (a table's or a staging one)."""
    return sorted(
        Path(e.path)
        for e in os.scandir(folder)
        if e.is_file() and not e.name.startswith((".", "_"))
    )


def footer_rows(folder: Path) -> int:
    """Rows of one partition folder, from the Parquet footers (no data read)."""
    return sum(pq.read_metadata(p).num_rows for p in part_files(folder))


def folder_schema(folder: Path) -> pa.Schema:
    return pa.unify_schemas([pq.read_schema(p) for p in part_files(folder)])


def remove_run_folder(folder: Path) -> None:
    """Remove one run's private folder (its links, a job's staging output), and the
    hidden folder holding it once no other run's is there."""
    _rmtree(folder)
    _rmdir_if_empty(folder.parent)


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
