"""Hard links of a round's new files, so that a merge or TTL cannot break the round.

(docs/design.md §3.4; seed 001.) A file that vanished before it was linked is dropped
from the round (the next scan decides its fate). The snapshot is disposable: recovery
deletes it after any crash, so the links are not fsynced.

Only regular files are placed: a link is made to the directory entry itself (never
following a symbolic link) and checked after it is made, so a file swapped for a
symlink after the scan is dropped rather than shipped.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

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


def snapshot_path(snapshot_dir: str | os.PathLike[str], name: str) -> str:
    """Where ``take_snapshot`` put the data file ``name``.

    A string, not a Path: the sender opens every file it ships through here, on the
    round's serial path, where building Path objects was most of this call's cost."""
    problem = data_name_problem(name)
    if problem is not None:
        raise BadName(problem)
    return os.path.join(snapshot_dir, name)


def take_snapshot(
    data_dir: Path,
    snapshot_dir: Path,
    names: Iterable[str],
    *,
    link: LinkFunc = hard_link,
) -> list[str]:
    """Link each data file with its ``.resource`` and, if any, ``.mods``; the names linked.

    ``link`` is the placing function (a test injects one that fails with EXDEV). After
    the first EXDEV (the snapshot folder is on another file system), or EPERM/EMLINK,
    the rest of the round copies instead.
    """
    placer = _Placer(link)
    base = os.fspath(data_dir)
    snap = os.fspath(snapshot_dir)
    made: set[str] = set()
    linked = []
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
        if placer.place_file(src, dst):
            linked.append(name)
            crash_point("sender.snapshot.linked")
    return sorted(linked)


class _Placer:
    def __init__(self, link: LinkFunc) -> None:
        self._link = link

    def place_file(self, src: str, dst: str) -> bool:
        placed: list[str] = []
        try:
            for suffix, required in (("", True), (".resource", True), (".mods", False)):
                try:
                    self._place(src + suffix, dst + suffix)
                except _Gone:
                    if required:
                        raise
                    continue
                placed.append(dst + suffix)
        except _Gone:
            for path in placed:
                durable.unlink(path)
            return False
        return True

    def _place(self, src: str, dst: str) -> None:
        durable.unlink(dst)  # a stale entry from a round whose cleanup was lost
        try:
            self._link(src, dst)
        except FileNotFoundError:
            raise _Gone from None
        except OSError as exc:
            if exc.errno not in _NO_LINK or self._link is copy_file:
                raise
            self._link = copy_file
            self._place(src, dst)
            return
        try:
            mode = os.lstat(dst).st_mode
        except FileNotFoundError:
            raise _Gone from None
        if not stat.S_ISREG(mode):
            durable.unlink(dst)
            raise _Gone
