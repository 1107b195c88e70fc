"""Knowing, from a few ``stat`` calls, that a data dir still has nothing to ship.

A round that finds nothing new and nothing deleted writes down what it looked at:
the key ``(st_dev, st_ino, st_mtime_ns, st_ctime_ns)`` of every folder its scan
walked, the data roots (``sequence/``, ``unsequence/``) that did not exist, and the
identity of ``last_local_files.txt``. A data file cannot appear, vanish, gain its
``X.resource`` or an ``X.merge`` without changing its folder's key, a new folder
changes its parent's, and ``last_local_files.txt`` is only ever replaced whole (a
new inode). So if the next round finds every key and the identity unchanged, its
selection is empty again, and it needs neither the scan (100,000 names) nor
``last_local_files.txt`` nor the set differences: most of an idle round.

Timestamps are coarse, so nothing is written down that changed less than
``scan_cache.RACY_NS`` ago (a later change might keep the same time). A missing,
stale or unreadable mark only means the full scan and selection run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from sealsync import durable
from sealsync.names import DATA_ROOTS

from . import scan_cache

HEADER = "sealsync idle mark 1"


def _fresh(mtime_ns: int, ctime_ns: int) -> bool:
    return time.time_ns() - max(mtime_ns, ctime_ns) <= scan_cache.RACY_NS


def _file_identity(path: Path) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if _fresh(st.st_mtime_ns, st.st_ctime_ns):
        return None
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def _still(data_dir: Path, rel: str, key: scan_cache.Key) -> bool:
    """The folder still has the key the scan saw, and it is old enough to rely on:
    any later change gets a later timestamp, hence another key."""
    try:
        st = os.lstat(os.path.join(data_dir, rel))
    except OSError:
        return False
    return scan_cache.folder_key(st) == key and not _fresh(st.st_mtime_ns, st.st_ctime_ns)


def unchanged(mark: Path, data_dir: Path, last_local_files: Path) -> bool:
    """True if every folder, absent root and ``last_local_files`` is as ``mark`` says."""
    try:
        lines = mark.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    except OSError:
        return False
    if len(lines) < 3 or lines[0] != HEADER or lines[-1] != "":
        return False
    if lines[1] != f"last {_file_identity(last_local_files)}":
        return False
    base = os.fspath(data_dir)
    for line in lines[2:-1]:
        kind, _, rest = line.partition(" ")
        if kind == "absent":
            if os.path.lexists(os.path.join(base, rest)):
                return False
        elif kind == "folder":
            key, _, rel = rest.partition("\t")
            try:
                st = os.lstat(os.path.join(base, rel))
            except OSError:
                return False
            if key != " ".join(map(str, scan_cache.folder_key(st))):
                return False
        else:
            return False
    return True


def record(
    mark: Path,
    data_dir: Path,
    folders: Sequence[tuple[str, scan_cache.Key]],
    last_local_files: Path,
) -> None:
    """Write down what a round with nothing to do saw; best effort (it is a hint)."""
    last = _file_identity(last_local_files)
    walked = {rel for rel, _ in folders}
    absent = [root for root in DATA_ROOTS if root not in walked]
    usable = (
        last is not None
        and bool(folders)
        and all(_still(data_dir, rel, key) for rel, key in folders)
        and not any("\n" in rel or "\t" in rel for rel in walked)
        and not any(os.path.lexists(os.path.join(data_dir, root)) for root in absent)
    )
    try:
        if not usable:
            durable.remove(mark)
            return
        text = "".join(
            [f"{HEADER}\nlast {last}\n"]
            + [f"absent {root}\n" for root in absent]
            + [f"folder {' '.join(map(str, key))}\t{rel}\n" for rel, key in folders]
        )
        try:
            if mark.read_text(encoding="utf-8", errors="surrogateescape") == text:
                return
        except OSError:
            pass
        durable.atomic_write(mark, text.encode("utf-8", "surrogateescape"))
    except OSError:  # the next round just runs the full scan and selection
        pass
