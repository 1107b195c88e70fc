"""A simulated edge database instance, for tests and ``sealsync demo``.

It produces what a sender meets on a real edge node (docs/design.md §1.3, §2.1): data files
under ``<data dir>/{sequence,unsequence}/<group>/<region>/<partition>/`` (IoTDB's
storage group or database, virtual storage group or data region, time partition) named
as IoTDB names them, ``<time>-<version>-<inner compactions>-<cross compactions>.tsfile``
(``<time>`` the clock when the file was made, ``<version>`` rising per instance, also
across a restart), sealed by an
``X.resource`` written only once ``X`` is complete, later deletions in
``X.mods``, merges that mark files with ``X.merge`` and then replace them, TTL
deletes, and a schema log ``<schema dir>/mlog.txt``.

TsFiles are written in the tree model (devices ``root.sg1.d1``, measurements
``s1``, ``s2``; see :mod:`sealsync.formats.tsfile`). Point values are a pure
function of (device, measurement, time), :func:`point_value`, so a test can
compute the rows a file holds (:func:`expected_table`) without reading it.

As in an instance, a data file is written in place (it counts only once sealed),
``X.resource`` and ``X.merge`` appear whole (``durable.atomic_write``), and
deletions are appended to ``X.mods``. The files are the simulated database's, not
sealsync state, so nothing is fsynced: crash consistency of the edge database is
not what the tests exercise, and hundreds of fsyncs would slow them down.
"""

from __future__ import annotations

import json
import os
import re
import time
import zlib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.compute as pc

from sealsync import durable, formats
from sealsync.formats import deletion, mods
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from sealsync.formats.deletion import MIN_TIME
from sealsync.names import check_data_name, check_relative

FORMAT_SUFFIXES = {"tsfile": ".tsfile", "parquet": ".parquet"}
RESOURCE, MODS, MERGE = ".resource", ".mods", ".merge"
SIDECARS = (RESOURCE, MODS, MERGE)
SCHEMA_LOG = "mlog.txt"
DEFAULT_MEASUREMENTS = ("s1", "s2")
DEFAULT_STEP_MS = 1000
# IoTDB's (TsFileNameGenerator): <time>-<version>-<inner compactions>-<cross compactions>
_NAME = re.compile(r"^(\d+)-(\d+)-(\d+)-(\d+)\.[a-z]+$")
DEFAULT_REGION = 0  # 0.12/0.13 name their one virtual storage group 0


def point_value(device: str, measurement: str, time_ms: int) -> int:
    """The value every simulated file holds for this point (stable across processes)."""
    return time_ms * 1000 + zlib.crc32(f"{device}/{measurement}".encode()) % 1000


def expected_table(
    devices: Sequence[str],
    rows_per_device: int,
    start_ms: int = 0,
    measurements: Sequence[str] = DEFAULT_MEASUREMENTS,
    step_ms: int = DEFAULT_STEP_MS,
) -> pa.Table:
    """The rows ``write_file`` writes, as ``to_arrow`` returns them for a TsFile:
    devices sorted, time ascending, measurements (int64) sorted by name."""
    times: list[int] = []
    devs: list[str] = []
    values: dict[str, list[int]] = {m: [] for m in sorted(measurements)}
    for device in sorted(set(devices)):
        for i in range(rows_per_device):
            t = start_ms + i * step_ms
            times.append(t)
            devs.append(device)
            for m in values:
                values[m].append(point_value(device, m, t))
    columns: dict[str, pa.Array] = {
        TIME_COLUMN: pa.array(times, pa.int64()),
        DEVICE_COLUMN: pa.array(devs, pa.string()),
    }
    for m, vals in values.items():
        columns[m] = pa.array(vals, pa.int64())
    return pa.table(columns)


def _publish(path: Path, text: str) -> None:
    """Make a sidecar appear whole: readers see no file or the full content."""
    durable.atomic_write(path, text, sync=False)


def _dedupe_keep_last(table: pa.Table) -> pa.Table:
    """One row per (device, time): a later file's point wins, as in a compaction."""
    order = "__order"
    table = table.append_column(order, pa.array(range(table.num_rows), pa.int64()))
    last = table.group_by([DEVICE_COLUMN, TIME_COLUMN], use_threads=False).aggregate(
        [(order, "max")]
    )
    keep = pc.is_in(table.column(order), value_set=last.column(f"{order}_max"))
    return table.filter(keep).drop_columns([order])


def _compacted_name(rels: Sequence[str], unsequence: bool, suffix: str) -> str | None:
    """The name IoTDB gives a compaction's target (``TsFileNameGenerator``): of files of
    one space (inner compaction) the lowest time and version for sequence files, the
    highest for unsequence ones, one more inner compaction than the most compacted
    input; of both spaces (cross compaction, the target in sequence) the sequence
    input's time and version with one more cross compaction. None if an input has
    another name."""
    names = [_NAME.match(PurePosixPath(r).name) for r in rels]
    if not all(names):
        return None
    fields = [tuple(int(m.group(i)) for i in (1, 2, 3, 4)) for m in names if m]
    spaces = {r.split("/", 1)[0] for r in rels}
    inner = max(f[2] for f in fields)
    cross = max(f[3] for f in fields)
    if len(spaces) > 1:
        seq = [f for r, f in zip(rels, fields, strict=True) if r.startswith("sequence/")]
        low = min(seq)
        return f"{low[0]}-{low[1]}-{inner}-{cross + 1}{suffix}"
    pick = max if unsequence else min
    return f"{pick(f[0] for f in fields)}-{pick(f[1] for f in fields)}-{inner + 1}-{cross}{suffix}"


class EdgeInstance:
    """One simulated database server: a schema dir and one or more data dirs."""

    def __init__(self, root: str | os.PathLike[str], data_dirs: int = 1) -> None:
        if data_dirs < 1:
            raise ValueError("an instance needs at least one data dir")
        self.root = Path(root)
        self.schema_dir = self.root / "schema"
        if data_dirs == 1:
            self.data_dirs = [self.root / "data"]
        else:
            self.data_dirs = [self.root / f"data{i}" for i in range(data_dirs)]
        for folder in (self.schema_dir, *self.data_dirs):
            folder.mkdir(parents=True, exist_ok=True)
        # Like IoTDB at a restart: versions go on from the highest a file name holds.
        self._version = max(
            (
                int(m.group(2))
                for i in range(len(self.data_dirs))
                for rel in self.data_files(i)
                if (m := _NAME.match(PurePosixPath(rel).name))
            ),
            default=0,
        )

    # ------------------------------------------------------------------ paths

    def path(self, rel: str, data_dir: int = 0) -> Path:
        """Absolute path of a name relative to a data dir (data file or sidecar)."""
        return self.data_dirs[data_dir].joinpath(*PurePosixPath(check_relative(rel)).parts)

    def data_files(self, data_dir: int = 0) -> list[str]:
        """Every data file (sealed or not) in a data dir, as sorted relative names."""
        base = self.data_dirs[data_dir]
        found = []
        for space in ("sequence", "unsequence"):
            top = base / space
            if not top.is_dir():
                continue
            for path in top.rglob("*"):
                if path.suffix in FORMAT_SUFFIXES.values() and path.is_file():
                    found.append(path.relative_to(base).as_posix())
        return sorted(found)

    def sealed_files(self, data_dir: int = 0) -> list[str]:
        """Data files with ``X.resource`` and without ``X.merge`` (docs/design.md §1.3)."""
        return [
            rel
            for rel in self.data_files(data_dir)
            if self.path(rel + RESOURCE, data_dir).exists()
            and not self.path(rel + MERGE, data_dir).exists()
        ]

    def _free(self, folder: Path, name: str) -> bool:
        return not any((folder / (name + extra)).exists() for extra in ("", *SIDECARS))

    def _new_name(self, folder: Path, suffix: str) -> str:
        """A flushed file's name: the clock now, the next version, no compaction yet."""
        while True:
            self._version += 1
            name = f"{time.time_ns() // 1_000_000}-{self._version}-0-0{suffix}"
            if self._free(folder, name):
                return name

    # ------------------------------------------------------------------ writing

    def write_table(
        self,
        table: pa.Table,
        group: str,
        partition: int,
        name: str | None = None,
        *,
        unsequence: bool = False,
        fmt: str = "tsfile",
        seal: bool = True,
        data_dir: int = 0,
        region: int = DEFAULT_REGION,
    ) -> str:
        """Write any ``to_arrow``-shaped table as a data file; returns its relative name
        (``<space>/<group>/<region>/<partition>/<name>``)."""
        if fmt not in FORMAT_SUFFIXES:
            raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(FORMAT_SUFFIXES)}")
        suffix = FORMAT_SUFFIXES[fmt]
        space = "unsequence" if unsequence else "sequence"
        folder_rel = f"{space}/{group}/{region}/{partition}"
        folder = self.path(folder_rel, data_dir)
        folder.mkdir(parents=True, exist_ok=True)
        if name is None:
            name = self._new_name(folder, suffix)
        elif not name.endswith(suffix):
            raise ValueError(f"name {name!r} does not end with {suffix}")
        rel = check_data_name(f"{folder_rel}/{name}")
        formats.format_for(rel).write_arrow(self.path(rel, data_dir), table)
        if seal:
            self._write_resource(rel, data_dir, table)
        return rel

    def write_file(
        self,
        group: str,
        partition: int,
        name: str | None = None,
        *,
        devices: list[str],
        rows_per_device: int,
        start_ms: int = 0,
        unsequence: bool = False,
        fmt: str = "tsfile",
        seal: bool = True,
        data_dir: int = 0,
        measurements: tuple[str, ...] = DEFAULT_MEASUREMENTS,
        step_ms: int = DEFAULT_STEP_MS,
        region: int = DEFAULT_REGION,
    ) -> str:
        """Write a file of deterministic points (see :func:`expected_table`).

        Returns the relative POSIX name, e.g.
        ``sequence/root.sg1/0/0/1795720512767-1-0-0.tsfile``. With ``seal`` the
        ``X.resource`` appears only after the data file is complete.
        """
        table = expected_table(devices, rows_per_device, start_ms, measurements, step_ms)
        return self.write_table(
            table,
            group,
            partition,
            name,
            unsequence=unsequence,
            fmt=fmt,
            seal=seal,
            data_dir=data_dir,
            region=region,
        )

    def _write_resource(self, rel: str, data_dir: int, table: pa.Table) -> None:
        times = table.column(TIME_COLUMN)
        content = {
            "devices": sorted(set(table.column(DEVICE_COLUMN).to_pylist())),
            "start_ms": pc.min(times).as_py(),
            "end_ms": pc.max(times).as_py(),
            "rows": table.num_rows,
        }
        _publish(self.path(rel + RESOURCE, data_dir), json.dumps(content, sort_keys=True) + "\n")

    def seal(self, rel: str, data_dir: int = 0) -> None:
        """Write ``X.resource`` for a file written with ``seal=False``."""
        data = self.path(check_data_name(rel), data_dir)
        self._write_resource(rel, data_dir, formats.format_for(rel).to_arrow(data))

    def add_mods(self, rel: str, device: str, until_ms: int, data_dir: int = 0) -> None:
        """Record that ``device``'s points up to ``until_ms`` were deleted after sealing,
        as IoTDB 0.12-1.x writes it: every series of the device (``<device>.*``), from
        ``Long.MIN_VALUE``, in the chunks below the sealed file's length."""
        check_data_name(rel)
        size = os.path.getsize(self.path(rel, data_dir))
        with open(self.path(rel + MODS, data_dir), "a", encoding="utf-8") as f:
            f.write(mods.line(f"{device}.*", size, MIN_TIME, until_ms))

    def start_merge(self, rel: str, data_dir: int = 0) -> None:
        """Mark a file as being rewritten by a merge: it is no longer sealed."""
        check_data_name(rel)
        _publish(self.path(rel + MERGE, data_dir), "merging\n")

    def end_merge(self, rel: str, data_dir: int = 0) -> None:
        check_data_name(rel)
        self.path(rel + MERGE, data_dir).unlink(missing_ok=True)

    def merge(self, rels: list[str], group: str, partition: int, data_dir: int = 0) -> str:
        """Compact ``rels`` into one new sealed file; returns its relative name.

        Like a compaction: the inputs are marked ``X.merge``, their points minus
        those their ``X.mods`` delete are written to the new file (a later input
        wins a (device, time) tie), and only then are the inputs and their
        sidecars deleted. The output keeps the first input's format and goes to
        ``unsequence`` only if every input came from there.
        """
        if not rels:
            raise ValueError("nothing to merge")
        for rel in rels:
            check_data_name(rel)
        for rel in rels:
            self.start_merge(rel, data_dir)
        tables = []
        for rel in rels:
            data = self.path(rel, data_dir)
            table = formats.format_for(rel).to_arrow(data)
            gone = mods.read(self.path(rel + MODS, data_dir))
            tables.append(deletion.apply(table, list(gone), os.path.getsize(data)))
        merged = _dedupe_keep_last(pa.concat_tables(tables, promote_options="permissive"))
        fmt = "parquet" if rels[0].endswith(FORMAT_SUFFIXES["parquet"]) else "tsfile"
        unsequence = all(r.startswith("unsequence/") for r in rels)
        parts = PurePosixPath(rels[0]).parts
        region = int(parts[2]) if len(parts) == 5 and parts[2].isdigit() else DEFAULT_REGION
        space = "unsequence" if unsequence else "sequence"
        folder = self.path(f"{space}/{group}/{region}/{partition}", data_dir)
        name = _compacted_name(rels, unsequence, FORMAT_SUFFIXES[fmt])
        new = self.write_table(
            merged,
            group,
            partition,
            name if name is not None and self._free(folder, name) else None,
            unsequence=unsequence,
            fmt=fmt,
            data_dir=data_dir,
            region=region,
        )
        for rel in rels:
            self.delete(rel, data_dir)
        return new

    def delete(self, rel: str, data_dir: int = 0) -> None:
        """Remove a data file and its sidecars (a TTL expiry): data file first, so the
        file is never seen sealed without its data."""
        check_data_name(rel)
        for extra in ("", *SIDECARS):
            self.path(rel + extra, data_dir).unlink(missing_ok=True)

    def append_schema(self, lines: list[str]) -> None:
        """Append to the schema log the sender ships from ``sync_schema_pos`` on."""
        for line in lines:
            if "\n" in line:
                raise ValueError("a schema log line may not contain a newline")
        with open(self.schema_dir / SCHEMA_LOG, "a", encoding="utf-8") as f:
            f.write("".join(f"{line}\n" for line in lines))
