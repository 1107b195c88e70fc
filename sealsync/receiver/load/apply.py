"""Applying one sender's events to the host, shared by the loader and recovery (DESIGN §4).

An event is applied, then recorded in ``load.log`` (fsynced): a crash between the two
replays the event, so each step is idempotent. ``load.log`` lines are ``load <name>``
and ``delete <name>``; a name never holds a newline (``names.check_data_name``), so a
line cannot be forged.

A load claims the file's devices before it moves anything: once the staged file is
gone (moved by an earlier attempt that crashed before logging) its devices were
claimed already, and the storage recognises the file as loaded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sealsync import durable
from sealsync.names import check_data_name

from ..layout import SenderFolder
from ..storage import Storage
from .owners import DeviceConflict, DeviceOwners

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(__name__)

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
        if self._log is None:
            self._log = durable.AppendLog(self.folder.load_log)
        self._log.append(line)

    def load(self, name: str) -> None:
        """Claim, move in, record; raises DeviceConflict, StorageError, FormatError..."""
        staged = self.folder.staged(name)
        if staged.exists():
            devices = self.inspect(staged).devices
            conflicts = self.owners.claim(devices, self.folder.uuid)
            if conflicts:
                raise DeviceConflict(name, conflicts)
        self.storage.load(self.folder.uuid, name, staged)
        self._record(f"{LOAD}{name}")

    def delete(self, name: str) -> None:
        """Remove only this sender's copy, record."""
        check_data_name(name)
        self.storage.delete(self.folder.uuid, name)
        self._record(f"{DELETE}{name}")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def finish_round(folder: SenderFolder) -> None:
    """Forget a fully applied round: ``sync.log`` first (the commit point), then the rest.

    A crash after ``sync.log`` is gone leaves a folder that recovery only tidies.
    """
    durable.remove(folder.sync_log)
    durable.remove(folder.load_log)
    durable.remove(folder.sync_end)
    clear_staging(folder)


def clear_staging(folder: SenderFolder) -> None:
    """Empty ``data/`` once no log refers to it any more.

    What is left there was never confirmed to the sender (it will send it again) or is
    a load's leftover; each removal is logged, never silent (DESIGN §8.6).
    """
    top = folder.data
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
