"""What a ``load --full`` of the plain Parquet table (before the table was Delta) may
have left beside it; the next run cleans it up before it converts the table.

The Delta table needs no swap: ``--full`` is one overwrite commit (:mod:`.ingest`).
Earlier releases built the new table in a hidden sibling, ``.<name>.sealsync-full``,
and exchanged the two folders (``renameat2(RENAME_EXCHANGE)``, else two renames
through ``.<name>.sealsync-old``), then removed the old table, renamed to
``.<name>.sealsync-old-<uuid>``, a few seconds later. A run killed in between left:

* a build folder: removed (the old table was never touched);
* an ``-old`` folder: removed if the table is there, renamed back if the kill fell
  between the two renames (the table is then missing);
* ``-old-<uuid>`` folders: removed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sealsync import durable

BUILD_SUFFIX = ".sealsync-full"
OLD_SUFFIX = ".sealsync-old"


def build_path(table: Path) -> Path:
    """Where an earlier ``--full`` built the new table: a hidden sibling of ``table``."""
    return table.parent / f".{table.name}{BUILD_SUFFIX}"


def old_path(table: Path) -> Path:
    """Where an earlier ``--full`` parked the old table between its two renames."""
    return table.parent / f".{table.name}{OLD_SUFFIX}"


def recover(table: Path) -> list[str]:
    """Undo what a killed ``--full`` of an earlier release left; what was done."""
    done = []
    build, old = build_path(table), old_path(table)
    if old.exists():
        if table.exists() and any(table.iterdir()):
            _remove(old)
            done.append(f"removed the old table {old} a full rebuild left")
        else:  # killed between the two renames: the old table goes back
            if table.exists():
                table.rmdir()  # the empty folder this run created
            durable.rename(old, table)
            done.append(f"restored the table from {old} (a full rebuild was interrupted)")
    if build.exists():
        _remove(build)
        done.append(f"removed the unfinished full rebuild {build}")
    for leftover in sorted(table.parent.glob(f".{table.name}{OLD_SUFFIX}-*")):
        _remove(leftover)
        done.append(f"removed the old table {leftover} a full rebuild left")
    return done


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        shutil.rmtree(path)  # what could not go: raise, naming it
    durable.fsync_dir(path.parent)
