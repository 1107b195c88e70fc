"""Folder listings remembered between rounds, so that an idle round lists nothing.

Listing every folder is most of an idle round's time when a data dir holds many files
(docs/performance.md, "Figures behind choices in the code"). A folder's entries cannot
change without its modification and change times changing, so a folder whose ``(st_dev,
st_ino, st_mtime_ns, st_ctime_ns)`` is what it was last round still holds what it held
then: one ``lstat`` replaces its listing. What selection needs of a folder is only names
(sub-folders, data files, which of them are sealed, which sealed ones have an
``X.mods`` or ``X.mods2``), never file contents, so that is all a listing keeps, data names already
relative to the data dir. (An append to an ``X.mods`` leaves its folder unchanged; that
is why selection ``stat``-s those files itself, :mod:`.shipped_mods`.)

Timestamps are coarse (a few ms, or a second or two on some file systems): two
changes within one tick leave the same mtime. So a listing is only kept when its
folder's last change was more than ``RACY_NS`` before the folder was stat'ed
(before it was listed); any later change then gets a later timestamp. A folder with
rejected entries (links, odd names) is never kept, so those are reported afresh.

The cache is a hint, never state: a missing, stale-format or damaged file (it ends
with a count and CRC of its body) is ignored, and the next scan lists everything.
"""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from sealsync import durable

log = logging.getLogger(f"sealsync.{__name__}")

HEADER = "sealsync scan cache 4"  # 4: "has deletions" counts X.mods2 too
RACY_NS = 2_000_000_000
TAB = "\t"
_BAD = (TAB, "\n", "\r")

Key = tuple[int, int, int, int]


def folder_key(st: os.stat_result) -> Key:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Listing:
    """What a folder held: sub-folder names, and its data files (valid names, relative
    to the data dir) split into sealed and not sealed, and the sealed ones with a
    ``.mods``."""

    key: Key
    dirs: tuple[str, ...]
    sealed: tuple[str, ...]
    unsealed: tuple[str, ...]
    mods: tuple[str, ...] = ()


class ScanCache:
    """Listings by folder (relative to the data dir), loaded from and saved to ``path``.

    The file: a header line, then five lines per folder (its key and name, then its
    sub-folders, sealed and unsealed data files and the sealed ones with a ``.mods``,
    each list TAB-separated: valid data
    names hold no TAB, and a folder whose names might is not kept), then a trailer
    with the folder count and the CRC-32 of everything between.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._old: dict[str, Listing] = self._load() if path is not None else {}
        self._new: dict[str, Listing] = {}

    def get(self, rel: str, st: os.stat_result) -> Listing | None:
        """The folder's listing if it has not changed since; kept for the next save."""
        hit = self._old.get(rel)
        if hit is None or hit.key != folder_key(st):
            return None
        self._new[rel] = hit
        return hit

    def put(self, rel: str, st: os.stat_result, stat_time_ns: int, listing: Listing) -> None:
        """Remember a fresh listing unless the folder changed too recently to trust it."""
        if stat_time_ns - max(st.st_mtime_ns, st.st_ctime_ns) <= RACY_NS:
            return
        if any(ch in rel for ch in _BAD) or any(ch in d for d in listing.dirs for ch in _BAD):
            return
        self._new[rel] = listing

    def save(self) -> None:
        """Write the listings of this scan, if they differ from what was loaded."""
        if self.path is None or self._new == self._old:
            return
        if not self.path.parent.is_dir():
            return  # no round state folder yet: nothing to keep it in
        parts = []
        for rel, item in self._new.items():
            key = " ".join(map(str, item.key))
            parts.append(
                f"{key} {rel}\n{TAB.join(item.dirs)}\n{TAB.join(item.sealed)}\n"
                f"{TAB.join(item.unsealed)}\n{TAB.join(item.mods)}\n"
            )
        body = "".join(parts).encode("utf-8", "surrogateescape")
        trailer = f"end {len(self._new)} {zlib.crc32(body)}\n".encode()
        try:
            durable.atomic_write(self.path, HEADER.encode() + b"\n" + body + trailer)
        except OSError as exc:  # a cache: the next scan just lists again
            log.warning("cannot write %s: %s", self.path, exc.strerror or exc)

    def _load(self) -> dict[str, Listing]:
        assert self.path is not None
        try:
            raw = self.path.read_bytes()
        except OSError:
            return {}
        head, _, rest = raw.partition(b"\n")
        body, _, trailer = rest[:-1].rpartition(b"\n")
        body = body + b"\n" if body else b""
        if head != HEADER.encode() or not trailer.startswith(b"end "):
            return {}
        out: dict[str, Listing] = {}
        try:
            _, count, crc = trailer.split()
            if zlib.crc32(body) != int(crc):
                return {}
            lines = body.decode("utf-8", "surrogateescape").split("\n")[:-1]
            if len(lines) % 5:
                return {}
            for i in range(0, len(lines), 5):
                dev, ino, mtime, ctime, rel = lines[i].split(" ", 4)
                dirs, sealed, unsealed, mods = (
                    tuple(line.split(TAB)) if line else () for line in lines[i + 1 : i + 5]
                )
                out[rel] = Listing(
                    (int(dev), int(ino), int(mtime), int(ctime)), dirs, sealed, unsealed, mods
                )
            if len(out) != int(count):
                return {}
        except ValueError:
            return {}
        return out
