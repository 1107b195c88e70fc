"""Which ``X.mods`` each synced file shipped with, so that a changed one ships again.

IoTDB records points deleted after sealing in ``X.mods``, appending to it (or creating
it) long after ``X`` was synced. The file is not deleted for that (docs/design.md §9.2); it is
shipped again, whole, through the normal verified path, and the receiver takes the
identical data file as a no-op and replaces its ``.mods`` (docs/design.md §3.7).

**The identity** of a ``.mods`` is its ``(st_size, st_mtime_ns)``. IoTDB only appends
to a ``.mods`` or replaces it whole, and either changes the size or the mtime (a
replacement also gets a new inode, which the snapshot's hard link keeps apart).

**The state.** ``shipped_mods.txt`` next to ``last_local_files.txt``: one line per
synced file that shipped with a ``.mods``, ``<name> TAB <size> TAB <mtime_ns>``,
sorted, replaced atomically. A synced file whose current ``.mods`` has another
identity, or none recorded, is selected again; a file without a ``.mods`` costs
nothing (the scan already knows which have one, and only those are ``stat``-ed).

**When the identity is taken, and why that is crash safe.** The danger is recording an
identity *newer* than the bytes the receiver got: the change in between would never
ship. Recording an *older* one (or none) only ships the file once more. So:

1. Right after the snapshot is taken, before anything is streamed, each linked
   ``.mods`` is ``lstat``-ed *in the snapshot* and the identities are written
   (atomically) to ``snapshot_mods.txt``. The link is the original's inode, which
   only grows: the bytes streamed later are these or more, never fewer, so the
   identity is never newer than what ships. A ``.mods`` replaced meanwhile keeps
   its old inode in the snapshot, so its old identity is recorded, and the new file
   differs from it. (With the copy fallback the copy keeps the source's size and
   mtime; a copy racing an append gets the old size or the new bytes, both safe.)
   Taking the identity later (at clean-up, from the link) would be wrong: an append
   after the stream would be recorded as shipped.
2. Recovery, which is also every round's clean-up, folds the round into the state
   when it folds ``sync.log`` into ``last_local_files.txt``: a name the log says
   was verified gets its ``snapshot_mods.txt`` identity (or loses its entry if it
   had no ``.mods``), a deleted name loses its entry, and entries of names no longer
   synced go. The fold is idempotent and is made durable *before* step 5 writes
   ``current_local_files.txt``: a crash before that point redoes it from the same
   ``sync.log`` and ``snapshot_mods.txt``; a crash after it finds it done.
3. ``snapshot_mods.txt`` is removed after ``sync.log`` (step 8), so a ``sync.log``
   still on disk always has its round's identities beside it; a round writes a
   fresh one (or none) after recovery removed the last, before ``sync.log`` exists.

A missing or damaged line only loses a record, which means one more shipment. After an
upgrade from a version without this file, every synced file that has a ``.mods`` ships
once more: what the receiver holds of those is not known.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path

from sealsync import durable
from sealsync.names import MODS2_SUFFIX, MODS_SUFFIX, data_name_problem, require_data_name
from sealsync.synclog import SyncLogState, read_sync_log
from sender.manage.layout import SenderPaths

log = logging.getLogger(f"sealsync.{__name__}")

MODS, MODS2 = MODS_SUFFIX, MODS2_SUFFIX

ModsId = tuple[int, int]
"""``(st_size, st_mtime_ns)`` of a ``.mods``."""


def mods_stat(path: str | os.PathLike[str]) -> os.stat_result | None:
    """``lstat`` of the ``.mods`` at ``path``; None if absent or not a regular file
    (the snapshot never ships a link or a special file as a ``.mods``)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def mods_identity(path: str | os.PathLike[str]) -> ModsId | None:
    """The identity of the ``.mods`` at ``path``; None when :func:`mods_stat` is."""
    st = mods_stat(path)
    return None if st is None else (st.st_size, st.st_mtime_ns)


def current_identities(root: str | os.PathLike[str], names: Iterable[str]) -> dict[str, ModsId]:
    """``name -> identity`` of ``<root>/<name>.mods`` and ``.mods2`` for the names that
    have either now.

    IoTDB 2.x keeps its deletions in ``X.mods2`` (binary, also only appended to or
    replaced whole): a file with one has its identity; with both (a data dir IoTDB 2.x
    took over from 1.x), the sums of their sizes and of their mtimes, which an append
    to or a replacement of either changes. A file with only a ``.mods`` keeps the
    identity it always had. ``root`` is a data dir (selection) or a snapshot folder
    (what ships). Callers pass only names the scan saw with a ``.mods`` or ``.mods2``.
    """
    base = os.fspath(root)
    out = {}
    for name in names:
        path = os.path.join(base, name)
        found = [i for i in (mods_identity(path + MODS), mods_identity(path + MODS2)) if i]
        if found:
            out[name] = (sum(i[0] for i in found), sum(i[1] for i in found))
    return out


def changed(current: Mapping[str, ModsId], shipped: Mapping[str, ModsId]) -> frozenset[str]:
    """Names whose ``.mods`` is not the one they last shipped with (or never shipped)."""
    return frozenset(name for name, ident in current.items() if shipped.get(name) != ident)


def read_identities(path: Path) -> dict[str, ModsId]:
    """``shipped_mods.txt`` or ``snapshot_mods.txt``; a missing file has no entries.

    A damaged line is skipped with a warning: the worst it costs is one shipment.
    """
    out: dict[str, ModsId] = {}
    for line in durable.read_lines(path):
        entry = _parse(line)
        if entry is None:
            log.warning("%s: ignoring a damaged line: %r", path, line[:200])
            continue
        out[entry[0]] = entry[1]
    return out


def _parse(line: str) -> tuple[str, ModsId] | None:
    parts = line.split("\t")
    if len(parts) != 3 or data_name_problem(parts[0]) is not None:
        return None
    try:
        size, mtime = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return (parts[0], (size, mtime)) if size >= 0 else None


def write_identities(path: Path, entries: Mapping[str, ModsId]) -> None:
    """Replace ``path`` atomically with ``entries``, sorted by name."""
    lines = [f"{require_data_name(n)}\t{size}\t{mtime}" for n, (size, mtime) in entries.items()]
    durable.write_lines(path, sorted(lines))


def record_snapshot(paths: SenderPaths, names: Iterable[str]) -> None:
    """Write down the identity of each ``.mods`` in this round's snapshot (point 1 of the
    module docstring); ``names``: the files it holds one for. Must run before the
    transfer can log any file of the round."""
    idents = current_identities(paths.snapshot, names)
    if idents:
        write_identities(paths.snapshot_mods, idents)
    else:
        durable.remove(paths.snapshot_mods)  # normally absent already: no fsync then


def fold(
    shipped: Mapping[str, ModsId],
    snapshot: Mapping[str, ModsId],
    round_log: SyncLogState,
    synced: AbstractSet[str],
) -> dict[str, ModsId]:
    """The state after a round: verified names take their snapshot identity (or lose
    their entry without one), and only names still ``synced`` keep entries.

    Idempotent: folding a round into a state that already holds it changes nothing.
    """
    new = set(round_log.new)
    out = {n: i for n, i in shipped.items() if n in synced and n not in new}
    out.update({n: snapshot[n] for n in new if n in snapshot and n in synced})
    return out


def effective_shipped(paths: SenderPaths, synced: AbstractSet[str]) -> dict[str, ModsId]:
    """The state recovery would leave behind, read only (``send --dry-run``, status)."""
    shipped = read_identities(paths.shipped_mods)
    if not paths.sync_log.exists():
        return shipped
    return fold(
        shipped, read_identities(paths.snapshot_mods), read_sync_log(paths.sync_log), synced
    )


def fold_round(paths: SenderPaths, round_log: SyncLogState, synced: AbstractSet[str]) -> None:
    """Point 2 of the module docstring: recovery's fold, written only if it changes."""
    shipped = read_identities(paths.shipped_mods)
    result = fold(shipped, read_identities(paths.snapshot_mods), round_log, synced)
    if result == shipped:
        return
    if result:
        write_identities(paths.shipped_mods, result)
    else:
        durable.remove(paths.shipped_mods)
