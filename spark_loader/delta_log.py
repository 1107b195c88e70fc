"""The table's Delta log, read without Spark: which data files a version holds.

The loader decides what a run must change before it starts Spark (a run on a local
table with nothing new never starts it), so it reads the log itself, through the
table's store (:mod:`.store`: a local folder, or HDFS or S3 through Spark's client):
the newest classic checkpoint (``<v>.checkpoint.parquet``, or its parts) and the JSON
commits after it, replayed in order (Delta's protocol: a file is in the table when its
last ``add`` is not followed by a ``remove`` of the same path). Commits are written by Delta itself
(:mod:`.delta_commit`); this module never writes the log.

:func:`read_arrow` reads a version of the table with pyarrow alone: the files it holds,
their columns unified, the partition columns from the log. Only tables without
deletion vectors are read (the loader's never have any): a file carrying one is
refused rather than read with rows it has deleted.
"""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from sealsync.config.location import TableLocation
from spark_loader.store import LocalStore, Store

LOG_FOLDER = "_delta_log"
#: The application id of the loader's commits (Delta's idempotent transactions: the
#: ``txn`` action of each commit carries it and the run's number).
APP_ID = "sealsync-load"
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


class DeltaLogError(Exception):
    """The log cannot be read as a Delta table this reader understands."""


@dataclass
class DataFile:
    """One data file of a version: where it is and what the log says of it."""

    log_path: str  # the path as the log spells it (URL-encoded, relative or a URI)
    path: str  # where it is: a local path, or a URI of the table's file system
    partition: dict[str, str]
    size: int
    modification_time: int
    rows: int | None  # the log's numRecords, if it has stats
    tags: dict[str, str] = field(default_factory=dict)
    stats: str | None = None
    deletion_vector: bool = False


@dataclass
class Snapshot:
    """A version of the table; version -1 is a table with no log yet."""

    version: int = -1
    files: dict[str, DataFile] = field(default_factory=dict)  # by log path
    metadata: dict[str, Any] | None = None
    protocol: dict[str, Any] | None = None
    transactions: dict[str, int] = field(default_factory=dict)  # appId -> version


def _local(table: str | os.PathLike[str], store: Store | None) -> tuple[str, Store]:
    """The table's path and store: without a store, a local folder (a ``file://`` URI
    is one); a URI of another file system is refused, never read as a folder name."""
    if store is not None:
        return os.fspath(table), store
    text = table.uri if isinstance(table, TableLocation) else os.fspath(table)
    parsed = urlparse(text)
    if parsed.scheme == "file":
        return unquote(parsed.path), LocalStore()
    if len(parsed.scheme) > 1 and "://" in text:
        raise DeltaLogError(
            f"{text} is on {parsed.scheme}://, not a local folder: read it with deltalake "
            "(DeltaTable with its storage options) or Spark"
        )
    return text, LocalStore()


def log_folder(table: str | os.PathLike[str], store: Store | None = None) -> str:
    return (store or LocalStore()).join(os.fspath(table), LOG_FOLDER)


def is_delta(table: str | os.PathLike[str], store: Store | None = None) -> bool:
    """Whether ``table`` has a Delta log with at least one commit or checkpoint."""
    table, store = _local(table, store)
    names = [e.name for e in store.listdir(log_folder(table, store))]
    return any(_COMMIT_RE.match(n) or _CHECKPOINT_RE.match(n) for n in names)


def encode_path(relative: str) -> str:
    """A relative file path as a Delta log spells it (a URL-encoded relative URI)."""
    return quote(relative, safe="/=-_.~")


def data_path(table: str, log_path: str, store: Store) -> str:
    """Where the file a log path names is: below the table (a relative path), or the
    absolute path or URI the log gives, on the table's own file system."""
    parsed = urlparse(log_path)
    if store.local:
        if parsed.scheme in ("", "file") and log_path.startswith(("file:", "/")):
            return unquote(parsed.path)
        if parsed.scheme and parsed.scheme != "file":
            raise DeltaLogError(f"a data file outside the local file system: {log_path}")
        return store.join(table, unquote(log_path))
    if parsed.scheme:
        return log_path
    return store.join(table, unquote(log_path))


def read(
    table: str | os.PathLike[str], version: int | None = None, store: Store | None = None
) -> Snapshot:
    """The table's latest version, or ``version``; an empty snapshot without a log."""
    root, store = _local(table, store)
    folder = log_folder(root, store)
    names = [e.name for e in store.listdir(folder)]
    if not names:
        if version is not None:
            raise DeltaLogError(f"{root} has no Delta log")
        return Snapshot()
    commits = sorted(int(m.group(1)) for n in names if (m := _COMMIT_RE.match(n)))
    parts: dict[int, set[tuple[int, int]]] = {}
    for n in names:
        m = _CHECKPOINT_RE.match(n)
        if m:
            part = (int(m.group(2) or 1), int(m.group(3) or 1))
            parts.setdefault(int(m.group(1)), set()).add(part)
    target = version if version is not None else max([*commits, *parts, -1])
    if target < 0:
        return Snapshot()
    snap = Snapshot()
    start = 0
    for cp in sorted(parts, reverse=True):
        got = parts[cp]
        total = next(iter(got))[1]
        if cp <= target and got == {(i, total) for i in range(1, total + 1)}:
            _replay_checkpoint(root, folder, cp, total, snap, store)
            snap.version = cp
            start = cp + 1
            break
    for v in range(start, target + 1):
        if v not in commits:
            raise DeltaLogError(f"{folder} lacks commit {v} (version {target} was asked for)")
        _replay_commit(root, store.join(folder, f"{v:020d}.json"), snap, store)
        snap.version = v
    return snap


def _replay_commit(table: str, path: str, snap: Snapshot, store: Store) -> None:
    for line in store.read_bytes(path).decode("utf-8").splitlines():
        if line.strip():
            _apply(table, json.loads(line), snap, store)


def _replay_checkpoint(
    table: str, folder: str, version: int, total: int, snap: Snapshot, store: Store
) -> None:
    for i in range(1, total + 1):
        name = (
            f"{version:020d}.checkpoint.parquet"
            if total == 1
            else f"{version:020d}.checkpoint.{i:010d}.{total:010d}.parquet"
        )
        data = pq.read_table(io.BytesIO(store.read_bytes(store.join(folder, name))))
        wanted = [
            c for c in ("txn", "add", "remove", "metaData", "protocol") if c in data.schema.names
        ]
        for row in data.select(wanted).to_pylist():
            for key, value in row.items():
                if value is not None:
                    _apply(table, {key: _plain(value)}, snap, store)


def _plain(value: Any) -> Any:
    """A checkpoint's value as the JSON form has it (Parquet maps read as pair lists)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list) and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        return {str(k): v for k, v in value}
    return value


def _apply(table: str, action: dict[str, Any], snap: Snapshot, store: Store) -> None:
    if "add" in action:
        add = action["add"]
        rows = None
        if add.get("stats"):
            try:
                rows = json.loads(add["stats"]).get("numRecords")
            except ValueError:
                rows = None
        snap.files[add["path"]] = DataFile(
            log_path=add["path"],
            path=data_path(table, add["path"], store),
            partition=dict(add.get("partitionValues") or {}),
            size=int(add.get("size") or 0),
            modification_time=int(add.get("modificationTime") or 0),
            rows=None if rows is None else int(rows),
            tags=dict(add.get("tags") or {}),
            stats=add.get("stats"),
            deletion_vector=bool(add.get("deletionVector")),
        )
    elif "remove" in action:
        snap.files.pop(action["remove"]["path"], None)
    elif "metaData" in action:
        snap.metadata = action["metaData"]
    elif "protocol" in action:
        snap.protocol = action["protocol"]
    elif "txn" in action:
        txn = action["txn"]
        snap.transactions[str(txn["appId"])] = int(txn["version"])


def read_arrow(
    table: str | os.PathLike[str], version: int | None = None, store: Store | None = None
) -> pa.Table:
    """A version of the table (default: the latest) with pyarrow: every file's columns
    unified (missing -> null), the partition columns as string columns. Without a
    ``store``, a local table (a remote one: DeltaLogError, saying what reads it)."""
    table, store = _local(table, store)
    snap = read(table, version, store)
    partition_columns = list((snap.metadata or {}).get("partitionColumns") or [])
    pieces = []
    for f in sorted(snap.files.values(), key=lambda f: f.log_path):
        if f.deletion_vector:
            raise DeltaLogError(f"{f.log_path} has a deletion vector, which this reader skips")
        data = pq.read_table(io.BytesIO(store.read_bytes(f.path)))
        for name in partition_columns:
            value = f.partition.get(name)
            data = data.append_column(name, pa.array([value] * data.num_rows, pa.string()))
        pieces.append(data)
    if not pieces:
        return pa.table({name: pa.array([], pa.string()) for name in partition_columns})
    return pa.concat_tables(pieces, promote_options="default")
