"""A real IoTDB's inner-space compaction reaches the table as IoTDB answers it, whichever
round saw it: before (the sources alone), mid-way (the sealed targets beside their
sources: IoTDB writes a target and its ``.resource`` before it deletes the sources) and
after (the targets alone), and in the other order too (the targets first, the sources
arriving after them, then their deletion). The files are the ones real IoTDB 0.12.0 and
2.0.1-beta servers wrote and compacted, shipped by ``sealsync send`` to ``sealsync
serve`` and loaded by ``sealsync load`` (real processes all). After each round the table
equals row by row a reference computed from the statements run, which is IoTDB's own
answer too; no (device, time) is in it twice; and each row lies in the partition of the
file whose value IoTDB returns among the files the round shipped, so once the sources
are gone every row comes from a target.

Each server writes two storage groups alike, one per order of the rounds: a receiver
takes a device from one sender only, so each group has a sender of its own, and one
load a round serves all four (both releases, both orders).

0.12.0's level compaction (``LevelCompactionTsFileManagement``; ``compaction_strategy``
``LEVEL_COMPACTION`` is the default) merges the files of a level of the sequence space
into one file of the next level once the level holds ``seq_file_num_in_each_level``; the
unsequence space likewise (``unseq_file_num_in_each_level``, ``unseq_level_num`` levels)
when ``enable_unseq_compaction`` is false (true merges them into the sequence files
instead: ``test_iotdb_compaction_load.py``). A target takes the name of its first source
with the merge count raised, ``<time>-<version>-1-0.tsfile``; then the sources are
deleted. It runs when a flush ends, too soon after the last source's flush to copy that
source; so the server writes the sources with levels too large to fill, they are copied,
and it restarts with levels of three, where the flush of a later point (``LATE``) starts
the compaction of both spaces (``MERGE`` alone does nothing after a restart until a file
of the partition is opened). The later point's file joins the sequence sources as soon
as it is sealed, so no round ships it: the sequence target holds its point.

2.0.1-beta schedules inner compactions itself (every ``compaction_schedule_interval_in_ms``,
``inner_compaction_candidate_file_num`` files at least); it writes the sources with
``enable_seq_space_compaction`` and ``enable_unseq_space_compaction`` false, and after
the copy ``SET CONFIGURATION`` turns them on (no restart). A target takes the name of
its first source with the inner compaction count raised, in both spaces (observed; the
``TsFileNameGenerator`` of later releases names an unsequence target after its last
source). One data region per database keeps a group's files in one folder.

Which file a row belongs to: every new file of a time partition gets the next version
(one counter for both spaces); a target holds what its sources held as IoTDB answers,
under the time and version of its first. So beside its sources it outranks that first
source (same version, higher compaction count) and is outranked by the later ones
(higher versions); an unsequence file outranks a sequence file. Which file holds which
point follows from the flushes: each ``FLUSH`` here seals one file per group. The values
alone would not show the target's rank over its namesake: wherever both hold a point
the namesake's value is the target's, or a later source's outranks both; the partition
each row lands in does show it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploy_helpers import Deployment
from iotdb_helpers import (
    Points,
    Rows,
    copy_files,
    insert_flush,
    iotdb_answer,
    load_table,
    point_sender_at,
    rows_of,
    sealed_files,
)
from iotdb_server import RELEASES, V3_RELEASE, V4_RELEASE, IoTDBClient, IoTDBServer

from spark_loader import read_arrow

DEVICES = {"d1": ("s1", "s2"), "d2": ("s1",)}
# (times, value base) of each flush, in order: three sequence files, then three
# unsequence files overwriting them and each other (every insert writes every series).
SEQUENCE = ((range(10, 20), 100), (range(20, 30), 200), (range(30, 40), 300))
UNSEQUENCE = ((range(15, 25), 400), (range(18, 22), 500), (range(22, 34), 600))
LATE = 100  # the time of the point whose flush starts 0.12's compaction
LEVEL = 3  # the files a level holds when the compaction runs
COMPACTION_WAIT = 90.0


@dataclass(frozen=True)
class Plan:
    """How a release is held from compacting while the sources are written, then made to
    compact them."""

    release: str
    # Its two storage groups (under ``root.sg``, which 0.12's answer, a path prefix,
    # covers): the first's rounds ship the sources first, the other's the targets first.
    groups: tuple[str, str]
    hold: dict[str, str]  # the server's settings while the sources are written
    compact: dict[str, str]  # ... and once they are copied (a restart applies them)
    # Statements that apply ``compact`` without a restart (then none happens).
    apply: tuple[str, ...]
    # Whether the flush of a later point (LATE) must start the compaction.
    late: bool
    # A log line each compaction writes once it is done.
    done_line: str

    @property
    def series(self) -> dict[str, tuple[str, ...]]:
        return {f"{g}.{d}": ms for g in self.groups for d, ms in DEVICES.items()}


PLANS = (
    Plan(
        V3_RELEASE,
        groups=("root.sg.a", "root.sg.b"),
        hold={
            "seq_file_num_in_each_level": "100",
            "unseq_file_num_in_each_level": "100",
            "unseq_level_num": "2",
            "enable_unseq_compaction": "false",
        },
        compact={
            "seq_file_num_in_each_level": str(LEVEL),
            "unseq_file_num_in_each_level": str(LEVEL),
            "unseq_level_num": "2",
            "enable_unseq_compaction": "false",
        },
        apply=(),
        late=True,
        done_line="TsFiles to next level, and start to delete old files",
    ),
    Plan(
        V4_RELEASE,
        groups=("root.sg.c", "root.sg.d"),
        hold={
            "enable_seq_space_compaction": "false",
            "enable_unseq_space_compaction": "false",
            "enable_cross_space_compaction": "false",
            "compaction_schedule_interval_in_ms": "1000",
            "inner_compaction_candidate_file_num": str(LEVEL),
            "data_region_group_extension_policy": "CUSTOM",
            "default_data_region_group_num_per_database": "1",
        },
        compact={},
        apply=(
            'SET CONFIGURATION "enable_seq_space_compaction"="true" '
            '"enable_unseq_space_compaction"="true"',
        ),
        late=False,
        done_line="InnerSpaceCompaction task finishes successfully",
    ),
)

Name = tuple[int, int, int, int]  # time, version, inner and cross compaction counts
Holding = tuple[bool, frozenset[int]]  # unsequence?, the times it holds (every device)
Placed = dict[tuple[str, int], str]  # (device, time) -> the file name holding its row


def _fields(name: str) -> Name:
    t, version, inner, cross = (int(f) for f in name.split(".")[0].split("-"))
    return t, version, inner, cross


def _insert(
    client: IoTDBClient, plan: Plan, points: Points, times: range, base: int
) -> frozenset[int]:
    """Every series at ``times`` (value ``base + t``), then ``FLUSH``: a sealed file per
    group."""
    return insert_flush(client, plan.series, points, times, base)


def _write(server: IoTDBServer, plan: Plan) -> tuple[Points, list[frozenset[int]]]:
    """Every flush of SEQUENCE then UNSEQUENCE; the points IoTDB's answer must hold and
    the times each flush wrote."""
    points: Points = {}
    with server.client() as client:
        create = "SET STORAGE GROUP TO" if server.release.standalone else "CREATE DATABASE"
        for group in plan.groups:
            client.sql(f"{create} {group}")
        for device, measurements in plan.series.items():
            for m in measurements:
                client.sql(f"CREATE TIMESERIES {device}.{m} WITH DATATYPE=INT64, ENCODING=RLE")
        flushed = [_insert(client, plan, points, t, base) for t, base in SEQUENCE + UNSEQUENCE]
    return points, flushed


def _of(group: str, files: dict[str, Path]) -> dict[str, Path]:
    """The files of one storage group (``<space>/<group>/...``)."""
    return {rel: p for rel, p in files.items() if Path(rel).parts[1] == group}


def _tsfiles(files: dict[str, Path]) -> dict[str, str]:
    """File name -> path relative to the data folder, of the ``.tsfile`` among ``files``
    (of one group: the names of two groups may be alike)."""
    return {Path(rel).name: rel for rel in files if rel.endswith(".tsfile")}


def _target_name(named_after: str) -> str:
    """A target's name: its namesake source's time and version, the inner (0.12: merge)
    count raised by one; the cross count stays (no source here has one)."""
    t, version, inner, cross = _fields(named_after)
    return f"{t}-{version}-{inner + 1}-{cross}.tsfile"


@dataclass
class Space:
    """What one storage group went through: its sources and targets (copies), which
    file holds which times, and the rows IoTDB answers before and after."""

    group: str
    targets_first: bool  # the order of its rounds
    sources: dict[str, Path]
    targets: dict[str, Path]
    # (target, the source whose name it took) of the sequence and unsequence spaces
    named: tuple[tuple[str, str], tuple[str, str]]
    holds: dict[str, Holding]
    before: Rows
    expected: Rows

    def expect(self, live: set[str]) -> Placed:
        """For each (device, time), the file whose value IoTDB returns among ``live``:
        unsequence over sequence, then the higher version, then the higher compaction
        counts (a target beside the source whose name it took)."""
        holdings = {n: self.holds[n] for n in live}
        out: Placed = {}
        for device in DEVICES:
            for t in sorted(frozenset[int]().union(*(ts for _, ts in holdings.values()))):
                holders = [n for n, (_, ts) in holdings.items() if t in ts]
                out[(f"{self.group}.{device}", t)] = max(
                    holders, key=lambda n: (holdings[n][0], *_fields(n)[1:])
                )
        return out

    @property
    def source_names(self) -> set[str]:
        return set(_tsfiles(self.sources))

    @property
    def target_names(self) -> set[str]:
        return set(_tsfiles(self.targets))


def _rows_of(group: str, rows: Rows) -> Rows:
    return {k: v for k, v in rows.items() if k[0].startswith(group + ".")}


def _space(
    plan: Plan,
    group: str,
    sources: dict[str, Path],
    after: dict[str, Path],
    flushed: list[frozenset[int]],
    rows: tuple[Rows, Rows],
) -> Space:
    """One group's files before and after, checked to be one inner compaction per space:
    a target per space, named after a source of its space with the inner compaction
    count raised, and the sources deleted."""
    names = _tsfiles(sources)
    by_version = sorted(names, key=lambda n: _fields(n)[1])
    kinds = [names[n].startswith("unsequence/") for n in by_version]
    assert kinds == [False] * len(SEQUENCE) + [True] * len(UNSEQUENCE), sources
    seq, unseq = by_version[: len(SEQUENCE)], by_version[len(SEQUENCE) :]
    named_seq = (_target_name(seq[0]), seq[0])
    named_unseq = (_target_name(unseq[0]), unseq[0])
    after_names = _tsfiles(after)
    assert set(after_names) == {named_seq[0], named_unseq[0]}, after  # the sources are gone
    assert after_names[named_seq[0]].startswith("sequence/")
    assert after_names[named_unseq[0]].startswith("unsequence/")
    holds: dict[str, Holding] = {
        name: (u, times) for name, u, times in zip(by_version, kinds, flushed, strict=True)
    }
    for (target, _), u in ((named_seq, False), (named_unseq, True)):
        holds[target] = (u, frozenset[int]().union(*(t for k, t in holds.values() if k == u)))
    if plan.late:  # its file was a source too, compacted as soon as it was sealed
        holds[named_seq[0]] = (False, holds[named_seq[0]][1] | {LATE})
    return Space(
        group,
        group != plan.groups[0],
        sources,
        after,
        (named_seq, named_unseq),
        holds,
        _rows_of(group, rows[0]),
        _rows_of(group, rows[1]),
    )


def _compact(plan: Plan, server: IoTDBServer, points: Points, sources: set[str]) -> None:
    """Make the server compact, and wait until no source is left and every target is
    sealed (two per group)."""
    if plan.apply:
        with server.client() as client:
            for statement in plan.apply:
                client.sql(statement)
    else:
        server.stop()
        server.properties = plan.compact
        server.start()
    if plan.late:
        with server.client() as client:
            _insert(client, plan, points, range(LATE, LATE + 1), 0)
    deadline = time.monotonic() + COMPACTION_WAIT
    while True:
        now = {rel for rel in sealed_files(server.data_dir) if rel.endswith(".tsfile")}
        if len(now) == 2 * len(plan.groups) and not now & sources:
            return
        assert time.monotonic() < deadline, f"no compaction: {sorted(now)}\n" + server.log_tail()
        time.sleep(0.5)


def _observe(plan: Plan, home: Path) -> list[Space]:
    """Run the release: write the sources, copy them, compact, copy the targets; check
    that IoTDB answers the reference before and after and that the compactions ran."""
    server = IoTDBServer(RELEASES[plan.release], home / "iotdb", properties=plan.hold)
    server.start()
    try:
        points, flushed = _write(server, plan)
        before = rows_of(points)
        assert iotdb_answer(server) == before
        sources = copy_files(sealed_files(server.data_dir), home / "sources")
        _compact(plan, server, points, {rel for rel in sources if rel.endswith(".tsfile")})
        after = copy_files(sealed_files(server.data_dir), home / "after")
        answer = iotdb_answer(server)
        log = "\n".join(
            server.log_path(node).read_text(errors="replace")
            for node in server.release.nodes
            if server.log_path(node).is_file()
        )
    finally:
        server.stop()
    expected = rows_of(points)
    assert answer == expected  # the reference reads IoTDB as IoTDB does
    assert log.count(plan.done_line) == 2 * len(plan.groups), log[-3000:]
    return [
        _space(plan, g, _of(g, sources), _of(g, after), flushed, (before, expected))
        for g in plan.groups
    ]


def _round(dep: Deployment, tmp_path: Path) -> dict[str, tuple[Rows, Placed]]:
    """Every sender sends its edge folder (all at once, as edge nodes do), then one
    load; per sender, the table's rows and the file each row's partition belongs to."""
    with ThreadPoolExecutor(len(dep.senders)) as pool:
        for sent in pool.map(lambda s: s.send(), dep.senders):
            assert sent.returncode == 0, sent.stderr
    table = read_arrow(load_table(dep, tmp_path))
    out: dict[str, tuple[Rows, Placed]] = {s.uuid: ({}, {}) for s in dep.senders}
    for row in table.to_pylist():
        rows, placed = out[row["sender"]]
        key = (row["device"], row["time"])
        assert key not in rows, f"{key} twice in the table"
        rows[key] = {m: row[m] for m in ("s1", "s2") if row.get(m) is not None}
        placed[key] = Path(row["source_file"]).name
    return out


@pytest.mark.slow
def test_the_table_holds_what_iotdb_answers_across_an_inner_space_compaction(
    tmp_path: Path,
    start_deployment: Callable[..., Deployment],
) -> None:
    spaces = [s for plan in PLANS for s in _observe(plan, tmp_path / plan.release)]

    dep = start_deployment(senders=len(spaces))
    edges = [tmp_path / f"edge-{s.group}" for s in spaces]
    for i, edge in enumerate(edges):
        point_sender_at(dep, edge, index=i)
    senders = [s.uuid for s in dep.senders]
    loads = tmp_path / "loads"
    loads.mkdir()

    # before, or the targets alone (as if the round of the sources had failed)
    for space, edge in zip(spaces, edges, strict=True):
        copy_files(space.targets if space.targets_first else space.sources, edge)
    got = _round(dep, loads)
    for space, sender in zip(spaces, senders, strict=True):
        if space.targets_first:
            assert got[sender] == (space.expected, space.expect(space.target_names))
        else:
            assert got[sender] == (space.before, space.expect(space.source_names))

    # mid-way: the sealed targets beside their sources, reached from either side
    for space, edge in zip(spaces, edges, strict=True):
        copy_files(space.sources if space.targets_first else space.targets, edge)
    got = _round(dep, loads)
    for space, sender in zip(spaces, senders, strict=True):
        rows, placed = got[sender]
        live = space.source_names | space.target_names
        assert (rows, placed) == (space.expected, space.expect(live)), space.group
        # each target outranks the source whose name it took: the rows that source
        # would give without its target are the target's
        for target, namesake in space.named:
            given = space.expect(live - {target})
            theirs = [k for k, n in given.items() if n == namesake]
            assert theirs and all(placed[k] == target for k in theirs), (target, namesake)

    # after: the sources deleted, every row from a target
    for space, edge in zip(spaces, edges, strict=True):
        for rel in space.sources:
            (edge / rel).unlink()
    got = _round(dep, loads)
    for space, sender in zip(spaces, senders, strict=True):
        rows, placed = got[sender]
        assert (rows, placed) == (space.expected, space.expect(space.target_names))
        assert set(placed.values()) == space.target_names
