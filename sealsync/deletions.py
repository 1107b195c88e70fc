"""The receiver's record of the loaded files it deleted: the loader's evidence.

The Spark loader takes a file's rows out of the table only when the receiver says
the file is gone on purpose, never because a listing came back short (a typo'd
data dir, an unmounted disk, a sender folder moved by hand look exactly like
"every file deleted"). So each deletion the receiver applies is first appended
here, one fsynced line per file version, in the data dir that held the file::

    <data dir>/sync-receiver/deleted_<sender uuid>.log
    delete <size> <mtime_ns> <relative name>

``size`` and ``mtime_ns`` name the *version* deleted (the loader's file identity,
:mod:`spark_loader.discovery`): a file deleted and later shipped again under the
same name is a new version, which an old line does not condemn. A name never holds
a newline (``names.check_data_name``), so a line cannot be forged; a torn last
line (crash mid-append) is not a record (``durable.read_lines``).

The line is written *before* the file is removed: a crash in between leaves a line
for a file still there, which the loader ignores (it only looks for evidence of
files that are missing), and the replayed deletion writes it again. A replacement
needs no line: the new version is listed under the same (sender, name), which is
evidence enough that the old one's rows must go.

The log only grows (one short line per deleted file); this module owns its format.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sealsync import durable
from sealsync.errors import BadName
from sealsync.names import RECEIVER_FOLDER, check_sender_uuid

PREFIX = "deleted_"
SUFFIX = ".log"
_DELETE = "delete"


@dataclass(frozen=True)
class Deleted:
    """One version of a sender's file that the receiver deleted."""

    sender: str
    name: str
    size: int
    mtime_ns: int


def _receiver_folder(data_dir: Path) -> Path:
    """``<data dir>/sync-receiver``."""
    return Path(data_dir) / RECEIVER_FOLDER


def log_path(data_dir: Path, sender: str) -> Path:
    """Where the deletions of ``sender``'s files in ``data_dir`` are logged."""
    return _receiver_folder(data_dir) / f"{PREFIX}{check_sender_uuid(sender)}{SUFFIX}"


def is_log_name(name: str) -> bool:
    """Whether a name in ``sync-receiver/`` is a deletion log (not a sender folder)."""
    return name.startswith(PREFIX) and name.endswith(SUFFIX)


def record(data_dir: Path, sender: str, versions: Iterable[tuple[str, int, int]]) -> None:
    """Append ``(name, size, mtime_ns)`` of each version about to be deleted; on disk
    (fsynced) before it returns, so the deletion that follows is never unexplained."""
    lines = [f"{_DELETE} {size} {mtime_ns} {name}" for name, size, mtime_ns in versions]
    if not lines:
        return
    path = log_path(data_dir, sender)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        durable.fsync_dir(path.parent.parent)
    with durable.AppendLog(path) as log:
        log.append_many(lines)


def record_file(data_dir: Path, sender: str, name: str, path: Path) -> None:
    """Log the deletion of the file at ``path`` (as found now) if it exists."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return  # already gone: its line was written before it was removed
    record(data_dir, sender, [(name, st.st_size, st.st_mtime_ns)])


def _parse(sender: str, line: str) -> Deleted | None:
    parts = line.split(" ", 3)
    if len(parts) != 4 or parts[0] != _DELETE:
        return None
    try:
        return Deleted(sender, parts[3], int(parts[1]), int(parts[2]))
    except ValueError:
        return None


def read(data_dirs: Iterable[Path]) -> set[Deleted]:
    """Every deletion logged in ``data_dirs``, of every sender (unreadable lines ignored:
    a line the loader cannot read is no evidence, so it removes nothing)."""
    found: set[Deleted] = set()
    for data_dir in data_dirs:
        folder = _receiver_folder(data_dir)
        try:
            names = sorted(os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            if not is_log_name(name):
                continue
            sender = name[len(PREFIX) : -len(SUFFIX)]
            try:
                check_sender_uuid(sender)
            except BadName:
                continue
            for line in durable.read_lines(folder / name):
                entry = _parse(sender, line)
                if entry is not None:
                    found.add(entry)
    return found
