"""One row per (device, time): the answer IoTDB gives from a sender's live files.

IoTDB keeps one value per (series, time). When several live files hold a point, a
query returns the value of the file of highest priority
(:func:`sealsync.formats.tsfile_names.priority`, from the names IoTDB gives its files);
inside one file a later chunk wins (our readers already resolve that).

**How the table holds it.** Each file keeps its own partition. The live files of a
sender whose (device, time) bounds overlap, transitively, form a *group*; a file
overlapping no other is alone and its partition holds all its points, as it always
did. A group's files are read together and resolved per (device, time, measurement)
by the priority above (an absent value never hides a present one); each resolved row
is written into the partition of the highest-priority file contributing to it. The
data files of a partition written that way carry Delta tags (:data:`.table_layout.GROUP_TAG`,
:data:`.table_layout.BOUNDS_TAG`): the ids of its group and the bounds of its file's own
points (the partition may hold fewer); a file that wins no row keeps an empty data
file with them, so its partition keeps its place.

**When a group is rewritten.** After each run's removals and ingest, for every sender
whose files changed (new, new ``.mods``/``.mods2``, removed), the groups are worked out
again from the partitions' bounds (the tags', else the log's statistics, else the
Parquet footers': no data read); a group whose members' tags do not all name exactly
its members is read from the source files and rewritten, its partitions' files
replaced in the run's one commit. So a file that leaves takes its points out unless
another live file holds them: the group left behind is read again. The senders still
to resolve are recorded in the state dir before anything changes and forgotten once
the run's commit is in, so a run killed at any point is completed by the next one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealsync import durable
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from sealsync.formats.tsfile_names import priority as priority  # the loader's order
from spark_loader.discovery import SourceFile
from spark_loader.table import Partition, Table
from spark_loader.table_layout import BOUNDS_TAG, GROUP_TAG, KEY_COLUMN

#: The senders whose groups a run must settle, in the state dir.
PENDING = "resolve-pending.json"
_PRIORITY_COLUMN = "__sealsync_priority"
_GROUP_COLUMN = "__sealsync_group"

#: (first device, last device, first time, last time) of a file's points.
Bounds = tuple[str, str, int, int]


@dataclass
class Member:
    """A live file with a partition: its place, bounds (None: no points) and the group
    its partition was resolved in (None: written alone)."""

    source: SourceFile
    partition: Partition
    bounds: Bounds | None
    group: list[str] | None


def read_member(source: SourceFile, partition: Partition) -> Member:
    tags = partition.tags
    if GROUP_TAG not in tags:
        bounds = stats_bounds([f.stats for f in partition.files])
        if bounds is None:
            bounds = footer_bounds([partition.store.footer(f.path) for f in partition.files])
        return Member(source, partition, bounds, None)
    bounds = json.loads(tags.get(BOUNDS_TAG) or "null")
    return Member(
        source,
        partition,
        None if bounds is None else (bounds[0], bounds[1], int(bounds[2]), int(bounds[3])),
        [str(g) for g in json.loads(tags[GROUP_TAG])],
    )


def stats_bounds(stats: list[str | None]) -> Bounds | None:
    """The (device, time) bounds of a partition's files from the log's statistics;
    None if a file has rows and no bounds there (then its footers tell)."""
    found: Bounds | None = None
    for text in stats:
        doc = json.loads(text) if text else {}
        if doc.get("numRecords") == 0:
            continue
        low, high = doc.get("minValues") or {}, doc.get("maxValues") or {}
        if not all(c in d for d in (low, high) for c in (DEVICE_COLUMN, TIME_COLUMN)):
            return None
        b = (
            str(low[DEVICE_COLUMN]),
            str(high[DEVICE_COLUMN]),
            int(low[TIME_COLUMN]),
            int(high[TIME_COLUMN]),
        )
        found = (
            b
            if found is None
            else (
                min(found[0], b[0]),
                max(found[1], b[1]),
                min(found[2], b[2]),
                max(found[3], b[3]),
            )
        )
    return found


def footer_bounds(footers: list[Any]) -> Bounds | None:
    """The (device, time) bounds of a partition's files from their footers' statistics;
    a column without statistics gives the widest bounds."""
    found: Bounds | None = None
    for meta in footers:
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        for r in range(meta.num_row_groups):
            group = meta.row_group(r)
            if group.num_rows == 0:
                continue
            stats = {n: group.column(i).statistics for i, n in enumerate(names)}
            dev, tim = stats.get(DEVICE_COLUMN), stats.get(TIME_COLUMN)
            lo_d, hi_d = ("", "\U0010ffff")
            lo_t, hi_t = (-(1 << 63), (1 << 63) - 1)
            if dev is not None and dev.has_min_max:
                lo_d, hi_d = _text(dev.min), _text(dev.max)
            if tim is not None and tim.has_min_max:
                lo_t, hi_t = int(tim.min), int(tim.max)
            if found is None:
                found = (lo_d, hi_d, lo_t, hi_t)
            else:
                found = (
                    min(found[0], lo_d),
                    max(found[1], hi_d),
                    min(found[2], lo_t),
                    max(found[3], hi_t),
                )
    return found


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _overlap(a: Bounds, b: Bounds) -> bool:
    return a[0] <= b[1] and b[0] <= a[1] and a[2] <= b[3] and b[2] <= a[3]


def groups(members: list[Member]) -> list[list[Member]]:
    """The members joined by overlapping bounds, transitively (a sweep over time)."""
    parent = list(range(len(members)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    placed = sorted(
        (i for i, m in enumerate(members) if m.bounds is not None),
        key=lambda i: members[i].bounds[2],  # type: ignore[index]
    )
    active: list[int] = []
    for i in placed:
        b = members[i].bounds
        assert b is not None
        active = [j for j in active if members[j].bounds[3] >= b[2]]  # type: ignore[index]
        for j in active:
            if _overlap(b, members[j].bounds):  # type: ignore[arg-type]
                parent[root(i)] = root(j)
        active.append(i)
    out: dict[int, list[Member]] = {}
    for i, m in enumerate(members):
        out.setdefault(root(i), []).append(m)
    return list(out.values())


def stale(group: list[Member]) -> bool:
    """Whether a group's partitions are not the resolved answer of exactly its files."""
    ids = sorted(m.source.file_id for m in group)
    if len(group) == 1 and group[0].group is None:
        return False
    return any(m.group != ids for m in group)


def resolved_frame(df: Any, ranks: dict[int, int], sets: dict[int, int], target: Any) -> Any:
    """``df`` (rows of several files, by key) as one row per group (``sets``: key ->
    group) and (device, time): each measurement from the highest-ranked file holding
    it, the row's key that of the highest-ranked file holding the (device, time)."""
    from pyspark.sql import functions as F

    def lookup(mapping: dict[int, int]) -> Any:
        pairs = [F.lit(x) for key, value in sorted(mapping.items()) for x in (key, value)]
        return F.element_at(F.create_map(*pairs), F.col(KEY_COLUMN))

    df = df.withColumn(_PRIORITY_COLUMN, lookup(ranks)).withColumn(_GROUP_COLUMN, lookup(sets))
    keys = {TIME_COLUMN, DEVICE_COLUMN}
    aggs = []
    for field in target.fields:
        if field.name in keys:
            continue
        col = F.col("`" + field.name.replace("`", "``") + "`")
        if field.name == KEY_COLUMN:
            aggs.append(F.max_by(col, F.col(_PRIORITY_COLUMN)).alias(field.name))
        else:
            held = F.when(col.isNotNull(), F.col(_PRIORITY_COLUMN))
            aggs.append(F.max_by(col, held).alias(field.name))
    out = df.groupBy(_GROUP_COLUMN, TIME_COLUMN, DEVICE_COLUMN).agg(*aggs)
    names = ["`" + f.name.replace("`", "``") + "`" for f in target.fields]
    tasks = max(1, min(len(ranks), df.sparkSession.sparkContext.defaultParallelism))
    return out.select(*names).repartition(tasks, KEY_COLUMN).sortWithinPartitions(KEY_COLUMN)


# ---------------------------------------------------------------- pending senders


def pending(state_dir: Path) -> set[str]:
    try:
        return set(json.loads((state_dir / PENDING).read_text(encoding="utf-8")))
    except FileNotFoundError:
        return set()


def mark_pending(state_dir: Path, senders: Iterable[str]) -> set[str]:
    """Record (durably) that these senders' groups must be settled; all recorded."""
    now = pending(state_dir) | set(senders)
    if now:
        durable.atomic_write(state_dir / PENDING, json.dumps(sorted(now)))
    return now


def clear_pending(state_dir: Path) -> None:
    (state_dir / PENDING).unlink(missing_ok=True)


# ---------------------------------------------------------------- the rewrite


def stale_groups(
    table: Table,
    senders: set[str],
    wanted: dict[str, SourceFile],
    force: frozenset[str] = frozenset(),
) -> list[list[Member]]:
    """The groups of ``senders``' live files whose partitions must be rewritten, and
    those holding a file of ``force`` (rows a TTL expired since: :mod:`.expiry`)."""
    by_sender: dict[str, list[Member]] = {}
    for fid, partition in table.partitions().items():
        source = wanted.get(fid)
        if source is None or source.sender not in senders:
            continue  # a file kept without its source stays as it is
        by_sender.setdefault(source.sender, []).append(read_member(source, partition))
    out = []
    for sender in sorted(by_sender):
        out += [
            g
            for g in groups(by_sender[sender])
            if stale(g) or any(m.source.file_id in force for m in g)
        ]
    return out


def group_tags(member: Member, ids: list[str], won: Bounds | None = None) -> dict[str, str]:
    """The tags of a resolved partition's files: its group's ids, its file's bounds
    (widened to the rows it ``won``: a TTL lifted brings back points its first write
    left out, and the bounds must cover every point the table holds)."""
    found = member.bounds if won is None else _union(member.bounds, won)
    bounds = None if found is None else list(found)
    return {GROUP_TAG: json.dumps(ids), BOUNDS_TAG: json.dumps(bounds)}


def _union(a: Bounds | None, b: Bounds) -> Bounds:
    if a is None:
        return b
    return (min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3]))


def replace_partitions(
    table: Table,
    staging: str,
    keyed: list[tuple[int, Member]],
    ids: dict[str, list[str]],
    extra: dict[str, str] | None = None,
) -> None:
    """Each member's partition replaced (at the run's commit) by what the rewrite wrote
    for it, tagged with its group (``ids``: file id -> the group's ids) and ``extra``
    (the TTL it was filtered with); a member that wins no row keeps an empty file, so
    that its partition keeps its place."""
    for key, member in keyed:
        table.delete(member.partition)
        folder = table.store.join(staging, f"{KEY_COLUMN}={key}")
        group = ids[member.source.file_id]
        tags = dict(extra or {})
        if len(group) > 1 or member.group is not None:  # a file alone stays alone
            won = None  # under a TTL, what the rewrite gave it may lie outside its bounds
            if extra:
                won = footer_bounds([table.store.footer(p) for p in table.part_files(folder)])
            tags.update(group_tags(member, group, won))
        table.move_in(folder, member.partition, tags)


Rewrite = Callable[[list[list[Member]]], bool]


def settle(
    table: Table,
    state_dir: Path | None,
    senders: set[str],
    wanted: dict[str, SourceFile],
    rewrite: Rewrite,
    say: Callable[[str], None],
    force: frozenset[str] = frozenset(),
) -> tuple[int, int]:
    """Rewrite every stale group of ``senders``; forget them once all are settled (with
    a ``state_dir``; else the caller does, once the run's commit is in).

    Returns how many groups were rewritten, and how many were stale. A group that could
    not be read stays as it was and stays pending (``rewrite`` reported why); the others
    are rewritten alone.
    """
    todo = stale_groups(table, senders, wanted, force)
    if todo:
        files = sum(len(g) for g in todo)
        say(f"resolving {len(todo)} groups of overlapping files ({files} files)")
    if not todo:
        done = 0
    elif rewrite(todo):  # one job for all: the common case
        done = len(todo)
    else:  # one group's file could not be read: the others still go
        done = sum(1 for g in todo if len(todo) > 1 and rewrite([g]))
    if state_dir is not None and done == len(todo):
        clear_pending(state_dir)
    return done, len(todo)
