"""Hard links of a round's new files, so that a merge or TTL cannot break the round.

(docs/design.md §3.4, as in IoTDB's old sync tool.) A file that vanished before it was
linked is dropped from the round (the next scan decides its fate). The snapshot is
disposable: recovery deletes it after any crash, so the links are not fsynced.

Only regular files are placed: a link is made to the directory entry itself (never
following a symbolic link) and checked after it is made, so a file swapped for a
symlink after the scan is dropped rather than shipped.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Set
from pathlib import Path
from typing import NamedTuple

from sealsync import durable
from sealsync.crashpoints import crash_point
from sealsync.errors import BadName
from sealsync.names import data_name_problem

LinkFunc = Callable[[str, str], None]

# Hard links impossible here: another file system, a file system without hard links or
# protected_hardlinks refusing a file the sender does not own, the link count at its limit.
_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK})


def hard_link(src: str, dst: str) -> None:
    os.link(src, dst, follow_symlinks=False)


def copy_file(src: str, dst: str) -> None:
    shutil.copy2(src, dst, follow_symlinks=False)


class _Gone(Exception):
    """The source vanished or is not a regular file: the file leaves this round."""


# ``.mods2``: IoTDB 2.x's deletions, shipped as ``.mods`` is. Its ``.compaction.mods2``
# is not: IoTDB writes each of its entries to the file's own ``.mods2`` too
# (sealsync.formats.mods2).
_PIECES = (("", True), (".resource", True), (".mods", False), (".mods2", False))


def pieces(mods: bool = True) -> tuple[tuple[str, bool], ...]:
    """A file's pieces in the snapshot: each suffix, and whether the file cannot go
    without it. ``mods=False``: the file has no ``.mods``/``.mods2`` here, so none is
    looked for."""
    return _PIECES if mods else _PIECES[:2]


def snapshot_path(snapshot_dir: str | os.PathLike[str], name: str) -> str:
    """Where ``take_snapshot`` put the data file ``name``.

    A string, not a Path: the sender opens every file it ships through here, on the
    round's serial path, where building Path objects was most of this call's cost."""
    problem = data_name_problem(name)
    if problem is not None:
        raise BadName(problem)
    return os.path.join(snapshot_dir, name)


class Placed(NamedTuple):
    """A file as the snapshot holds it, seen as it was placed. The round needs these;
    looking them up again cost a failing system call per file without a ``.mods``,
    three times over, on the round's serial path."""

    size: int
    """The data file's."""
    stream_size: int
    """The data file's, its ``.resource``'s and its ``.mods``'s/``.mods2``'s, as they are
    streamed."""
    has_mods: bool


def take_snapshot(
    data_dir: Path,
    snapshot_dir: Path,
    names: Iterable[str],
    *,
    with_mods: Set[str] | None = None,
    link: LinkFunc = hard_link,
) -> dict[str, Placed]:
    """Link each data file with its ``.resource`` and, if any, ``.mods``; the files
    linked, by name, in name order.

    ``with_mods``: the names the scan saw a ``.mods`` or ``.mods2`` for (None: look for
    them at every file). A ``.mods`` is looked for only there: the link that finds none is a failed
    system call per file on the round's serial path. One that appears after the scan
    is shipped by the next round, as a ``.mods`` that changed (docs/design.md §3.7).

    ``link`` is the placing function (a test injects one that fails with EXDEV). After
    the first EXDEV (the snapshot folder is on another file system), or EPERM/EMLINK,
    the rest of the round copies instead.
    """
    base = os.fspath(data_dir)
    snap = os.fspath(snapshot_dir)
    # recovery removed the last round's snapshot before this one: a folder still there
    # is one whose removal was lost, and only then can an entry be stale
    placer = _Placer(link, stale_possible=os.path.lexists(snap))
    made: set[str] = set()
    linked: dict[str, Placed] = {}
    for name in names:
        problem = data_name_problem(name)
        if problem is not None:
            raise BadName(problem)
        src = os.path.join(base, name)
        dst = os.path.join(snap, name)
        folder = os.path.dirname(dst)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        placed = placer.place_file(src, dst, with_mods is None or name in with_mods)
        if placed is not None:
            linked[name] = placed
            crash_point("sender.snapshot.linked")
    return {name: linked[name] for name in sorted(linked)}


def drop_from_snapshot(snapshot_dir: Path, names: Iterable[str], without_mods: Set[str]) -> None:
    """Remove the links of files that need no more sending (verified, and logged so):
    recovery's clean-up then has only the folders left to remove, so the round's end,
    where nothing else runs, does not wait for an unlink per piece. Best effort: what
    stays is removed by that clean-up."""
    snap = os.fspath(snapshot_dir)
    for name in names:
        path = os.path.join(snap, name)
        for suffix, _ in pieces(name not in without_mods):
            try:
                os.unlink(path + suffix)
            except OSError:
                pass


class _Placer:
    def __init__(self, link: LinkFunc, stale_possible: bool = True) -> None:
        self._link = link
        self._stale_possible = stale_possible

    def place_file(self, src: str, dst: str, mods: bool = True) -> Placed | None:
        placed: list[str] = []
        sizes: list[int] = []
        try:
            for suffix, required in pieces(mods):
                try:
                    sizes.append(self._place(src + suffix, dst + suffix))
                except _Gone:
                    if required:
                        raise
                    continue
                placed.append(dst + suffix)
        except _Gone:
            for path in placed:
                durable.unlink(path)
            return None
        return Placed(sizes[0], sum(sizes), len(sizes) > 2)

    def _place(self, src: str, dst: str, stale_removed: bool = False) -> int:
        """Place one piece; its size."""
        # A stale entry (from a round whose clean-up was lost) goes only once the link
        # says one is there: unlinking every name first cost a failed system call per
        # piece of every file, on the round's serial path. A copy never writes into an
        # existing entry: a stale one may be a link to the original itself.
        if self._link is copy_file:
            durable.unlink(dst)
        try:
            self._link(src, dst)
        except FileNotFoundError:
            if self._stale_possible:
                durable.unlink(dst)  # no stale sidecar may stand in for a missing one
            raise _Gone from None
        except FileExistsError:
            if stale_removed:  # made again meanwhile: not ours to remove twice
                raise
            durable.unlink(dst)
            return self._place(src, dst, stale_removed=True)
        except OSError as exc:
            if exc.errno not in _NO_LINK or self._link is copy_file:
                raise
            self._link = copy_file
            return self._place(src, dst)
        try:
            st = os.lstat(dst)
        except FileNotFoundError:
            raise _Gone from None
        if not stat.S_ISREG(st.st_mode):
            durable.unlink(dst)
            raise _Gone
        return st.st_size
