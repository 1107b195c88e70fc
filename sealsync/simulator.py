"""A simulated edge database instance, for tests and ``sealsync demo``.

It writes what an IoTDB 2.0 DataNode writes (checked against a real 2.0.1-beta by
tests/test_simulator_vs_iotdb.py; docs/design.md §1.3, §2.1), so that everything
downstream -- sender, receiver, loader, the demo -- meets one real release's files
without an IoTDB running. 2.0 because it is the release whose TsFile format (4) the
``tsfile`` package writes; IoTDB 0.12-1.x write format 3, which that package cannot.

* Data files under ``<data dir>/{sequence,unsequence}/<database>/<data region>/<time
  partition>/``, named ``<time>-<version>-<inner compactions>-<cross
  compactions>.tsfile`` (``TsFileNameGenerator``): ``<time>`` the clock when the file
  was made, ``<version>`` rising per instance, also across a restart. (IoTDB counts
  versions per data region and time partition; one count for the whole instance
  orders files the same way within each partition, which is all IoTDB's rules
  compare.) The data region is 1 unless the caller says otherwise, the first data
  region a fresh one-node 2.0 gives a database.
* ``X.resource`` once ``X`` is complete, in IoTDB 2.0's binary layout
  (:mod:`sealsync.formats.resource`): each device's first and last time, no plan
  index, and the consensus progress of a one-node IoTDB (:func:`resource.iot_progress_index`,
  the file's version standing for the write's search index).
* Deletions appended to ``X.mods2`` as ``TreeDeletionEntry`` records
  (:mod:`sealsync.formats.mods2`), the path pattern as the ``DELETE`` statement gave it.
* Compactions as 2.0 runs them (``InnerSpaceCompactionTask``,
  ``CrossSpaceCompactionTask``): a log ``<target>.inner-compaction.log`` (or
  ``.cross-compaction.log``) beside a target written under a temporary suffix
  (``.inner``/``.cross``), the target renamed to its ``.tsfile`` name and sealed
  while its sources are still sealed, then the sources and the log deleted. No
  marker ever unseals a source.
* TTL deletes, and a schema log ``<schema dir>/mlog.txt`` of text lines: the schema
  log the sender ships (IoTDB 2.0 itself keeps its schema in schema regions).

TsFiles are written in the tree model (devices ``root.sg1.d1``, measurements
``s1``, ``s2``; see :mod:`sealsync.formats.tsfile`), format 4. Point values are a pure
function of (device, measurement, time), :func:`point_value`, so a test can
compute the rows a file holds (:func:`expected_table`) without reading it. A Parquet
data file (``fmt="parquet"``, sealsync's own second format) gets the same sidecars.

As in an instance, a data file is written in place (it counts only once sealed),
``X.resource`` appears whole (``durable.atomic_write``), and deletions are appended
to ``X.mods2``. The files are the simulated database's, not sealsync state, so
nothing is fsynced: crash consistency of the edge database is not what the tests
exercise, and hundreds of fsyncs would slow them down.
"""

from __future__ import annotations

import os
import re
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.compute as pc

from sealsync import durable, formats
from sealsync.formats import deletion, mods2, resource
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from sealsync.formats.deletion import MIN_TIME
from sealsync.names import check_data_name, check_relative

FORMAT_SUFFIXES = {"tsfile": ".tsfile", "parquet": ".parquet"}
RESOURCE, MODS2 = ".resource", ".mods2"
SIDECARS = (RESOURCE, MODS2)
# A compaction's target while it is written (IoTDBConstant), and its log (CompactionLogger)
INNER_TEMP, CROSS_TEMP = ".inner", ".cross"
INNER_LOG, CROSS_LOG = ".inner-compaction.log", ".cross-compaction.log"
SCHEMA_LOG = "mlog.txt"
DEFAULT_MEASUREMENTS = ("s1", "s2")
DEFAULT_STEP_MS = 1000
# IoTDB's (TsFileNameGenerator): <time>-<version>-<inner compactions>-<cross compactions>
_NAME = re.compile(r"^(\d+)-(\d+)-(\d+)-(\d+)\.[a-z]+$")
DEFAULT_REGION = 1  # a fresh one-node 2.0's first data region (schema region 0 before it)
DELETE_LEVELS = ("*", "**")  # DELETE FROM <device>.* / <device>.**
PARTITION_INTERVAL_MS = 604_800_000  # 2.0's default time_partition_interval: 7 days


def time_partition(time_ms: int) -> int:
    """The time partition IoTDB 2.0 puts a point in (``TimePartitionUtils``, default
    interval): the folder a file of points from ``time_ms`` on belongs in, as long as
    its points stay in that partition. The ``partition`` callers give
    :meth:`EdgeInstance.write_file` is theirs to choose; this is IoTDB's."""
    return time_ms // PARTITION_INTERVAL_MS


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


def _publish(path: Path, data: bytes) -> None:
    """Make a sidecar appear whole: readers see no file or the full content."""
    durable.atomic_write(path, data, sync=False)


def _dedupe_keep_last(table: pa.Table) -> pa.Table:
    """One row per (device, time): a later file's point wins, as in a compaction."""
    order = "__order"
    table = table.append_column(order, pa.array(range(table.num_rows), pa.int64()))
    last = table.group_by([DEVICE_COLUMN, TIME_COLUMN], use_threads=False).aggregate(
        [(order, "max")]
    )
    keep = pc.is_in(table.column(order), value_set=last.column(f"{order}_max"))
    return table.filter(keep).drop_columns([order])


def _name_fields(rel: str) -> tuple[int, int, int, int] | None:
    """``(time, version, inner, cross)`` of a data file's name; None if not IoTDB's."""
    m = _NAME.match(PurePosixPath(rel).name)
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]), int(m[4]))


def compacted_name(rels: Sequence[str], suffix: str) -> str | None:
    """The name IoTDB 2.0 gives a compaction's target (``TsFileNameGenerator``), its
    ``suffix`` the target's temporary one or the final one.

    Of files of one space (an inner compaction) the target named after the first
    source in name order (time, then version; ``TsFileResource.compareFileName``),
    one more inner compaction than the most compacted source and the highest cross
    count: 2.0 opens one target per source under those names and fills the first,
    deleting the others empty. Of both spaces (a cross compaction, the target in
    sequence) the first sequence source's time, version and inner count, one more
    cross compaction: 2.0 writes one target per sequence source, named so; the
    simulator's one target takes the first's. None if a source has another name."""
    fields = [_name_fields(r) for r in rels]
    if not all(fields):
        return None
    named = [(f, r) for f, r in zip(fields, rels, strict=True) if f is not None]
    if len({r.split("/", 1)[0] for r in rels}) > 1:
        t, v, inner, cross = min(f for f, r in named if r.startswith("sequence/"))
        return f"{t}-{v}-{inner}-{cross + 1}{suffix}"
    t, v, _, _ = min(f for f, _ in named)
    inner = max(f[2] for f, _ in named)
    cross = max(f[3] for f, _ in named)
    return f"{t}-{v}-{inner + 1}-{cross}{suffix}"


def _log_line(kind: str, rel: str) -> str:
    """One line of a compaction log: ``source``/``target`` and the file's identifier,
    ``<space> <database> <region> <partition> <name>`` (``TsFileIdentifier``)."""
    return " ".join((kind, *PurePosixPath(rel).parts)) + "\n"


@dataclass(frozen=True)
class Compaction:
    """A compaction under way (:meth:`EdgeInstance.start_compaction`): relative names
    of its sources, its target (final name), the target's temporary name and its log."""

    sources: tuple[str, ...]
    target: str
    temporary: str
    log: str
    data_dir: int


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
        """Data files with their ``X.resource``: sealed (docs/design.md §1.3)."""
        return [
            rel for rel in self.data_files(data_dir) if self.path(rel + RESOURCE, data_dir).exists()
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
        ``sequence/root.sg1/1/0/1795720512767-1-0-0.tsfile``. With ``seal`` the
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

    def _write_resource(
        self, rel: str, data_dir: int, table: pa.Table, search_index: int | None = None
    ) -> None:
        """``X.resource`` as 2.0 writes it: each device's first and last time in device
        order, and the progress of the writes it holds: ``search_index``, by default the
        file's version (2.0's search index rises with each write to the region, as the
        versions of the files written rise)."""
        by_device = table.group_by(DEVICE_COLUMN, use_threads=False).aggregate(
            [(TIME_COLUMN, "min"), (TIME_COLUMN, "max")]
        )
        devices = {
            device: (start, end)
            for device, start, end in sorted(
                zip(
                    by_device.column(DEVICE_COLUMN).to_pylist(),
                    by_device.column(f"{TIME_COLUMN}_min").to_pylist(),
                    by_device.column(f"{TIME_COLUMN}_max").to_pylist(),
                    strict=True,
                )
            )
        }
        if search_index is None:
            fields = _name_fields(rel)
            search_index = fields[1] if fields is not None else max(self._version, 1)
        data = resource.serialize(devices, progress_index=resource.iot_progress_index(search_index))
        _publish(self.path(rel + RESOURCE, data_dir), data)

    def seal(self, rel: str, data_dir: int = 0) -> None:
        """Write ``X.resource`` for a file written with ``seal=False``."""
        data = self.path(check_data_name(rel), data_dir)
        self._write_resource(rel, data_dir, formats.format_for(rel).to_arrow(data))

    def add_mods(
        self, rel: str, device: str, until_ms: int, data_dir: int = 0, *, levels: str = "*"
    ) -> None:
        """Record in ``X.mods2`` that ``device``'s points up to ``until_ms`` were
        deleted after sealing, as IoTDB 2.0 writes ``DELETE FROM <device>.* WHERE time
        <= until_ms`` (``levels="**"``: ``<device>.**``, the series of devices below it
        too): one ``TreeDeletionEntry``, the pattern as the statement gave it, from
        ``Long.MIN_VALUE``. The caller picks the file; IoTDB writes the entry to every
        sealed file whose ``.resource`` may hold a matching point."""
        check_data_name(rel)
        if levels not in DELETE_LEVELS:
            raise ValueError(f"levels {levels!r}: expected one of {DELETE_LEVELS}")
        entry = mods2.tree_entry(f"{device}.{levels}", MIN_TIME, until_ms)
        with open(self.path(rel + MODS2, data_dir), "ab") as f:
            f.write(entry)

    def start_compaction(
        self, rels: Sequence[str], group: str, partition: int, data_dir: int = 0
    ) -> Compaction:
        """Start compacting ``rels`` as IoTDB 2.0 does: the log first (every source,
        then the target), then the target under its temporary suffix, holding the
        sources' points minus those their ``X.mods2`` delete (a later source wins a
        (device, time) tie). The sources stay sealed and untouched; the target is no
        data file yet. Its format is the first source's; it goes to ``unsequence``
        only if every source came from there (else a cross compaction, in sequence)."""
        if not rels:
            raise ValueError("nothing to merge")
        for rel in rels:
            check_data_name(rel)
        tables = []
        for rel in rels:
            table = formats.format_for(rel).to_arrow(self.path(rel, data_dir))
            tables.append(deletion.apply(table, mods2.read(self.path(rel + MODS2, data_dir))))
        merged = _dedupe_keep_last(pa.concat_tables(tables, promote_options="permissive"))
        fmt = "parquet" if rels[0].endswith(FORMAT_SUFFIXES["parquet"]) else "tsfile"
        unsequence = all(r.startswith("unsequence/") for r in rels)
        cross = len({r.split("/", 1)[0] for r in rels}) > 1
        parts = PurePosixPath(rels[0]).parts
        region = int(parts[2]) if len(parts) == 5 and parts[2].isdigit() else DEFAULT_REGION
        space = "unsequence" if unsequence else "sequence"
        folder_rel = f"{space}/{group}/{region}/{partition}"
        folder = self.path(folder_rel, data_dir)
        folder.mkdir(parents=True, exist_ok=True)
        suffix = FORMAT_SUFFIXES[fmt]
        name = compacted_name(rels, suffix)
        if name is None or not self._free(folder, name):
            name = self._new_name(folder, suffix)
        stem = name[: -len(suffix)]
        temporary = f"{folder_rel}/{stem}{CROSS_TEMP if cross else INNER_TEMP}"
        log = temporary + (CROSS_LOG if cross else INNER_LOG)
        lines = [_log_line("source", r) for r in rels] + [_log_line("target", temporary)]
        _publish(self.path(log, data_dir), "".join(lines).encode())
        self.path(temporary, data_dir).unlink(missing_ok=True)  # a crashed run's leftover
        formats.format_for(name).write_arrow(self.path(temporary, data_dir), merged)
        return Compaction(tuple(rels), f"{folder_rel}/{name}", temporary, log, data_dir)

    def seal_compaction(self, compaction: Compaction) -> str:
        """The target takes its ``.tsfile`` name and its ``X.resource``: sealed beside
        its still sealed sources, the window a sender may ship both in. Its progress is
        the furthest of its sources' (``updateToMinimumEqualOrIsAfterProgressIndex``
        keeps the highest search index of each peer)."""
        d, target = compaction.data_dir, compaction.target
        os.replace(self.path(compaction.temporary, d), self.path(target, d))
        versions = [f[1] for r in compaction.sources if (f := _name_fields(r)) is not None]
        table = formats.format_for(target).to_arrow(self.path(target, d))
        self._write_resource(target, d, table, max(versions) if versions else None)
        return target

    def end_compaction(self, compaction: Compaction) -> None:
        """The sources and their sidecars go, then the log: the compaction is over."""
        for rel in compaction.sources:
            self.delete(rel, compaction.data_dir)
        self.path(compaction.log, compaction.data_dir).unlink(missing_ok=True)

    def merge(self, rels: list[str], group: str, partition: int, data_dir: int = 0) -> str:
        """Compact ``rels`` into one new sealed file and delete them; returns its
        relative name (:meth:`start_compaction`, :meth:`seal_compaction`,
        :meth:`end_compaction` in a row)."""
        compaction = self.start_compaction(rels, group, partition, data_dir)
        target = self.seal_compaction(compaction)
        self.end_compaction(compaction)
        return target

    def delete(self, rel: str, data_dir: int = 0) -> None:
        """Remove a data file and its sidecars (a TTL expiry, a compaction's sources):
        the data file first, then ``X.resource`` and ``X.mods2``."""
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
