"""``load --full``: the new table is built beside the old one and swapped in whole.

Removing every partition and ingesting again left readers an empty, then a growing
table for the whole rebuild (over a minute with 80 M rows). Instead the rebuild
writes a complete table into a sibling folder, ``.<name>.sealsync-full`` (hidden, on
the same file system), and then exchanges the two folders with one
``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+; ext4, xfs, btrfs, tmpfs...): at every
instant ``<table_path>`` is the old table or the new one. The old one, now at the
sibling's name, is renamed away and removed a few seconds later (:func:`_discard`).

Where the exchange is not available (another kernel or file system, or
``SEALSYNC_NO_RENAME_EXCHANGE=1``, which tests use), two renames do it: the old
table to ``.<name>.sealsync-old``, the new one into place. Between them, a moment,
``<table_path>`` does not exist: a reader gets "not found".

Either way a reader whose walk of the folder tree straddles the swap lists the old
table's partitions and descends into the new one's: it gets "file not found", or,
from pyarrow (which skips folders that vanish under its walk), the rows of only the
partitions both tables have. No folder swap can prevent that; what it guarantees is
that ``<table_path>`` is another folder (inode) after it, so a reader that checks the
inode before and after its query knows to retry (docs/design.md §6.1).

Crash safety, checked by :func:`recover` at the start of every run (under the
loader's locks): a build folder left by a killed run is removed (the old table was
never touched); an ``-old`` folder is removed if the table is there, and renamed
back if a crash fell between the two fallback renames.

A reader that keeps a folder of the old table open for longer than the grace period
would see it emptied.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

from sealsync import durable, libc

BUILD_SUFFIX = ".sealsync-full"
OLD_SUFFIX = ".sealsync-old"
NO_EXCHANGE_ENV = "SEALSYNC_NO_RENAME_EXCHANGE"
#: How long the old table is kept (under another name) after the swap, for readers
#: that were listing it at that moment.
GRACE_SECONDS = 5.0


def build_path(table: Path) -> Path:
    """Where ``--full`` builds the new table: a hidden sibling of ``table``."""
    return table.parent / f".{table.name}{BUILD_SUFFIX}"


def old_path(table: Path) -> Path:
    """Where the fallback parks the old table between its two renames."""
    return table.parent / f".{table.name}{OLD_SUFFIX}"


def recover(table: Path) -> list[str]:
    """Undo what a killed ``--full`` left; returns what was done, for the report."""
    done = []
    build, old = build_path(table), old_path(table)
    if old.exists():
        if table.exists():
            _remove(old)
            done.append(f"removed the old table {old} a full rebuild left")
        else:  # killed between the fallback's two renames: the old table goes back
            durable.rename(old, table)
            done.append(f"restored the table from {old} (a full rebuild was interrupted)")
    if build.exists():
        _remove(build)
        done.append(f"removed the unfinished full rebuild {build}")
    for leftover in sorted(table.parent.glob(f".{table.name}{OLD_SUFFIX}-*")):
        _remove(leftover)
        done.append(f"removed the old table {leftover} a full rebuild left")
    return done


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Exchange two paths atomically; False if this system cannot (no error raised)."""
    if os.environ.get(NO_EXCHANGE_ENV) == "1":
        return False
    return libc.renameat2(a, b, libc.RENAME_EXCHANGE)


def swap_in(build: Path, table: Path, grace: float = GRACE_SECONDS) -> bool:
    """Put the finished table at ``build`` in ``table``'s place and remove the old one
    ``grace`` seconds later.

    Returns True if the swap was atomic (RENAME_EXCHANGE), False for the fallback.
    """
    atomic = table.exists() and _renameat2_exchange(build, table)
    if atomic:
        durable.fsync_dir(table.parent)
        _discard(build, table, grace)  # the old table, now at the build's name
        return True
    old = old_path(table)
    if table.exists():
        durable.rename(table, old)
    try:
        durable.rename(build, table)
    except BaseException:
        if old.exists() and not table.exists():
            durable.rename(old, table)  # the old table serves on
        raise
    _discard(old, table, grace)
    return False


def _discard(folder: Path, table: Path, grace: float) -> None:
    """Remove the old table after ``grace`` seconds, renamed to a name of its own.

    A reader that opened one of its folders just before the swap (a directory listing
    is an open, then reads) would list what is left of it while it is being deleted:
    a partition folder emptied under it, rows silently missing. Kept a moment, the
    old table stays whole for such a reader, whose later opens by path land in the
    new table and fail ("not found": it retries) rather than mix.
    """
    graveyard = table.parent / f".{table.name}{OLD_SUFFIX}-{uuid.uuid4().hex}"
    durable.rename(folder, graveyard)
    time.sleep(grace)
    _remove(graveyard)


def link_tree(src: Path, dst: Path) -> None:
    """Copy a partition folder into the new table by hard links (Parquet part files
    are never modified, so sharing them is safe); a plain copy across devices."""
    for here, _dirs, files in os.walk(src):
        target = dst / Path(here).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(Path(here) / name, target / name)
            except OSError:
                shutil.copy2(Path(here) / name, target / name)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        shutil.rmtree(path)  # what could not go: raise, naming it
    durable.fsync_dir(path.parent)
