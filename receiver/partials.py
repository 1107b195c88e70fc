"""Partial uploads: what a cut stream of a large file left, kept to resume from.

When a session dies inside the stream of a data file of at least ``RESUME_MIN``
bytes (connection lost, stall, the sender killed), the receiver fsyncs what it wrote
of the data file and keeps it in the sender folder's ``partial/``, beside a small
sidecar written through :func:`sealsync.durable.atomic_write`::

    partial/<key>.tsfile   the first ``held`` bytes of the data file (fsynced)
    partial/<key>.json     {"name", "size", "mtime", "head", "held", "saved"}

``key`` is a digest of the relative name: one partial per name and sender folder.
The sidecar is the authority: it is written after the data is durable, so the data
file always holds at least ``held`` bytes; bytes past ``held`` (a resumed stream
that was cut again before its next sidecar) are truncated away when resumed.
Identity is the data file's size, mtime and the MD5 of its first ``PARTIAL_HEAD``
bytes: the sender resumes only a file that matches all three.

Leftovers are swept (:meth:`PartialStore.sweep`): a sidecar without its data file
(or whose data file is shorter than ``held``), a data file without a sidecar, and
partials older than ``partial_max_age``. Sweeps run at each round start (the round
holds the sender folder) and in receiver recovery at service start.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sealsync import durable
from sealsync.names import check_data_name
from sealsync.protocol import MAX_FILE_SIZE, MAX_PARTIALS, PARTIAL_HEAD, RESUME_MIN

log = logging.getLogger(f"sealsync.{__name__}")

PARTIAL_FOLDER = "partial"
DEFAULT_MAX_AGE = 24 * 3600.0


@dataclass(frozen=True)
class Partial:
    """One partial upload, as its sidecar records it."""

    name: str
    size: int
    mtime: int
    head: str
    held: int
    saved: float
    """Wall-clock time of the last sidecar write, for expiry."""
    data: Path
    sidecar: Path

    def entry(self) -> list[Any]:
        """Its row in a PARTIALS frame."""
        return [self.name, self.size, self.mtime, self.head, self.held]


def key_of(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]


def head_md5(path: Path | str, size: int) -> str:
    """MD5 of the first ``PARTIAL_HEAD`` bytes of ``path`` (of ``size`` bytes)."""
    want = min(size, PARTIAL_HEAD)
    md5 = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        data = f.read(want)
    if len(data) != want:
        raise OSError(f"{path}: shorter than {want} bytes")
    md5.update(data)
    return md5.hexdigest()


class PartialStore:
    """The partial uploads of one sender folder (``root``/partial)."""

    def __init__(self, root: Path, max_age: float = DEFAULT_MAX_AGE) -> None:
        self.dir = Path(root) / PARTIAL_FOLDER
        self.max_age = max_age

    def paths(self, name: str) -> tuple[Path, Path]:
        """The data file (keeping the name's suffix: the format is chosen by it when
        a resumed upload is inspected) and the sidecar of ``name``'s partial."""
        key = key_of(name)
        return self.dir / f"{key}{PurePosixPath(name).suffix}", self.dir / f"{key}.json"

    # --- reading -----------------------------------------------------------------

    def _read(self, sidecar: Path) -> Partial | None:
        try:
            body = json.loads(sidecar.read_bytes())
            name = check_data_name(body["name"])
            size, mtime, held = int(body["size"]), int(body["mtime"]), int(body["held"])
            head, saved = str(body["head"]), float(body["saved"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        except Exception:  # a bad name (BadName) or anything else: not ours to trust
            return None
        data, expected = self.paths(name)
        if expected != sidecar or not (0 < held <= size <= MAX_FILE_SIZE) or len(head) != 32:
            return None
        return Partial(name, size, mtime, head, held, saved, data, sidecar)

    def _whole(self, entries: list[os.DirEntry[str]]) -> list[Partial]:
        """The partials of ``entries`` whose sidecar reads and whose data holds what it says."""
        found = []
        for entry in entries:
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            partial = self._read(Path(entry.path))
            if partial is None:
                continue
            try:
                if os.stat(partial.data).st_size < partial.held:
                    continue  # torn
            except OSError:
                continue
            found.append(partial)
        return found

    def list(self) -> list[Partial]:
        """The valid partials, newest first (at most ``MAX_PARTIALS``)."""
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return []
        found = self._whole(entries)
        found.sort(key=lambda p: p.saved, reverse=True)
        return found[:MAX_PARTIALS]

    def get(self, name: str) -> Partial | None:
        data, sidecar = self.paths(name)
        partial = self._read(sidecar)
        if partial is None or partial.name != name:
            return None
        try:
            if os.stat(data).st_size < partial.held:
                return None
        except OSError:
            return None
        return partial

    def total(self, exclude: str | None = None) -> int:
        """Bytes held by this folder's partials (``exclude``: one name left out)."""
        return sum(p.held for p in self.list() if p.name != exclude)

    # --- writing -----------------------------------------------------------------

    def keep(
        self, name: str, size: int, mtime: int, source: Path, held: int, *, fsynced: bool = False
    ) -> Partial | None:
        """Keep the first ``held`` bytes of ``source`` (a data temporary) as the partial
        of ``name``; ``source`` is moved into the store unless it is already there.
        None if there is too little to be worth it."""
        if size < RESUME_MIN or held < min(PARTIAL_HEAD, size) or held > size:
            return None
        data, sidecar = self.paths(name)
        self.dir.mkdir(parents=True, exist_ok=True)
        if not fsynced:
            durable.fsync_file(source)
        head = head_md5(source, size)
        if Path(source) != data:
            # the old sidecar goes first: it must never describe the new bytes wrongly
            durable.remove(sidecar)
            os.replace(source, data)
            durable.fsync_dir(self.dir)
        body = {
            "name": name,
            "size": size,
            "mtime": mtime,
            "head": head,
            "held": held,
            "saved": time.time(),
        }
        durable.atomic_write(sidecar, json.dumps(body, separators=(",", ":")))
        return Partial(name, size, mtime, head, held, body["saved"], data, sidecar)  # type: ignore[arg-type]

    def forget(self, name: str) -> None:
        """Remove the partial of ``name`` (sidecar first, then its data)."""
        data, sidecar = self.paths(name)
        durable.remove(sidecar)
        durable.remove(data)

    def sweep(self, now: float | None = None, everything: bool = False) -> int:
        """Remove expired, torn and orphaned partials (all with ``everything``);
        returns how many files went."""
        now = time.time() if now is None else now
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return 0
        keep: set[str] = set()
        removed = 0
        if not everything:
            for partial in self._whole(entries):
                if self.max_age >= 0 and now - partial.saved > self.max_age:
                    log.info(
                        "%s: partial upload of %s expired (%d bytes)",
                        self.dir,
                        partial.name,
                        partial.held,
                    )
                    continue
                keep.add(partial.sidecar.name)
                keep.add(partial.data.name)
        entries.sort(key=lambda e: not e.name.endswith(".json"))  # sidecars before data
        for entry in entries:
            if entry.name in keep:
                continue
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                continue  # an atomic_write temporary: durable sweeps its own
            with contextlib.suppress(OSError):
                if durable.remove(entry.path):
                    removed += 1
        return removed
