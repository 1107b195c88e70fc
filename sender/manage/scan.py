"""What a data dir holds now: the I/O half of file selection (docs/design.md §3.3, §9.3).

Both ``sequence/`` and ``unsequence/`` are walked at any depth (the original tool
never synced unsequence files). ``present`` feeds the deletion side of the diff, so
a folder that cannot be read stops the scan: treating its files as gone would tell
the receiver to delete them. Symbolic links are never followed or shipped: a link
could smuggle any file of the machine, or a file twice, into a round.

The walk uses ``os.scandir`` and plain strings (no ``Path`` per file, no ``stat``:
the entry types come from the directory listing) so that 100,000 files take a
fraction of a second; with a ``cache`` (:mod:`.scan_cache`), folders unchanged since
the last round are not listed at all.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from sealsync.errors import LocalIOError
from sealsync.names import (
    DATA_ROOTS,
    DATA_SUFFIXES,
    MODS2_SUFFIX,
    MODS_SUFFIX,
    data_name_problem,
)
from sender.manage.scan_cache import Key, Listing, ScanCache, folder_key

SYMLINK = "symbolic link, not followed"
NOT_REGULAR = "not a regular file"
NOT_FOLDER = "not a folder"


@dataclass(frozen=True)
class DataDirScan:
    sealed: frozenset[str]
    """Data files with their ``X.resource`` and without ``X.merge``: ready to ship."""
    present: frozenset[str]
    """Every data file that exists, sealed or not: only their absence means deleted."""
    rejected: tuple[tuple[str, str], ...]
    """(name, reason) for entries never shipped: hostile names, links, special files."""
    folders: tuple[tuple[str, Key], ...] = field(default=(), compare=False)
    """With a cache: every folder walked and its key as stat'ed before it was read."""
    with_mods: frozenset[str] = frozenset()
    """Sealed files that have an ``X.mods`` or ``X.mods2`` (a regular file): the only
    ones whose deletions selection needs to ``stat`` (:mod:`.shipped_mods`)."""


def scan(data_dir: os.PathLike[str] | str, cache: Path | None = None) -> DataDirScan:
    """What ``data_dir`` holds; ``cache`` is a file to reuse and refresh listings in."""
    found = _Found()
    rejected = found.rejected
    listings = ScanCache(cache) if cache is not None else None
    folders: list[tuple[str, Key]] = []
    base = os.fspath(data_dir)
    for root in DATA_ROOTS:
        top = os.path.join(base, root)
        if os.path.islink(top):
            rejected.append((root, SYMLINK))
        elif os.path.isdir(top):
            _walk(top, root, found, listings, folders)
        elif os.path.lexists(top):
            rejected.append((root, NOT_FOLDER))
    if listings is not None:
        listings.save()
    return DataDirScan(
        frozenset(found.sealed),
        frozenset(found.present),
        tuple(sorted(rejected)),
        tuple(folders),
        frozenset(found.with_mods),
    )


@dataclass
class _Found:
    """What the walk collects, as plain lists (one append per file)."""

    sealed: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    with_mods: list[str] = field(default_factory=list)


def _walk(
    top: str,
    rel_top: str,
    found: _Found,
    cache: ScanCache | None = None,
    folders: list[tuple[str, Key]] | None = None,
) -> None:
    sealed, present, rejected, with_mods = (
        found.sealed,
        found.present,
        found.rejected,
        found.with_mods,
    )
    stack = [(top, rel_top)]
    while stack:
        folder, rel = stack.pop()
        if cache is not None:
            stat_time = time.time_ns()  # before the stat: see scan_cache's docstring
            try:
                st = os.lstat(folder)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise LocalIOError(f"cannot read data folder {folder}: {exc.strerror}") from exc
            if folders is not None:
                folders.append((rel, folder_key(st)))
            hit = cache.get(rel, st)
            if hit is not None:
                stack.extend((os.path.join(folder, d), f"{rel}/{d}") for d in hit.dirs)
                present += hit.sealed
                present += hit.unsealed
                sealed += hit.sealed
                with_mods += hit.mods
                continue
            rejected_before = len(rejected)
            subdirs: list[str] = []
            sealed_here: list[str] = []
            unsealed_here: list[str] = []
            mods_here: list[str] = []
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except FileNotFoundError:
            continue  # removed while we walked (TTL, merge): its files are gone indeed
        except OSError as exc:
            raise LocalIOError(f"cannot read data folder {folder}: {exc.strerror}") from exc
        names = set()
        regular = set()
        data = []
        for entry in entries:
            name = entry.name
            names.add(name)
            try:
                if entry.is_symlink():
                    rejected.append((f"{rel}/{name}", SYMLINK))
                elif entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, f"{rel}/{name}"))
                    if cache is not None:
                        subdirs.append(name)
                elif entry.is_file(follow_symlinks=False):
                    regular.add(name)
                    if name.endswith(DATA_SUFFIXES):
                        data.append(name)
                elif name.endswith(DATA_SUFFIXES):
                    rejected.append((f"{rel}/{name}", NOT_REGULAR))
            except FileNotFoundError:
                continue  # vanished between listing and type check
        for name in data:
            relname = f"{rel}/{name}"
            problem = data_name_problem(relname)
            if problem is not None:
                rejected.append((relname, problem))
                continue
            present.append(relname)
            if f"{name}.resource" in regular and f"{name}.merge" not in names:
                sealed.append(relname)
                has_mods = name + MODS_SUFFIX in regular or name + MODS2_SUFFIX in regular
                if has_mods:
                    with_mods.append(relname)
                if cache is not None:
                    sealed_here.append(relname)
                    if has_mods:
                        mods_here.append(relname)
            elif cache is not None:
                unsealed_here.append(relname)
        if cache is not None and len(rejected) == rejected_before:
            listing_ = Listing(
                folder_key(st),
                tuple(subdirs),
                tuple(sealed_here),
                tuple(unsealed_here),
                tuple(mods_here),
            )
            cache.put(rel, st, stat_time, listing_)
