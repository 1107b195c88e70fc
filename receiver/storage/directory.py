"""The default storage: plain folders in the receiver's data dirs (docs/design.md §4.8).

What ``sealsync serve`` uses when its config names no other ``[receiver.storage]``
kind. A file of sender ``U`` named ``sequence/<dirs...>/<file>`` is held at
``<data dir>/sequence/<dirs...>/<U>/<file>``, sidecars beside it: the received-files
layout of :mod:`sealsync.received`, which the Spark loader reads. So two senders'
files never collide, a delete from one sender can never reach another's file or the
host's own (docs/design.md §9.4), and ``list`` only has to look at files whose
parent folder is exactly ``U``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from receiver.folders import refuse_links, remove_empty_parents, safe_dirs
from receiver.inventory import held_files
from receiver.storage.contract import Storage, StorageError
from sealsync import durable, received
from sealsync.names import check_data_name, check_sender_uuid
from sealsync.printable import printable

log = logging.getLogger(f"sealsync.{__name__}")


def migrate_storage(data_dirs: list[Path]) -> tuple[int, dict[str, list[str]]]:
    """Bring a default storage written by an earlier version in line, at service start.

    The layout is unchanged, so every loaded file stays where it is and loads as
    before: nothing is moved or deleted but empty folders inside senders' folders
    (left by deletions before they removed them), and the folders that held only
    those. Files held under names :func:`sealsync.received.name_problem` now refuses (shipped
    before the namespace was closed) are left in place and returned per sender,
    for the log: the operator or the sender deletes them. Links are never followed, a
    data root that is one included.
    Returns (folders removed, {sender: names refused now}).
    """
    removed = 0
    squatters: dict[str, list[str]] = {}
    for data_dir in data_dirs:
        for root in received.ROOTS:
            top = Path(data_dir) / root
            if os.path.islink(top):
                # the walk would follow it out of the storage; the loads refuse it too
                log.warning("storage: %s is a symbolic link: not tidied", printable(str(top)))
                continue
            emptied: set[str] = set()
            for folder, dirs, files in os.walk(top, topdown=False):
                if folder == str(top):
                    continue
                rel = Path(folder).relative_to(top).parts
                owned = received.owner_of((root, *rel)) is not None
                sender = received.sender_of_folder((root, *rel))
                if sender is not None:
                    for file in files:
                        name = received.name_in((root, *rel), file)
                        if received.name_problem(name) is not None:
                            squatters.setdefault(sender, []).append(name)
                left = [d for d in dirs if os.path.join(folder, d) not in emptied]
                if files or left or not (owned or dirs):
                    continue
                try:
                    os.rmdir(folder)
                except OSError:
                    continue
                emptied.add(folder)
                removed += 1
            if emptied:
                durable.fsync_dir(top)
    return removed, squatters


def log_migration(data_dirs: list[Path]) -> None:
    """:func:`migrate_storage`, with what it found in the log (never fatal)."""
    try:
        removed, squatters = migrate_storage(data_dirs)
    except OSError as exc:
        log.warning("storage: tidying empty folders failed: %s", exc)
        return
    if removed:
        log.info("storage: removed %d empty folders left by deletions", removed)
    for sender, names in sorted(squatters.items()):
        log.warning(
            "storage: sender %s holds %d files under names the receiver now refuses "
            "(first: %s); they stay where they are: delete them once they are not wanted",
            sender,
            len(names),
            printable(sorted(names)[0]),
        )


def _same_content(a: str, b: str) -> bool:
    """Byte equality (no stat cache: a replay must see what is on disk now)."""
    if os.stat(a).st_size != os.stat(b).st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            chunk = fa.read(1 << 20)
            if chunk != fb.read(1 << 20):
                return False
            if not chunk:
                return True


class DirectoryStorage(Storage):
    """The default storage of ``sealsync serve``: plain folders in the receiver's data dirs.

    A file loads into the data dir its staged copy is in, so that the load is a rename
    on one file system, never a copy.
    """

    measures_usage = True
    feeds_loader = True
    keeps_senders_apart = True  # one folder per sender

    def __init__(self, data_dirs: list[Path]) -> None:
        if not data_dirs:
            raise StorageError("no receiver data dirs")
        self.data_dirs = [Path(d) for d in data_dirs]
        self._resolved = [Path(os.path.realpath(d)) for d in self.data_dirs]
        self._local = threading.local()  # deferred_sync's state, per loader thread
        self._noreplace = True
        """False once a rename without replacing was declined (see ``_load_new``)."""

    def target(self, data_dir: Path, sender: str, name: str) -> Path:
        """Where ``sender``'s ``name`` lives in ``data_dir``."""
        return Path(received.held_path(data_dir, sender, name))

    def start(self) -> None:
        log_migration(self.data_dirs)

    def loader_copies(self, sender: str, name: str) -> Sequence[tuple[Path, Path]]:
        return [(d, self.target(d, sender, name)) for d in self.data_dirs]

    def _data_dir_of(self, folder: str) -> Path:
        """The data dir a staged file in ``folder`` is in (a string: see ``load``)."""
        known = getattr(self._local, "data_dir_of", None)
        if known is not None and folder in known:
            return known[folder]  # type: ignore[no-any-return]
        real = Path(os.path.realpath(folder))
        for data_dir, resolved in zip(self.data_dirs, self._resolved, strict=True):
            if real.is_relative_to(resolved):
                if known is not None:
                    known[folder] = data_dir
                return data_dir
        raise StorageError(f"staged file outside every receiver data dir: {folder}")

    @contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Loads on this thread inside the block do not fsync after every rename: each
        folder they touched is fsynced once when the block ends (group commit; the
        loader applies a round's files in batches). Durable when the block exits,
        exception or not; until then a crash may keep or undo each rename, whole,
        which a replay handles as always. An fsync failure raises OSError: nothing of
        the block is known durable then.
        """
        if getattr(self._local, "defer", None) is not None:
            yield  # nested: the outer block syncs
            return
        folders: dict[str, None] = {}
        self._local.defer = folders
        # Per block, not longer: a folder checked for links (and made) and a staging
        # folder's data dir are looked up once for all the batch's files, not per file.
        self._local.checked = set()
        self._local.data_dir_of = {}
        try:
            yield
        finally:
            self._local.defer = None
            self._local.checked = None
            self._local.data_dir_of = None
            for folder in folders:
                durable.fsync_dir(folder)

    def load(self, sender: str, name: str, staged: Path) -> None:
        # Paths as strings, not Path objects: this runs for every file received, on
        # the loader's thread, and building Paths was most of its interpreter time.
        check_sender_uuid(sender)  # before any path use
        staged_folder, _, staged_base = os.fspath(staged).rpartition("/")
        if staged_base != check_data_name(name).rpartition("/")[2]:
            raise StorageError(f"staged file {staged} does not match the name {name}")
        problem = received.name_problem(name)
        if problem is not None:
            raise StorageError(f"refused name: {problem}")
        data_dir = self._data_dir_of(staged_folder)
        target = received.held_path(data_dir, sender, name)
        target_folder = target.rpartition("/")[0]
        if self._load_new(os.fspath(staged), target, staged_folder, target_folder, data_dir):
            return
        # Each piece's presence is looked up once: this loader thread is the only one
        # that moves a sender's staged files.
        pieces = [
            (src, dst, os.path.exists(src), os.path.exists(dst))
            for src, dst in (
                (f"{staged}{suffix}", f"{target}{suffix}") for suffix in received.LOAD_ORDER
            )
        ]
        if not pieces[0][2] and not pieces[0][3]:  # the load order starts with the data file
            raise StorageError(f"{name}: the staged file is missing and it is not loaded")
        same: list[bool] = []
        for src, dst, src_there, dst_there in pieces:  # refuse before moving anything
            same.append(src_there and dst_there and _same_content(src, dst))
            if src_there and dst_there and not same[-1] and not dst.endswith(received.REPLACEABLE):
                raise StorageError(
                    f"{name}: a different {os.path.basename(dst)} is already loaded from "
                    f"this sender; the staged copy is kept in {staged_folder}"
                )
        for (src, dst, src_there, _), identical in zip(pieces, same, strict=True):
            if not src_there:
                continue  # moved by an earlier attempt, or an optional sidecar never shipped
            if identical:  # already in place (an earlier attempt)
                durable.remove(src)
                continue
            self._move_in(src, dst, staged_folder, target_folder, data_dir)

    def _load_new(
        self, staged: str, target: str, staged_folder: str, target_folder: str, data_dir: Path
    ) -> bool:
        """The usual load, a file not loaded before, in one rename per piece; False with
        nothing moved when it is not that case, and ``load``'s lookups then decide.

        Each piece moves only if its target name is free (``rename_noreplace``), so the
        renames themselves find out what ``load`` would otherwise look up: a target
        already there (a replay, a file loaded before), a staged piece gone (an earlier
        attempt moved it), or a file system without the flag. Whatever moved is moved
        back before returning False. Only inside ``deferred_sync``, whose folder fsyncs
        make the renames durable.
        """
        defer = getattr(self._local, "defer", None)
        if defer is None or not self._noreplace:
            return False
        self._checked(target_folder, data_dir)
        moved: list[tuple[str, str]] = []
        try:
            for suffix in received.LOAD_ORDER:
                src, dst = staged + suffix, target + suffix
                try:
                    if not durable.rename_noreplace(src, dst):
                        self._noreplace = False
                        break
                except FileNotFoundError:
                    if not suffix:
                        break  # the data file: moved by an earlier attempt, or missing
                    continue  # an optional sidecar never shipped
                except FileExistsError:
                    break
                moved.append((src, dst))
            else:
                defer[target_folder] = None
                defer[staged_folder] = None
                return True
        except BaseException:
            self._undo(moved)
            raise
        self._undo(moved)
        return False

    @staticmethod
    def _undo(moved: list[tuple[str, str]]) -> None:
        """Move pieces back where ``_load_new`` took them from (a crash meanwhile leaves
        a partly loaded file, which a replay finishes as any other)."""
        for src, dst in reversed(moved):
            os.rename(dst, src)

    def _checked(self, folder: str, data_dir: Path) -> None:
        """Make ``folder`` (a target's) free of links, once per ``deferred_sync`` block."""
        checked = getattr(self._local, "checked", None)
        if checked is None or folder not in checked:
            safe_dirs(data_dir, Path(folder))
            if checked is not None:
                checked.add(folder)

    def _move_in(self, src: str, dst: str, src_folder: str, folder: str, data_dir: Path) -> None:
        """Move one piece into ``folder`` (its target's), made free of links."""
        self._checked(folder, data_dir)
        defer = getattr(self._local, "defer", None)
        if defer is None:
            durable.rename(src, dst)
        else:
            os.replace(src, dst)
            defer[folder] = None
            defer[src_folder] = None

    def delete(self, sender: str, name: str) -> bool:
        removed = False
        for data_dir in self.data_dirs:
            target = self.target(data_dir, sender, name)
            refuse_links(data_dir, target.parent)
            gone = False
            for suffix in received.DELETE_ORDER:
                gone |= durable.remove(f"{target}{suffix}")
            if gone:
                remove_empty_parents(
                    data_dir / target.relative_to(data_dir).parts[0], target.parent
                )
            removed |= gone
        return removed

    def usage(self, sender: str) -> int:
        """Bytes of ``sender``'s loaded files and their sidecars (``sender_quota_bytes``)."""
        check_sender_uuid(sender)
        total = 0
        for data_dir in self.data_dirs:
            for root in received.ROOTS:
                for folder, files in received.sender_folders(data_dir / root, sender):
                    for file in files:
                        try:
                            total += os.lstat(os.path.join(folder, file)).st_size
                        except OSError:
                            pass  # deleted meanwhile
        return total

    def list(self, sender: str) -> set[str]:
        check_sender_uuid(sender)
        return set(held_files(self.data_dirs, sender, md5=False))

    def inventory(self, sender: str) -> dict[str, tuple[int, str]]:
        check_sender_uuid(sender)
        return held_files(self.data_dirs, sender)


@dataclass(frozen=True)
class Settings:
    """``[receiver.storage]`` with ``kind = "directory"``: no keys of its own."""


def open_storage(config: Any, settings: Settings) -> DirectoryStorage:
    """The default storage over the config's data dirs."""
    return DirectoryStorage(list(config.data_dirs))
