"""Applying one sender's events to the host, for the loader and recovery (docs/design.md §4.5).

An event is applied, then recorded in ``load.log`` (fsynced): a crash between the two
replays the event, so each step is idempotent. ``load.log`` lines are ``load <name>``
and ``delete <name>``; a name never holds a newline (``names.check_data_name``), so a
line cannot be forged.

A load claims the file's devices before it moves anything: once the staged file is
gone (moved by an earlier attempt that crashed before logging) its devices were
claimed already, and the storage recognises the file as loaded.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from receiver.folders import refuse_links
from receiver.layout import SenderFolder
from receiver.load.owners import DeviceConflict, DeviceOwners
from receiver.storage import Storage
from sealsync import deletions, durable
from sealsync.crashpoints import crash_point
from sealsync.names import check_data_name

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")

LOAD = "load "
DELETE = "delete "

Inspect = Callable[[Path], "FileInfo"]


@dataclass(frozen=True)
class LoadLogState:
    loaded: frozenset[str]
    deleted: frozenset[str]


def read_load_log(path: Path) -> LoadLogState:
    """What ``load.log`` proves was applied; a torn last line is not a record."""
    loaded, deleted = set(), set()
    for line in durable.read_lines(path):
        if line.startswith(LOAD):
            loaded.add(line[len(LOAD) :])
        elif line.startswith(DELETE):
            deleted.add(line[len(DELETE) :])
        elif line:
            log.warning("%s: ignoring a line that is not an event: %r", path, line[:200])
    return LoadLogState(loaded=frozenset(loaded), deleted=frozenset(deleted))


class Applier:
    """Applies events of one sender folder, in the caller's order, on the caller's thread."""

    def __init__(
        self,
        folder: SenderFolder,
        storage: Storage,
        owners: DeviceOwners,
        inspect: Inspect,
    ) -> None:
        self.folder = folder
        self.storage = storage
        self.owners = owners
        self.inspect = inspect
        self._log: durable.AppendLog | None = None

    def _record(self, line: str) -> None:
        self._record_many([line])

    def _record_many(self, lines: list[str]) -> None:
        if self._log is None:
            self._log = durable.AppendLog(self.folder.load_log)
        self._log.append_many(lines)

    def _claim(self, name: str, claimed: Sequence[str] | None) -> Path:
        """The staged file, once its devices are claimed (here, unless ``claimed``)."""
        staged = self.folder.staged(name)
        if claimed is None and staged.exists():
            devices = self.inspect(staged).devices
            conflicts = self.owners.claim(devices, self.folder.uuid)
            if conflicts:
                raise DeviceConflict(name, conflicts, self.owners.describe)
        return staged

    def load(self, name: str, claimed: Sequence[str] | None = None) -> None:
        """Claim, move in, record; raises DeviceConflict, StorageError, FormatError...

        ``claimed``: the file's devices, when the caller read them from the staged file
        and claimed them already (the session does, before it answers the sender);
        else they are read and claimed here (recovery).
        """
        staged = self._claim(name, claimed)
        self.storage.load(self.folder.uuid, name, staged)
        crash_point("receiver.load.moved")
        self._record(f"{LOAD}{name}")
        crash_point("receiver.loadlog.load")

    def load_many(
        self,
        items: Sequence[tuple[str, Sequence[str] | None]],
        stopping: Callable[[], bool] | None = None,
    ) -> list[Exception | None]:
        """Several loads with one ``load.log`` fsync (group commit); per item, None or
        why it failed (the others still load). Once ``stopping()`` says so, no further
        file is moved: the result then covers only the first items, the rest are left
        for recovery to replay.

        The durability order of :meth:`load` holds for every file: its move is durable
        before its line is written. A storage whose ``deferred_sync`` groups them (the
        directory storage) also persists the moves of the whole batch with one fsync
        per folder instead of two per rename.
        """
        results: list[Exception | None] = [None] * len(items)
        ready: list[tuple[int, str, Path]] = []
        for i, (name, claimed) in enumerate(items):
            try:
                ready.append((i, name, self._claim(name, claimed)))
            except Exception as exc:  # reported per file by the caller
                results[i] = exc
        errors: list[Exception | None] = []
        try:
            with self.storage.deferred_sync():
                for _, name, staged in ready:
                    if errors and stopping is not None and stopping():
                        break
                    try:
                        self.storage.load(self.folder.uuid, name, staged)
                        errors.append(None)
                    except Exception as exc:
                        errors.append(exc)
        except OSError as exc:  # the moves are not known durable: none is recorded
            errors = [error or exc for error in errors]
        if len(errors) < len(ready):  # stopped early: report only what was attempted
            results = results[: ready[len(errors)][0]]
            ready = ready[: len(errors)]
        done = []
        for (i, name, _), error in zip(ready, errors, strict=True):
            if error is None:
                done.append(name)
            else:
                results[i] = error
        if done:
            crash_point("receiver.load.moved")
            try:
                self._record_many([f"{LOAD}{name}" for name in done])
            except OSError as exc:  # moved but not recorded: recovery replays them
                for i, _, _ in ready:
                    if results[i] is None:
                        results[i] = exc
                return results
            crash_point("receiver.loadlog.load")
        return results

    def delete(self, name: str) -> None:
        """Log the deletion for the Spark loader (its only evidence that the file's rows
        may leave the table, :mod:`sealsync.deletions`), remove only this sender's
        copy, record."""
        check_data_name(name)
        log_deletion(self.storage, self.folder.uuid, name)
        self.storage.delete(self.folder.uuid, name)
        crash_point("receiver.delete.removed")
        self._record(f"{DELETE}{name}")
        crash_point("receiver.loadlog.delete")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def log_deletion(storage: Storage, sender: str, name: str) -> None:
    """Append each copy of ``name`` about to be deleted to its data dir's deletion log.

    Only a storage that keeps loaded files where the Spark loader reads them
    (``feeds_loader``) has copies to log; another has no table fed from its folders.
    """
    if not storage.feeds_loader:
        return
    for data_dir, path in storage.loader_copies(sender, name):
        try:
            deletions.record_file(data_dir, sender, name, path)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # A full disk must not block the deletions that free it: the loader then
            # keeps the file's rows and says so (kept_missing) instead of removing them.
            log.warning(
                "%s: no space to log the deletion of %s for the Spark loader; deleting it "
                "anyway (the loader will keep its rows and report it)",
                data_dir,
                name,
            )


def finish_round(folder: SenderFolder) -> None:
    """Forget a fully applied round: ``sync.log`` first (the commit point), then the rest.

    A crash after ``sync.log`` is gone leaves a folder that recovery only tidies.
    """
    durable.remove(folder.sync_log)
    crash_point("receiver.finish.synclog_removed")
    durable.remove(folder.load_log)
    crash_point("receiver.finish.loadlog_removed")
    durable.remove(folder.sync_end)
    crash_point("receiver.finish.syncend_removed")
    clear_staging(folder)


def clear_staging(folder: SenderFolder) -> None:
    """Empty ``data/`` once no log refers to it any more.

    What is left there was never confirmed to the sender (it will send it again) or is
    a load's leftover; each removal is logged, never silent (docs/design.md §9.6).
    """
    top = folder.data
    refuse_links(folder.data_dir, top)  # never delete through a link (OSError: left alone)
    if not top.is_dir():
        return
    for here, dirs, files in os.walk(top, topdown=False):
        for file in files:
            path = Path(here) / file
            log.warning("%s: removing a staged file no log refers to: %s", folder.root, path)
            durable.remove(path)
        for sub in dirs:
            path = Path(here) / sub
            if path.is_symlink():
                durable.remove(path)
            else:
                path.rmdir()
                durable.fsync_dir(here)
