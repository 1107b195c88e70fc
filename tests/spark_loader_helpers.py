"""A receiver's storage built without the network, and table comparisons.

Not a test module; imported by name (pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pyarrow as pa

from receiver.load.apply import log_deletion
from receiver.storage import DirectoryStorage
from sealsync import formats
from sealsync.config import LoaderConfig
from sealsync.formats import deletion, mods, mods2
from sealsync.formats.deletion import MIN_TIME
from sealsync.names import MODS2_SUFFIX, MODS_SUFFIX, SIDECAR_SUFFIXES
from sealsync.simulator import EdgeInstance
from spark_loader import delta_log, read_arrow
from spark_loader.columns import measurements_of
from spark_loader.table_binding import loader_id
from spark_loader.table_layout import FILE_ID_COLUMN, SENDER_COLUMN, SOURCE_COLUMN, WriterNames

SENDER_A = str(uuid.UUID(int=0xA))
SENDER_B = str(uuid.UUID(int=0xB))
_KEYS = {"time", "device", SENDER_COLUMN, SOURCE_COLUMN, FILE_ID_COLUMN}


class Receiver:
    """Receiver data dirs holding loaded files, in the default storage layout."""

    def __init__(self, root: Path, data_dirs: int = 1) -> None:
        self.data_dirs = [root / f"recv{i}" for i in range(data_dirs)]
        for d in self.data_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self.storage = DirectoryStorage(self.data_dirs)
        self.placed: dict[tuple[str, str], Path] = {}

    def place(
        self, edge: EdgeInstance, rel: str, sender: str = SENDER_A, data_dir: int = 0
    ) -> Path:
        """Copy an edge file and its sidecars (its ``.mods2`` too) to where the receiver
        loads it.

        Without a ``.mods2`` on the edge, a copy from an earlier placing is removed,
        as the receiver does when a file arrives without one.
        """
        target = self.storage.target(self.data_dirs[data_dir], sender, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(edge.path(rel), target)
        for sidecar in SIDECAR_SUFFIXES:
            source, copy = edge.path(rel + sidecar), Path(f"{target}{sidecar}")
            if source.exists():
                shutil.copy2(source, copy)
            else:
                copy.unlink(missing_ok=True)
        self.placed[(sender, rel)] = target
        return target

    def mods_path(self, rel: str, sender: str = SENDER_A) -> Path:
        """The receiver's ``.mods`` of a placed file (it may not exist)."""
        return Path(f"{self.placed[(sender, rel)]}{MODS_SUFFIX}")

    def add_mods(self, rel: str, device: str, until_ms: int, sender: str = SENDER_A) -> None:
        """Append a deletion to the receiver's ``.mods`` of a placed file (it grows): the
        text deletions a 0.12-1.x sender ships, beside the edge's own ``.mods2``."""
        size = os.path.getsize(self.placed[(sender, rel)])
        with open(self.mods_path(rel, sender), "a", encoding="utf-8") as f:
            f.write(mods.line(f"{device}.*", size, MIN_TIME, until_ms))

    def remove(self, rel: str, sender: str = SENDER_A) -> None:
        """Delete a placed file the receiver's way: its deletion logged first (the
        evidence the loader needs, receiver.load.apply.log_deletion), then removed."""
        log_deletion(self.storage, sender, rel)
        self.remove_by_hand(rel, sender)

    def remove_by_hand(self, rel: str, sender: str = SENDER_A) -> None:
        """Delete a placed file without the receiver knowing: no logged deletion."""
        path = self.placed.pop((sender, rel))
        path.unlink()
        for sidecar in SIDECAR_SUFFIXES:
            Path(f"{path}{sidecar}").unlink(missing_ok=True)

    def config(self, root: Path, name: str = "main") -> LoaderConfig:
        return LoaderConfig(
            receiver_data_dirs=list(self.data_dirs),
            table_path=root / f"{name}-table",
            state_dir=root / f"{name}-state",
            master="local[2]",
        )


def canonical(rows: list[dict[str, Any]]) -> list[tuple]:
    """Rows as sortable tuples: provenance, time, device, the non-null measurements."""
    return sorted(
        (_row(row, {k: v for k, v in row.items() if k not in _KEYS}) for row in rows),
        key=repr,
    )


def _row(where: dict[str, Any], values: dict[str, Any]) -> tuple:
    """One canonical row: ``where``'s provenance, time and device, then ``values`` (by
    measurement, which may have a provenance column's name) that are not null."""
    measured = tuple(sorted((k, v) for k, v in values.items() if v is not None))
    return (where[SENDER_COLUMN], where[SOURCE_COLUMN], where["time"], where["device"], measured)


def measurement_columns(table_path: Path) -> dict[str, str]:
    """Column -> the measurement it holds, by the table's schema (its field metadata)."""
    meta = delta_log.read(table_path).metadata or {}
    return measurements_of(json.loads(meta.get("schemaString") or '{"fields": []}')["fields"])


def table_rows(table_path: Path) -> list[tuple]:
    """The table's rows, each column named by the measurement it holds (its schema's
    metadata: a measurement of two kinds has two columns, a name Delta refuses an
    escaped one, a measurement named like a provenance column a qualified one), so that
    they compare with the source files' rows."""
    table = read_arrow(table_path)
    names = measurement_columns(table_path)
    rows = []
    for row in table.to_pylist():
        values: dict[str, Any] = {}
        for column, measurement in names.items():
            if row.get(column) is not None or measurement not in values:
                values[measurement] = row.get(column)
        rows.append(_row(row, values))
    return sorted(rows, key=repr)


def file_rows(path: Path) -> pa.Table:
    """A receiver file's rows as the table must hold them: read independently of the
    loader, without the points its ``.mods`` and ``.mods2`` delete."""
    table: pa.Table = formats.format_for(path).to_arrow(path)
    gone = [*mods.read(Path(f"{path}{MODS_SUFFIX}")), *mods2.read(Path(f"{path}{MODS2_SUFFIX}"))]
    return deletion.apply(table, gone, os.path.getsize(path))


def iotdb_rank(rel: str) -> tuple[Any, ...]:
    """IoTDB's priority of a file (higher wins), from its relative name: unsequence
    over sequence, then the version, then the time of ``<time>-<version>-...``."""
    unseq = rel.startswith("unsequence/")
    fields = rel.rsplit("/", 1)[-1].split(".")[0].split("-")
    numbers = [int(f) for f in fields] if all(f.isdigit() for f in fields) else []
    if len(numbers) < 2:
        return (unseq, -1, -1, (), rel)
    return (unseq, numbers[1], numbers[0], tuple(numbers[2:]), rel)


def answer(files: dict[tuple[str, str], list[dict[str, Any]]]) -> list[tuple]:
    """The rows IoTDB answers from these files' points ((sender, rel) -> rows): per
    sender and (device, time), each measurement's value from the highest-ranked file
    holding one, the row put in the highest-ranked file holding the (device, time)."""
    best: dict[tuple[str, str, int], dict[str, Any]] = {}
    owner: dict[tuple[str, str, int], tuple[Any, ...]] = {}
    for (sender, rel), rows in files.items():
        rank = iotdb_rank(rel)
        for row in rows:
            key = (sender, row["device"], row["time"])
            if key not in owner or rank > owner[key]:
                owner[key] = rank
            values = best.setdefault(key, {})
            for name, value in row.items():
                if name in ("time", "device") or value is None:
                    continue
                if name not in values or rank > values[name][0]:
                    values[name] = (rank, value)
    out = []
    for (sender, device, t), rank in owner.items():
        values = {name: v for name, (_, v) in best[(sender, device, t)].items()}
        where = {"time": t, "device": device, SENDER_COLUMN: sender, SOURCE_COLUMN: rank[-1]}
        out.append(_row(where, values))
    return sorted(out, key=repr)


def source_rows(receiver: Receiver, without: Collection[tuple[str, str]] = ()) -> list[tuple]:
    """What the table must hold: IoTDB's answer (:func:`answer`) from every placed
    file's rows (but those of the ``(sender, rel)`` in ``without``), read
    independently, deletions applied."""
    files = {
        key: file_rows(path).to_pylist()
        for key, path in receiver.placed.items()
        if key not in without
    }
    return answer(files)


def partition_dirs(table_path: Path, version: int | None = None) -> set[str]:
    """The ``sender=*/source_file=*/file_id=*`` folders of the files the Delta table's
    latest version (or ``version``) holds; a folder whose files were removed from the
    table stays on disk for time travel and is not one of them."""
    snap = delta_log.read(str(table_path), version)
    return {str(Path(f.path).parent.relative_to(table_path)) for f in snap.files.values()}


def table_versions(table_path: Path) -> list[int]:
    """The versions of the Delta table's log, in order."""
    folder = Path(table_path) / delta_log.LOG_FOLDER
    if not folder.is_dir():
        return []
    return sorted(int(p.name[:20]) for p in folder.glob("*.json") if p.name[:20].isdigit())


def snapshot(path: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """Every entry under ``path`` (the folder itself too) -> (size, mtime_ns)."""
    path = Path(path)
    out = {".": (0, path.stat().st_mtime_ns)}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            st = full.lstat()
            out[str(full.relative_to(path))] = (
                st.st_size if name in filenames else 0,
                st.st_mtime_ns,
            )
    return out


#: Where sender A's Parquet file of :func:`two_senders` starts: after its TsFile's
#: points, so that no file holds another's (device, time) and each keeps all its rows.
PARQUET_A_START = 100_000


def two_senders(tmp_path: Path) -> tuple[EdgeInstance, Receiver]:
    """Both formats, both roots, two senders, files with different measurements, no
    (device, time) in two files."""
    edge = EdgeInstance(tmp_path / "edge")
    recv = Receiver(tmp_path)
    files = [
        (
            SENDER_A,
            edge.write_file(
                "root.sg1", 0, devices=["root.sg1.d1", "root.sg1.d2"], rows_per_device=40
            ),
        ),
        (
            SENDER_A,
            edge.write_file(
                "root.sg1",
                1,
                devices=["root.sg1.d1"],
                rows_per_device=25,
                start_ms=PARQUET_A_START,
                fmt="parquet",
                measurements=("s1", "s3"),
            ),
        ),
        (
            SENDER_B,
            edge.write_file(
                "root.sg2",
                0,
                devices=["root.sg2.d9"],
                rows_per_device=30,
                unsequence=True,
                measurements=("s7",),
            ),
        ),
        (
            SENDER_B,
            edge.write_file(
                "root.sg2",
                0,
                devices=["root.sg2.d8"],
                rows_per_device=20,
                fmt="parquet",
                unsequence=True,
            ),
        ),
    ]
    for sender, rel in files:
        recv.place(edge, rel, sender)
    return edge, recv


def writer_names(config: LoaderConfig) -> WriterNames:
    """The names the loader of ``config`` uses in its table (its staging folder, its list
    of uncommitted files): its state dir's id, once a run recorded one."""
    try:
        found = loader_id(Path(config.state_dir))
    except OSError:
        found = None
    return WriterNames.of(found)


def uncommitted_list(config: LoaderConfig) -> Path:
    """Where the loader of ``config`` names the files it moved into the table and has
    not committed yet."""
    return Path(config.table_path) / writer_names(config).uncommitted
