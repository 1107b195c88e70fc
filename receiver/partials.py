"""Partial uploads: what a cut stream of a large file left, kept to resume from.

When a session dies inside the stream of a data file of at least ``RESUME_MIN``
bytes (connection lost, stall, the sender killed), the receiver fsyncs what it wrote
of the data file and keeps it in the sender folder's ``partial/``, beside a small
sidecar written through :func:`sealsync.durable.atomic_write`::

    partial/<key>.tsfile   the first ``held`` bytes of the data file (fsynced)
    partial/<key>.json     {"name", "size", "mtime", "head", "held", "saved"}

The store is the sender's, not a source address's: ``<data dir>/sync-receiver/<uuid>/partial/``
(:func:`receiver.layout.partial_dir`), so ``max_partial_bytes`` and the quota see every
partial a sender holds, from whatever address it connected. ``key`` is a digest of
the relative name: one partial per name, sender and data dir.
The sidecar is the authority: it is written after the data is durable, so the data
file always holds at least ``held`` bytes; bytes past ``held`` (a resumed stream
that was cut again before its next sidecar) are truncated away when resumed.
Identity is the data file's size, mtime and the MD5 of its first ``PARTIAL_HEAD``
bytes: the sender resumes only a file that matches all three.

Leftovers are swept (:meth:`PartialStore.sweep`): a sidecar without its data file
(or whose data file is shorter than ``held``), a data file without a sidecar, and
partials older than ``partial_max_age``. Sweeps run at each round start, in receiver
recovery at service start, and on the service's timer (:func:`sweep_all`). Several
sessions of one sender may share a store, so every change to a store is made under
one lock, and a partial being resumed is *claimed*: no sweep touches it meanwhile.

No symbolic link is followed: a store folder reached through one is refused
(:func:`receiver.folders.refuse_links`), files are opened with ``O_NOFOLLOW``, and a
sweep unlinks entries themselves, never what they point to.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from receiver.folders import refuse_links, safe_dirs
from receiver.layout import partial_dir, partial_dirs
from sealsync import durable
from sealsync.names import check_data_name
from sealsync.protocol import MAX_FILE_SIZE, MAX_PARTIALS, PARTIAL_HEAD, RESUME_MIN

log = logging.getLogger(f"sealsync.{__name__}")

PARTIAL_FOLDER = "partial"
DEFAULT_MAX_AGE = 24 * 3600.0

_LOCK = threading.RLock()
"""Held for every change to any store: keeping, forgetting and sweeping are short,
and sessions of one sender on one data dir (from two addresses) share a store."""
_CLAIMED: set[str] = set()
"""Sidecar paths of partials a session is resuming: sweeps leave them alone."""


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
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
        data = f.read(want)
    if len(data) != want:
        raise OSError(f"{path}: shorter than {want} bytes")
    md5.update(data)
    return md5.hexdigest()


def claim(partial: Partial) -> None:
    """A session resumes ``partial``: no sweep may remove it until :func:`unclaim`."""
    with _LOCK:
        _CLAIMED.add(os.fspath(partial.sidecar))


def unclaim(partial: Partial) -> None:
    with _LOCK:
        _CLAIMED.discard(os.fspath(partial.sidecar))


def is_claimed(partial: Partial) -> bool:
    """True while a session resumes ``partial``."""
    with _LOCK:
        return os.fspath(partial.sidecar) in _CLAIMED


class PartialStore:
    """The partial uploads in folder ``dir`` (one sender's in one data dir: :meth:`of`).

    ``top``: the receiver folder ``dir`` lies in; no component between them may be a
    symbolic link (checked before every use)."""

    def __init__(
        self, dir: Path, max_age: float = DEFAULT_MAX_AGE, top: Path | None = None
    ) -> None:
        self.dir = Path(dir)
        self.max_age = max_age
        self.top = Path(top) if top is not None else self.dir.parent

    @classmethod
    def of(cls, data_dir: Path, uuid: str, max_age: float = DEFAULT_MAX_AGE) -> PartialStore:
        """The partial uploads of sender ``uuid`` in receiver data dir ``data_dir``."""
        return cls(partial_dir(data_dir, uuid), max_age, Path(data_dir))

    def _scan(self) -> list[os.DirEntry[str]]:
        """The store's entries ([] if it does not exist); OSError if it is reached
        through a link."""
        refuse_links(self.top, self.dir)
        try:
            return list(os.scandir(self.dir))
        except FileNotFoundError:
            return []

    def paths(self, name: str) -> tuple[Path, Path]:
        """The data file (keeping the name's suffix: the format is chosen by it when
        a resumed upload is inspected) and the sidecar of ``name``'s partial."""
        key = key_of(name)
        return self.dir / f"{key}{PurePosixPath(name).suffix}", self.dir / f"{key}.json"

    # --- reading -----------------------------------------------------------------

    def _read(self, sidecar: Path) -> Partial | None:
        try:
            with open(os.open(sidecar, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
                body = json.loads(f.read(1 << 16))
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
                if os.lstat(partial.data).st_size < partial.held:
                    continue  # torn
            except OSError:
                continue
            found.append(partial)
        return found

    def list(self) -> list[Partial]:
        """The valid partials, newest first (at most ``MAX_PARTIALS``)."""
        found = self._whole(self._scan())
        found.sort(key=lambda p: p.saved, reverse=True)
        return found[:MAX_PARTIALS]

    def get(self, name: str) -> Partial | None:
        data, sidecar = self.paths(name)
        refuse_links(self.top, self.dir)
        partial = self._read(sidecar)
        if partial is None or partial.name != name:
            return None
        try:
            if os.lstat(data).st_size < partial.held:
                return None
        except OSError:
            return None
        return partial

    def take(self, name: str) -> Partial | None:
        """:meth:`get`, claimed for a resume (None if another session resumes it)."""
        with _LOCK:
            partial = self.get(name)
            if partial is None or os.fspath(partial.sidecar) in _CLAIMED:
                return None
            _CLAIMED.add(os.fspath(partial.sidecar))
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
        with _LOCK:
            return self._keep(name, size, mtime, source, held, fsynced)

    def _keep(
        self, name: str, size: int, mtime: int, source: Path, held: int, fsynced: bool
    ) -> Partial | None:
        data, sidecar = self.paths(name)
        safe_dirs(self.top, self.dir)
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
        with _LOCK:
            refuse_links(self.top, self.dir)
            durable.remove(sidecar)
            durable.remove(data)

    def sweep(self, now: float | None = None, everything: bool = False) -> int:
        """Remove expired, torn and orphaned partials (all with ``everything``);
        returns how many files went."""
        with _LOCK:
            return self._sweep(time.time() if now is None else now, everything)

    def _sweep(self, now: float, everything: bool) -> int:
        entries = self._scan()  # OSError through a link: nothing is deleted there
        keep: set[str] = set()
        removed = 0
        for entry in entries:
            if entry.path in _CLAIMED:  # being resumed (shorter than held meanwhile): left be
                keep.add(entry.name)
                claimed = self._read(Path(entry.path))
                if claimed is not None:
                    keep.add(claimed.data.name)
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


def sender_stores(
    data_dirs: list[Path], uuid: str, max_age: float = DEFAULT_MAX_AGE
) -> list[PartialStore]:
    """The partial stores of sender ``uuid``, one per receiver data dir."""
    return [PartialStore.of(Path(d), uuid, max_age) for d in data_dirs]


def sender_partials(data_dirs: list[Path], uuid: str) -> Iterator[tuple[PartialStore, Partial]]:
    """Every partial ``uuid`` holds, in every data dir (a store behind a link: none)."""
    for store in sender_stores(data_dirs, uuid):
        try:
            partials = store.list()
        except OSError:
            continue
        for partial in partials:
            yield store, partial


def sweep_all(data_dirs: list[Path], max_age: float) -> int:
    """Sweep every sender's partial stores (the service's timer, and its start): expiry
    does not wait for a round from that sender. Returns the files removed."""
    removed = 0
    for data_dir, uuid in partial_dirs(data_dirs):
        store = PartialStore.of(data_dir, uuid, max_age)
        try:
            removed += store.sweep()
        except OSError as exc:
            log.warning("%s: sweeping partial uploads failed: %s", store.dir, exc)
    return removed


def migrate_partials(old_root: Path, data_dir: Path, uuid: str) -> int:
    """Move the partials an earlier version kept per source address
    (``<ip>_<uuid>/partial/``) into the sender's store; of two for one name the newer
    stays. Returns how many moved. A folder reached through a link is left alone."""
    old = PartialStore(old_root / PARTIAL_FOLDER, top=Path(data_dir))
    new = PartialStore.of(data_dir, uuid)
    moved = 0
    with _LOCK:
        try:
            found = old.list()
        except OSError as exc:
            log.warning("%s: partial uploads left where they are: %s", old.dir, exc)
            return 0
        for partial in found:
            there = new.get(partial.name)
            if there is not None and there.saved >= partial.saved:
                continue
            data, sidecar = new.paths(partial.name)
            safe_dirs(new.top, new.dir)
            durable.remove(sidecar)
            os.replace(partial.data, data)
            os.replace(partial.sidecar, sidecar)
            durable.fsync_dir(new.dir)
            moved += 1
        old.sweep(everything=True)
        with contextlib.suppress(OSError):
            old.dir.rmdir()
    return moved
