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

**Where the table is** (:mod:`.store`): a local folder, or HDFS, S3 or any other Hadoop
file system (``table_path`` a URI). Every file operation goes through the table's
store, as paths (local) or URIs (remote): nothing here relies on a rename being
atomic or on fsync where the store has neither, only on the Delta commit.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealsync.config.location import TableLocation, parse_location
from sealsync.crashpoints import crash_point
from spark_loader import parquet_table
from spark_loader.delta_format import FORMAT
from spark_loader.delta_log import DataFile, Snapshot, encode_path
from spark_loader.delta_log import read_arrow as read_arrow
from spark_loader.store import Entry, LocalStore, Store, StoreError
from spark_loader.table_format import Keys, Plan, TableFormat
from spark_loader.table_layout import (
    FILE_ID_COLUMN,
    MAX_FOLDER_BYTES,
    SENDER_COLUMN,
    SOURCE_COLUMN,
    WriterNames,
    partition_folder,
)

#: What earlier releases' runs left at the table's root: swept by any loader.
_SWEPT_PREFIXES = (".spark-staging-", ".sealsync-trash")
_SWEPT_NAMES = ("_temporary",)


@dataclass(frozen=True)
class Partition:
    """One source file version's place in the table: its folder and its data files
    in the run's view (none yet for a partition about to be written)."""

    sender: str
    source_file: str
    file_id: str
    path: str  # its folder: a local path or a URI
    files: tuple[DataFile, ...] = field(default=(), compare=False)
    store: Store = field(default_factory=LocalStore, compare=False, repr=False)

    @property
    def rows(self) -> int:
        """Its rows, from the log's statistics (else the Parquet footers: no data read)."""
        return sum(
            f.rows if f.rows is not None else self.store.footer(f.path).num_rows for f in self.files
        )

    @property
    def tags(self) -> dict[str, str]:
        """The tags its files share (they are written together)."""
        return dict(self.files[0].tags) if self.files else {}


class Table:
    """A run's view of the Delta table: the version read, then the run's changes."""

    def __init__(
        self,
        location: TableLocation | str | os.PathLike[str],
        store: Store | None = None,
        table_format: TableFormat = FORMAT,
        *,
        writer: str | None = None,
    ) -> None:
        """``writer``: the loader's id (:mod:`.table_binding`), which names its working
        folders, its list of uncommitted files and its Delta application id, so that
        loaders sharing the table never touch each other's work (:class:`WriterNames`)."""
        if not isinstance(location, TableLocation):
            location = parse_location(os.fspath(location), Path.cwd())
        self.location = location
        self.root = str(location)  # the local path, or the URI
        self._store = store if store is not None or not location.local else LocalStore()
        self.format = table_format
        self.names = WriterNames.of(writer)
        self.app_id = table_format.app_id + self.names.suffix
        self.snapshot = Snapshot()
        self._view: dict[str, DataFile] = {}  # log path -> file, as the run leaves it
        self._added: dict[str, DataFile] = {}  # moved in by this run
        self._removed: dict[str, DataFile] = {}  # of the version read, taken out
        self._moved: list[str] = []  # relative paths named in UNCOMMITTED
        self._unsynced: list[str] = []
        self._by_id: dict[str, dict[str, DataFile]] | None = None
        self._opened = False
        self._footers: dict[str, Any] = {}  # a staged part file -> its footer
        self.converted = 0  # part files of a plain Parquet table this run adopts
        self.run_version = 0

    @property
    def store(self) -> Store:
        """The file system the table is on (a remote table's needs the Spark session:
        :meth:`attach`)."""
        if self._store is None:
            raise RuntimeError(f"{self.location.uri}: its store is not attached yet")
        return self._store

    def attach(self, store: Store) -> None:
        self._store = store

    @property
    def path(self) -> Path:
        """The local folder (a remote table has none: :attr:`root` is its URI)."""
        return Path(os.fspath(self.location))

    def at(self, *parts: str) -> str:
        """A path (or URI) below the table."""
        return self.store.join(self.root, *parts)

    def ensure(self) -> None:
        self.store.mkdirs(self.root)

    # ------------------------------------------------------------------ open

    def open(self) -> list[str]:
        """Read the latest version, undo what an uncommitted run left, and take in a
        plain Parquet table's files (converted by this run's commit). What was done."""
        done = []
        self.snapshot = self.format.read(self.root, self.store)
        manifest = self.at(self.names.uncommitted)
        if self.store.exists(manifest):
            done += self._recover(manifest)
        self._view = dict(self.snapshot.files)
        self._by_id = None
        self._opened = True
        self._added, self._removed, self._moved, self._unsynced = {}, {}, [], []
        self.run_version = self.snapshot.transactions.get(self.app_id, -1) + 1
        self.converted = 0
        if self.snapshot.version < 0 and self.store.local:  # remote tables were always Delta
            count = self._convert()
            if count:
                done.append(
                    f"converting the plain Parquet table {self.root} to Delta: "
                    f"{count} data files become the first version's"
                )
        return done

    def _recover(self, manifest: str) -> list[str]:
        try:
            doc = json.loads(self.store.read_bytes(manifest).decode("utf-8"))
            version, files = int(doc["version"]), [str(f) for f in doc["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            version, files = -1, []
        committed = self.snapshot.transactions.get(self.app_id, -1) >= version >= 0
        note = []
        if not committed:
            live = {f.path for f in self.snapshot.files.values()}
            gone = 0
            for rel in files:
                path = self.at(rel)
                if path not in live and self.store.delete(path):
                    gone += 1
                    if self.store.local:
                        _rmdirs_up(Path(path).parent, self.path)
            if gone:
                note.append(f"removed {gone} data files a run killed before its commit wrote")
        self.store.delete(manifest)
        return note

    def _convert(self) -> int:
        """Every part file of the plain Parquet layout, as files this run adds."""
        count = 0
        for values, tags, files, folder in parquet_table.partitions(self.path):
            made = not files and bool(tags)
            if made:  # a member that won no row keeps its place
                files = [self._empty_file(folder)]
            for path in files:
                self._add(path, values, tags, new=made)
                count += 1
        self.converted = count
        return count

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
        return Partition(sender, source_file, file_id, self.at(folder), files, self.store)

    def _index(self) -> dict[str, dict[str, DataFile]]:
        """The view's files by file id (built again after a change)."""
        if not self._opened:  # a read-only look: the latest version as it is
            self.snapshot = self.format.read(self.root, self.store)
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
            out[fid] = Partition(sender, source, fid, self.at(folder), tuple(files), self.store)
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
                    self.store.delete(f.path)  # ours, never committed
                    self._unsynced = [p for p in self._unsynced if p != f.path]
            else:
                self._removed[key] = f
        self._by_id = None

    def _moved_keys(self) -> set[str]:
        return {encode_path(rel) for rel in self._moved}

    def move_in(
        self, folder: str, partition: Partition, tags: dict[str, str] | None = None
    ) -> None:
        """Put the part files of a finished folder written elsewhere (a staging folder)
        in the partition's folder, as files of this run (committed with it). A folder
        without any gets an empty file, so that the partition keeps its place."""
        self.move_in_all([(folder, partition)], tags)

    def move_in_all(
        self, moves: Iterable[tuple[str, Partition]], tags: dict[str, str] | None = None
    ) -> None:
        """:meth:`move_in` for many partitions, their files named uncommitted in one
        write of the list instead of one per partition."""
        planned = []
        for folder, partition in moves:
            files = self.part_files(folder)
            free = self._free if not self._here(folder) else str  # written here: new names
            targets = [free(self.store.join(partition.path, _name(p))) for p in files]
            if not files:
                targets = [
                    self.store.join(partition.path, f"part-empty-{uuid.uuid4().hex}.parquet")
                ]
            if not self._here(folder):  # an upload's create makes its folders
                self.store.mkdirs(partition.path)
            planned.append((files, targets, partition, self._here(folder)))
        self._name_uncommitted([t for _, targets, _, _ in planned for t in targets])
        uploads = [
            (Path(src), dst)
            for files, targets, _, here in planned
            if here
            for src, dst in zip(files, targets, strict=False)
        ]
        sizes = {dst: os.path.getsize(src) for src, dst in uploads}
        for failed in filter(None, self.store.upload_many(uploads)):
            raise StoreError(f"cannot copy a data file to {self.root}: {failed}")
        for files, targets, partition, here in planned:
            if not files:
                self.store.write_bytes(targets[0], parquet_table.empty_parquet())
            for src, dst in zip(files, targets, strict=False):
                if not here:
                    self.store.rename(src, dst)
            crash_point("loader.batch.moved")
            values = {
                SENDER_COLUMN: partition.sender,
                SOURCE_COLUMN: partition.source_file,
                FILE_ID_COLUMN: partition.file_id,
            }
            metas = [self._footers.pop(src, None) for src in files] or [None]
            for dst, meta in zip(targets, metas, strict=True):
                self._add(dst, values, tags or {}, new=True, meta=meta, size=sizes.get(dst))

    def _empty_file(self, folder: Path) -> str:
        path = str(folder / f"part-empty-{uuid.uuid4().hex}.parquet")
        self._name_uncommitted([path])
        self.store.write_bytes(path, parquet_table.empty_parquet())
        return path

    def _free(self, path: str) -> str:
        """``path``, or a name of its own beside it if a file is there (never replace one)."""
        if not self.store.exists(path):
            return path
        folder, _, name = path.rpartition("/")
        return f"{folder}/{uuid.uuid4().hex[:8]}-{name}"

    def _name_uncommitted(self, paths: list[str]) -> None:
        """Record files about to be moved in before they are (see the module text).

        The store's write replaces the list whole; a local one is not fsynced: a killed
        process leaves the list in the page cache, which the next run reads; after a
        power cut a file it lost stays on disk unnamed, never read by anyone (no
        version names it) and deleted by ``VACUUM`` as any file the log does not know.
        """
        self._moved += [_relative(self, p) for p in paths]
        body = {"version": self.run_version, "files": self._moved}
        self.store.write_bytes(self.at(self.names.uncommitted), json.dumps(body).encode("utf-8"))

    def _here(self, folder: str) -> bool:
        """Whether a finished folder is on this machine while the table is not (data
        files the loader wrote here, which :meth:`move_in_all` uploads)."""
        return not self.store.local and "://" not in folder

    def is_folder(self, folder: str) -> bool:
        return (LocalStore() if self._here(folder) else self.store).is_dir(folder)

    def part_files(self, folder: str) -> list[str]:
        """The data files of one folder (a staging one), none if it is not there."""
        store = LocalStore() if self._here(folder) else self.store
        return [
            store.join(folder, e.name)
            for e in store.listdir(folder)
            if not e.is_dir and not e.name.startswith((".", "_"))
        ]

    def staged_rows(self, folder: str) -> int:
        """Rows of a staging folder, from its Parquet footers (no data read); the footers
        are kept for :meth:`move_in`, which needs them for the files' statistics."""
        total = 0
        store = LocalStore() if self._here(folder) else self.store
        for path in self.part_files(folder):
            meta = store.footer(path)
            self._footers[path] = meta
            total += meta.num_rows
        return total

    def _add(
        self,
        path: str,
        values: dict[str, str],
        tags: dict[str, str],
        new: bool,
        meta: Any = None,
        size: int | None = None,
    ) -> None:
        """One file of the run's commit; ``size``: an upload's (its time is now)."""
        st = self.store.stat(path) if size is None else Entry(path, False, size, _now_ms())
        if st is None:
            raise FileNotFoundError(path)
        meta = meta or self.store.footer(path)
        f = DataFile(
            log_path=encode_path(_relative(self, path)),
            path=path,
            partition=dict(values),
            size=st.size,
            modification_time=st.mtime_ms,
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
        leave empty files behind on a local disk. (A distributed store's files are
        durable once their writer closed them: its store does nothing here.)
        """
        del partitions  # every file written so far is synced
        files, self._unsynced = self._unsynced, []
        if files:
            self.store.sync(files, self.root)

    # ------------------------------------------------------------------ commit

    def schema_fields(self) -> list[dict[str, Any]]:
        """The table's columns (empty for a new table)."""
        return self.format.schema_fields(self.snapshot)

    def schema_change(self, columns: dict[str, str], keys: Keys) -> bool:
        """Whether the commit must add columns to the table's schema (or create it)."""
        metadata = self.format.metadata(self.snapshot, columns, keys)
        return metadata is not None and (self.changed or bool(self.schema_fields()))

    def plan(self, columns: dict[str, str], keys: Keys, sync: bool = True) -> Plan | None:
        """The run's changes as one commit (None: none), the table's ``columns`` holding
        ``keys`` (:mod:`.columns`); with ``sync``, the run's files made durable first."""
        plan = self.format.plan(
            self.snapshot, self._added.values(), self._removed.values(), columns, keys
        )
        if plan is not None and sync:
            self.sync()
        return plan

    def commit(self, spark: Any, plan: Plan) -> int:
        """Commit ``plan`` as one version; then the run's files are the table's."""
        crash_point("loader.commit.before")
        version = self.format.commit(
            spark, self.location, plan, self.snapshot.version, self.run_version, self.app_id
        )
        crash_point("loader.commit.after")
        self.committed()
        return version

    def committed(self) -> None:
        """The run's commit is in: its files are the table's; read the new version."""
        self.store.delete(self.at(self.names.uncommitted))
        self.open()

    # ------------------------------------------------------------------ sweep

    def sweep(self) -> None:
        """Remove what an interrupted run left (staging, links, empty folders) and, in a
        plain Parquet table, partitions of an earlier layout (``sender=*/file_id=*``).

        Only safe while no Spark job writes to the table: the caller holds the locks.
        """
        own = (self.names.staging, self.names.links, *_SWEPT_NAMES)
        for entry in self.store.listdir(self.root):
            if entry.name.startswith(_SWEPT_PREFIXES) or entry.name in own:
                self.store.delete(self.at(entry.name), recursive=True)
        if self.store.local and not self.format.is_table(self.root, self.store):
            parquet_table.remove_old_layout(self.path)

    def staging_folder(self) -> str:
        """A fresh folder for one Spark job's output, among this loader's own."""
        return self.at(self.names.staging, uuid.uuid4().hex)

    def links_folder(self, run_id: str) -> str:
        """The folder of one run's inputs on the table's store."""
        return self.at(self.names.links, run_id)

    def remove_run_folder(self, folder: str) -> None:
        """Remove one run's private folder (its links, a job's staging output), and the
        hidden folder holding it once no other run's is there."""
        self.store.delete(folder, recursive=True)
        parent = folder.rstrip("/").rpartition("/")[0]
        if parent and not self.store.listdir(parent):
            try:
                self.store.delete(parent)
            except OSError:
                pass  # another run's folder appeared meanwhile: it stays


def _relative(table: Table, path: str) -> str:
    """A path (or URI) below the table, relative to it, POSIX style."""
    if table.store.local:
        return Path(path).relative_to(table.path).as_posix()
    prefix = table.root.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not in the table {table.root}")
    return path[len(prefix) :]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _name(path: str) -> str:
    return path.rstrip("/").rpartition("/")[2]


def _rmdirs_up(folder: Path, stop: Path) -> None:
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
