"""The table on disk: a Delta Lake table, one partition per source file version.

Layout::

    <table>/_delta_log/<version>.json ...            Delta's log: which files are the table
    <table>/sender=<uuid>/source_file=<name>/file_id=<id>/part-*.parquet
                                                  data: time, device, measurements...

``sender``, ``source_file`` and ``file_id`` are the table's partition columns: every
reader gets them as columns (from the log), and no data file stores them, which is what
lets the loader write its files as fast as a plain Spark copy. A file version's rows
leave the table by the ``remove`` of its partition's files, the metadata-only delete
Delta itself commits for a ``DELETE`` on partition columns. ``<name>`` in a folder is
the file's relative name with every ASCII character but letters, digits, ``.``, ``_``
and ``-`` written ``%XX``; a name whose folder would be longer than a folder name may
be (255 bytes) cannot be a partition and is reported, not loaded (:func:`folder_value`).

**One commit per run.** :class:`Table` is a run's view of the table: the version it
read (:mod:`.delta_log`), then the files the run moves in (:meth:`Table.move_in`) and
takes out (:meth:`Table.delete`). Nothing of it is visible to a reader until
:meth:`Table.commit` hands it to Delta as one version (:mod:`.delta_commit`). A file
the run moved in is named, before the move, in ``<table>/.sealsync-uncommitted.json``
with the run's number; the next run removes those files if the table does not record
that number (the run died before its commit), and forgets the list if it does. Files a
commit removes stay on disk for time travel until ``VACUUM`` deletes them.

**A plain Parquet table** (what the loader wrote before it wrote Delta: the same
folders, no log) is converted by the first run that opens it: every part file of
every ``file_id=`` folder becomes an ``add`` of the run's commit, its group sidecar
(:mod:`.resolve`) the file's tags; no data file is rewritten or moved.

Hidden folders (``.``-prefixed: our staging and link folders) are ignored by every
reader and swept at every run.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sealsync import durable
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from spark_loader.delta_format import FORMAT
from spark_loader.delta_log import DataFile, Snapshot, encode_path
from spark_loader.delta_log import read_arrow as read_arrow
from spark_loader.table_format import Plan, TableFormat
from spark_loader.table_layout import (
    BOUNDS_TAG,
    FILE_ID_COLUMN,
    GROUP_TAG,
    LINKS,
    MAX_FOLDER_BYTES,
    OLD_SIDECAR,
    SENDER_COLUMN,
    SOURCE_COLUMN,
    STAGING,
    UNCOMMITTED,
    part_files,
    partition_folder,
    unescape,
)

_SWEPT_PREFIXES = (".spark-staging-", ".sealsync-trash", LINKS, STAGING)
_SWEPT_NAMES = ("_temporary",)


@dataclass(frozen=True)
class Partition:
    """One source file version's place in the table: its folder and its data files
    in the run's view (none yet for a partition about to be written)."""

    sender: str
    source_file: str
    file_id: str
    path: Path
    files: tuple[DataFile, ...] = field(default=(), compare=False)

    @property
    def rows(self) -> int:
        """Its rows, from the log's statistics (else the Parquet footers: no data read)."""
        return sum(
            f.rows if f.rows is not None else pq.read_metadata(f.path).num_rows for f in self.files
        )

    @property
    def tags(self) -> dict[str, str]:
        """The tags its files share (they are written together)."""
        return dict(self.files[0].tags) if self.files else {}


class Table:
    """A run's view of the Delta table: the version read, then the run's changes."""

    def __init__(self, path: Path, table_format: TableFormat = FORMAT) -> None:
        self.path = Path(path)
        self.format = table_format
        self.snapshot = Snapshot()
        self._view: dict[str, DataFile] = {}  # log path -> file, as the run leaves it
        self._added: dict[str, DataFile] = {}  # moved in by this run
        self._removed: dict[str, DataFile] = {}  # of the version read, taken out
        self._moved: list[str] = []  # relative paths named in UNCOMMITTED
        self._unsynced: list[Path] = []
        self._by_id: dict[str, dict[str, DataFile]] | None = None
        self._opened = False
        self._footers: dict[Path, Any] = {}  # a staged part file -> its footer
        self.converted = 0  # part files of a plain Parquet table this run adopts
        self.run_version = 0

    def ensure(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ open

    def open(self) -> list[str]:
        """Read the latest version, undo what an uncommitted run left, and take in a
        plain Parquet table's files (converted by this run's commit). What was done."""
        done = []
        self.snapshot = self.format.read(self.path)
        manifest = self.path / UNCOMMITTED
        if manifest.exists():
            done += self._recover(manifest)
        self._view = dict(self.snapshot.files)
        self._by_id = None
        self._opened = True
        self._added, self._removed, self._moved, self._unsynced = {}, {}, [], []
        self.run_version = self.snapshot.transactions.get(self.format.app_id, -1) + 1
        self.converted = 0
        if self.snapshot.version < 0:
            count = self._convert()
            if count:
                done.append(
                    f"converting the plain Parquet table {self.path} to Delta: "
                    f"{count} data files become the first version's"
                )
        return done

    def _recover(self, manifest: Path) -> list[str]:
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
            version, files = int(doc["version"]), [str(f) for f in doc["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            version, files = -1, []
        committed = self.snapshot.transactions.get(self.format.app_id, -1) >= version >= 0
        note = []
        if not committed:
            live = {f.path for f in self.snapshot.files.values()}
            gone = 0
            for rel in files:
                path = self.path / rel
                if path not in live and path.exists():
                    path.unlink()
                    gone += 1
                    _rmdirs_up(path.parent, self.path)
            if gone:
                note.append(f"removed {gone} data files a run killed before its commit wrote")
        manifest.unlink(missing_ok=True)
        return note

    def _convert(self) -> int:
        """Every part file of the plain Parquet layout, as files this run adds."""
        count = 0
        for sender, source, inner in self._walk():
            if not inner.name.startswith(f"{FILE_ID_COLUMN}=") or not inner.is_dir():
                continue
            fid = unescape(inner.name.split("=", 1)[1])
            folder = Path(inner.path)
            tags = _old_sidecar_tags(folder / OLD_SIDECAR)
            files = part_files(folder)
            made = not files and bool(tags)
            if made:  # a member that won no row keeps its place
                files = [self._empty_file(folder)]
            for path in files:
                self._add(
                    path,
                    {SENDER_COLUMN: sender, SOURCE_COLUMN: source, FILE_ID_COLUMN: fid},
                    tags,
                    new=made,
                )
                count += 1
        self.converted = count
        return count

    def _walk(self) -> Iterator[tuple[str, str, os.DirEntry[str]]]:
        """(sender, source file, entry) for each entry two levels below the senders."""
        for outer in _subfolders(self.path, SENDER_COLUMN):
            sender = unescape(outer.name.split("=", 1)[1])
            for middle in _subfolders(Path(outer.path), SOURCE_COLUMN):
                source = unescape(middle.name.split("=", 1)[1])
                for inner in sorted(os.scandir(middle.path), key=lambda e: e.name):
                    yield sender, source, inner

    # ------------------------------------------------------------------ the view

    def partition(self, sender: str, source_file: str, file_id: str) -> Partition:
        """Where a file's partition goes (a UUID and a hex id need no escaping).

        Raises ValueError for a name that cannot be a folder (:func:`folder_value`).
        """
        folder = partition_folder(sender, source_file, file_id)
        if folder is None:
            raise ValueError(
                f"its name is too long for a {SOURCE_COLUMN} partition folder "
                f"(at most {MAX_FOLDER_BYTES} bytes with escapes)"
            )
        files = tuple(self._index().get(file_id, {}).values())
        return Partition(sender, source_file, file_id, self.path / folder, files)

    def _index(self) -> dict[str, dict[str, DataFile]]:
        """The view's files by file id (built again after a change)."""
        if not self._opened:  # a read-only look: the latest version as it is
            self.snapshot = self.format.read(self.path)
            self._view = dict(self.snapshot.files)
            self._opened = True
        if self._by_id is None:
            self._by_id = {}
            for key, f in self._view.items():
                self._by_id.setdefault(f.partition.get(FILE_ID_COLUMN, ""), {})[key] = f
        return self._by_id

    def partitions(self) -> dict[str, Partition]:
        """Every file version with data files in the run's view, by file id."""
        out = {}
        for fid, found in self._index().items():
            files = list(found.values())
            if not files:
                continue
            first = files[0].partition
            sender, source = first.get(SENDER_COLUMN, ""), first.get(SOURCE_COLUMN, "")
            folder = partition_folder(sender, source, fid) or (
                f"{SENDER_COLUMN}={sender}/{SOURCE_COLUMN}={source}/{FILE_ID_COLUMN}={fid}"
            )
            out[fid] = Partition(sender, source, fid, self.path / folder, tuple(files))
        return out

    @property
    def changed(self) -> bool:
        return bool(self._added or self._removed)

    def delete(self, partition: Partition) -> None:
        """Take one file version's rows out of the table (at the run's commit). The one
        place rows leave the table."""
        for key, f in list(self._index().get(partition.file_id, {}).items()):
            del self._view[key]
            if key in self._added:
                del self._added[key]
                if key in self._moved_keys():
                    f.path.unlink(missing_ok=True)  # ours, never committed
                    self._unsynced = [p for p in self._unsynced if p != f.path]
            else:
                self._removed[key] = f
        self._by_id = None

    def _moved_keys(self) -> set[str]:
        return {encode_path(rel) for rel in self._moved}

    def move_in(
        self, folder: Path, partition: Partition, tags: dict[str, str] | None = None
    ) -> None:
        """Put the part files of a finished folder written elsewhere (a staging folder)
        in the partition's folder, as files of this run (committed with it). A folder
        without any gets an empty file, so that the partition keeps its place."""
        self.move_in_all([(folder, partition)], tags)

    def move_in_all(
        self, moves: Iterable[tuple[Path, Partition]], tags: dict[str, str] | None = None
    ) -> None:
        """:meth:`move_in` for many partitions, their files named uncommitted in one
        write of the list instead of one per partition."""
        planned = []
        for folder, partition in moves:
            files = part_files(folder) if folder.is_dir() else []
            targets = [_free(partition.path / p.name) for p in files]
            if not files:
                targets = [partition.path / f"part-empty-{uuid.uuid4().hex}.parquet"]
            partition.path.mkdir(parents=True, exist_ok=True)
            planned.append((files, targets, partition))
        self._name_uncommitted([t for _, targets, _ in planned for t in targets])
        for files, targets, partition in planned:
            if not files:
                _write_empty(targets[0])
            for src, dst in zip(files, targets, strict=False):
                os.rename(src, dst)
            values = {
                SENDER_COLUMN: partition.sender,
                SOURCE_COLUMN: partition.source_file,
                FILE_ID_COLUMN: partition.file_id,
            }
            metas = [self._footers.pop(src, None) for src in files] or [None]
            for dst, meta in zip(targets, metas, strict=True):
                self._add(dst, values, tags or {}, new=True, meta=meta)

    def _empty_file(self, folder: Path) -> Path:
        path = folder / f"part-empty-{uuid.uuid4().hex}.parquet"
        self._name_uncommitted([path])
        _write_empty(path)
        return path

    def _name_uncommitted(self, paths: list[Path]) -> None:
        """Record files about to be moved in before they are (see the module text).

        Not fsynced: a killed process leaves the list in the page cache, which the next
        run reads; after a power cut a file it lost stays on disk unnamed, never read by
        anyone (no version names it) and deleted by ``VACUUM`` as any file the log does
        not know.
        """
        self._moved += [p.relative_to(self.path).as_posix() for p in paths]
        body = {"version": self.run_version, "files": self._moved}
        durable.atomic_write(self.path / UNCOMMITTED, json.dumps(body), sync=False)

    def staged_rows(self, folder: Path) -> int:
        """Rows of a staging folder, from its Parquet footers (no data read); the footers
        are kept for :meth:`move_in`, which needs them for the files' statistics."""
        total = 0
        for path in part_files(folder):
            meta = pq.read_metadata(path)
            self._footers[path] = meta
            total += meta.num_rows
        return total

    def _add(
        self,
        path: Path,
        values: dict[str, str],
        tags: dict[str, str],
        new: bool,
        meta: Any = None,
    ) -> None:
        st = path.stat()
        meta = meta or pq.read_metadata(path)
        rel = path.relative_to(self.path).as_posix()
        f = DataFile(
            log_path=encode_path(rel),
            path=path,
            partition=dict(values),
            size=st.st_size,
            modification_time=st.st_mtime_ns // 1_000_000,
            rows=meta.num_rows,
            tags=dict(tags),
            stats=self.format.file_stats(meta),
        )
        self._view[f.log_path] = f
        self._added[f.log_path] = f
        self._by_id = None
        if new:
            self._unsynced.append(path)

    def sync(self, partitions: Iterable[Partition] = ()) -> None:
        """Make the files this run wrote durable before its commit names them.

        Spark does not fsync what it writes; a power cut after the commit must not
        leave empty files behind. The fsyncs run in threads: the disk gets them
        together instead of one after another.
        """
        del partitions  # every file written so far is synced
        files, self._unsynced = self._unsynced, []
        if not files:
            return
        folders = {p.parent for p in files} | {p.parent.parent for p in files}
        folders |= {p.parent.parent.parent for p in files}
        with ThreadPoolExecutor(_SYNC_THREADS) as pool:
            list(pool.map(durable.fsync_file, files))
            list(pool.map(durable.fsync_dir, sorted(folders, key=lambda f: -len(f.parts))))
        durable.fsync_dir(self.path)

    # ------------------------------------------------------------------ commit

    def schema_fields(self) -> list[dict[str, Any]]:
        """The table's columns (empty for a new table)."""
        return self.format.schema_fields(self.snapshot)

    def schema_change(self, columns: dict[str, str]) -> bool:
        """Whether the commit must add columns to the table's schema (or create it)."""
        metadata = self.format.metadata(self.snapshot, columns)
        return metadata is not None and (self.changed or bool(self.schema_fields()))

    def plan(self, columns: dict[str, str], sync: bool = True) -> Plan | None:
        """The run's changes as one commit of the table's format (None: nothing to
        commit). With ``sync``, the files the run wrote are made durable first."""
        plan = self.format.plan(
            self.snapshot, self._added.values(), self._removed.values(), columns
        )
        if plan is not None and sync:
            self.sync()
        return plan

    def commit(self, spark: Any, plan: Plan) -> int:
        """Commit ``plan`` as one version; then the run's files are the table's."""
        version = self.format.commit(
            spark, self.path, plan, self.snapshot.version, self.run_version
        )
        self.committed()
        return version

    def committed(self) -> None:
        """The run's commit is in: its files are the table's; read the new version."""
        (self.path / UNCOMMITTED).unlink(missing_ok=True)
        self.open()

    # ------------------------------------------------------------------ sweep

    def sweep(self) -> None:
        """Remove what an interrupted run left (staging, links, empty folders) and, in a
        plain Parquet table, partitions of an earlier layout (``sender=*/file_id=*``).

        Only safe while no Spark job writes to the table: the caller holds the locks.
        """
        if not self.path.is_dir():
            return
        for entry in os.scandir(self.path):
            if entry.name.startswith(_SWEPT_PREFIXES) or entry.name in _SWEPT_NAMES:
                _rmtree(Path(entry.path))
        if self.format.is_table(self.path):
            return
        for outer in _subfolders(self.path, SENDER_COLUMN):
            for old in _subfolders(Path(outer.path), FILE_ID_COLUMN):
                _rmtree(Path(old.path))


def _free(path: Path) -> Path:
    """``path``, or a name of its own beside it if a file is there (never replace one)."""
    return path if not path.exists() else path.with_name(f"{uuid.uuid4().hex[:8]}-{path.name}")


def _old_sidecar_tags(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {GROUP_TAG: json.dumps(data.get("group")), BOUNDS_TAG: json.dumps(data.get("bounds"))}


def _write_empty(path: Path) -> None:
    schema = pa.schema([(TIME_COLUMN, pa.int64()), (DEVICE_COLUMN, pa.string())])
    pq.write_table(schema.empty_table(), path)


_SYNC_THREADS = 8


def footer_rows(folder: Path) -> int:
    """Rows of one staging folder, from the Parquet footers (no data read)."""
    return sum(pq.read_metadata(p).num_rows for p in part_files(folder))


def files_schema(paths: Iterable[Path]) -> pa.Schema:
    return pa.unify_schemas([pq.read_schema(p) for p in paths])


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


def _rmdirs_up(folder: Path, stop: Path) -> None:
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
