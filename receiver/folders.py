"""The receiver's own folders: made durably, tidied when emptied, never through a link.

The receiver writes, renames and deletes only inside its configured folders; these
helpers are how every part of it makes a folder there (each new entry persisted in
its parent), takes away folders a deletion emptied, and refuses a symbolic link met
on the way down from a configured folder.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from sealsync import durable


def make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents, each new entry persisted in its parent.

    A parent another thread removed meanwhile (a deletion emptied it) is made again."""
    for _ in range(8):
        missing = []
        probe = path
        while not probe.exists():
            missing.append(probe)
            probe = probe.parent
        try:
            for folder in reversed(missing):
                try:
                    folder.mkdir()
                except FileExistsError:
                    continue
                durable.fsync_dir(folder.parent)
            return
        except FileNotFoundError:
            continue  # a parent went away between the look and the mkdir
    path.mkdir()  # raises what is in the way


def remove_empty_parents(top: Path, folder: Path) -> int:
    """Remove ``folder`` and its parents below ``top`` while they are empty (``rmdir``
    refuses anything else, and never follows a link); how many went.

    A deletion that empties a folder takes it away, so shipping and deleting
    deep-named files leaves no trail of empty folders (inodes no quota counts)."""
    removed = 0
    top = Path(top)
    probe = Path(folder)
    while probe != top and probe.is_relative_to(top):
        try:
            os.rmdir(probe)
        except OSError:
            break  # not empty, gone, or not a folder: the walk up ends here
        removed += 1
        probe = probe.parent
    if removed:
        durable.fsync_dir(probe)
    return removed


def refuse_links(root: Path, path: Path) -> None:
    """Raise OSError (ELOOP, naming the link) if a component of ``path`` below ``root`` is
    a symbolic link.

    The receiver writes, renames and deletes only inside its own folders. A link planted
    inside them (by another process on the host, a careless restore, a shell) would
    carry those writes and deletes anywhere the receiver may write; so no component
    below the configured folder may be one. ``root`` itself may be (a data dir mounted
    through a link is the operator's choice). Components that do not exist yet are fine:
    the receiver creates them as real folders.
    """
    probe = Path(root)
    for part in Path(path).relative_to(root).parts:
        probe = probe / part
        try:
            mode = os.lstat(probe).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            raise OSError(
                errno.ELOOP,
                f"{probe} is a symbolic link, and the receiver follows none inside its "
                "storage: replace it with a real folder",
            )


def safe_dirs(root: Path, folder: Path) -> None:
    """``make_dirs(folder)`` after checking that nothing below ``root`` on the way is a link."""
    refuse_links(root, folder)
    make_dirs(folder)
