"""Knowing, from a few ``stat`` calls, that a data dir still has nothing to ship.

A round that finds nothing new and nothing deleted writes down what it looked at:
the key ``(st_dev, st_ino, st_mtime_ns, st_ctime_ns)`` of every folder its scan
walked, the data roots (``sequence/``, ``unsequence/``) that did not exist, the
identities of ``last_local_files.txt`` and ``shipped_mods.txt``, and the
``(size, mtime_ns)`` of every sealed file's ``X.mods`` (with IoTDB 2.x's ``X.mods2``,
their sums: :func:`.shipped_mods.current_identities`) as selection saw it. A data
file cannot appear, vanish, gain its ``X.resource``, an ``X.merge`` or an ``X.mods``
without changing its folder's key, a new folder changes its parent's, and the state
files are only ever replaced whole (a new inode). An *append* to an existing
``X.mods`` changes no folder, though, which is why each ``.mods`` is checked by
itself: IoTDB appends there when it deletes points of a synced file, and that file
must ship again (:mod:`.shipped_mods`). So if the next round finds every key and
identity unchanged, its selection is empty again, and it needs neither the scan
(100,000 names) nor ``last_local_files.txt`` nor the set differences: most of an
idle round. It costs one ``stat`` per folder and per ``.mods``.

Timestamps are coarse, so nothing is written down that changed less than
``scan_cache.RACY_NS`` ago (a later change might keep the same time). A missing,
stale or unreadable mark only means the full scan and selection run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from sealsync import durable
from sealsync.names import DATA_ROOTS
from sender.manage import scan_cache
from sender.manage.shipped_mods import MODS, MODS2, ModsId, mods_stat

HEADER = "sealsync idle mark 2"
ABSENT = "absent"


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


def _optional_identity(path: Path) -> str | None:
    """Like ``_file_identity`` for a state file whose absence is a state of its own."""
    return ABSENT if not os.path.lexists(path) else _file_identity(path)


def _mods_now(data_dir: Path, rel: str) -> tuple[ModsId, bool] | None:
    """The identity of the file's ``.mods``/``.mods2`` as :func:`.shipped_mods.
    current_identities` takes it, and whether either changed too recently to rely on;
    None if it has neither."""
    base = os.path.join(data_dir, rel)
    found = [st for st in (mods_stat(base + MODS), mods_stat(base + MODS2)) if st is not None]
    if not found:
        return None
    ident = (sum(st.st_size for st in found), sum(st.st_mtime_ns for st in found))
    return ident, any(_fresh(st.st_mtime_ns, st.st_ctime_ns) for st in found)


def _mods_still(data_dir: Path, rel: str, ident: ModsId) -> bool:
    """The ``.mods``/``.mods2`` are still the ones selection saw, and old enough to rely on."""
    now = _mods_now(data_dir, rel)
    return now is not None and now[0] == ident and not now[1]


def _still(data_dir: Path, rel: str, key: scan_cache.Key) -> bool:
    """The folder still has the key the scan saw, and it is old enough to rely on:
    any later change gets a later timestamp, hence another key."""
    try:
        st = os.lstat(os.path.join(data_dir, rel))
    except OSError:
        return False
    return scan_cache.folder_key(st) == key and not _fresh(st.st_mtime_ns, st.st_ctime_ns)


def unchanged(mark: Path, data_dir: Path, last_local_files: Path, shipped_mods: Path) -> bool:
    """True if every folder, absent root, ``.mods`` and state file is as ``mark`` says."""
    try:
        lines = mark.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    except OSError:
        return False
    if len(lines) < 4 or lines[0] != HEADER or lines[-1] != "":
        return False
    if lines[1] != f"last {_file_identity(last_local_files)}":
        return False
    if lines[2] != f"shipped {_optional_identity(shipped_mods)}":
        return False
    base = os.fspath(data_dir)
    for line in lines[3:-1]:
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
        elif kind == "mods":
            ident, _, rel = rest.partition("\t")
            now = _mods_now(data_dir, rel)
            if now is None or ident != f"{now[0][0]} {now[0][1]}":
                return False
        else:
            return False
    return True


def record(
    mark: Path,
    data_dir: Path,
    folders: Sequence[tuple[str, scan_cache.Key]],
    last_local_files: Path,
    shipped_mods: Path,
    mods: Mapping[str, ModsId],
) -> None:
    """Write down what a round with nothing to do saw; best effort (it is a hint).

    ``mods`` is the identity of every sealed file's ``.mods`` *as selection saw it*
    (equal to what it shipped with, or the round would not be idle): one taken now
    could already include an append that selection missed, and the mark would then
    hide it.
    """
    last = _file_identity(last_local_files)
    shipped = _optional_identity(shipped_mods)
    walked = {rel for rel, _ in folders}
    absent = [root for root in DATA_ROOTS if root not in walked]
    usable = (
        last is not None
        and shipped is not None
        and bool(folders)
        and all(_still(data_dir, rel, key) for rel, key in folders)
        and all(_mods_still(data_dir, rel, ident) for rel, ident in mods.items())
        and not any("\n" in rel or "\t" in rel for rel in walked | set(mods))
        and not any(os.path.lexists(os.path.join(data_dir, root)) for root in absent)
    )
    try:
        if not usable:
            durable.remove(mark)
            return
        text = "".join(
            [f"{HEADER}\nlast {last}\nshipped {shipped}\n"]
            + [f"absent {root}\n" for root in absent]
            + [f"folder {' '.join(map(str, key))}\t{rel}\n" for rel, key in folders]
            + [f"mods {size} {mtime}\t{rel}\n" for rel, (size, mtime) in sorted(mods.items())]
        )
        try:
            if mark.read_text(encoding="utf-8", errors="surrogateescape") == text:
                return
        except OSError:
            pass
        durable.atomic_write(mark, text.encode("utf-8", "surrogateescape"))
    except OSError:  # the next round just runs the full scan and selection
        pass
