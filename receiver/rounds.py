"""Which sender folders have a round in flight, and their loaders (docs/design.md §4.2).

One loader per sender folder applies that folder's events in order on its own thread,
across rounds; a round holds it, and once released and idle its thread ends
(:data:`receiver.load.loader.IDLE_EXIT`), a later round starting another. A round may start on a
folder only when nobody else is using it: no other session in a round on it, the
loader idle, and the last round's logs recovered. Otherwise the sender is told
*busy* and retries on its next run — never two writers on one ``sync.log``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from receiver.folders import refuse_links
from receiver.incoming import sweep_temporaries
from receiver.layout import SenderFolder
from receiver.load.loader import FolderLoader
from receiver.load.owners import DeviceOwners
from receiver.recover.replay import recover_folder
from receiver.storage import Storage

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")


class Busy(Exception):
    """A round cannot start on this folder now; the message is for the sender."""


class Rounds:
    """The loaders and the folders in a round, shared by every session of a service."""

    def __init__(
        self, storage: Storage, owners: DeviceOwners, inspect: Callable[[Path], FileInfo]
    ) -> None:
        self.storage = storage
        self.owners = owners
        self.inspect = inspect
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._loaders: dict[SenderFolder, FolderLoader] = {}
        self._active: set[SenderFolder] = set()
        self._closed = False
        self._gone: str | None = None  # the storage is gone: why (receiver/liveness.py)

    def begin(self, folder: SenderFolder, wait: float = 0.0) -> FolderLoader:
        """Claim ``folder`` for a round and return its loader; Busy if it is not free.

        Up to ``wait`` seconds go to the end of the folder's last round, if its session
        is still winding down or its loads are still running: a sender reconnecting
        right after a dropped connection meets both. The caller must call :meth:`end`
        when the round is over (or the session died).
        """
        deadline = time.monotonic() + max(wait, 0.0)
        with self._lock:
            while True:
                if self._closed:
                    raise Busy("the receiver is stopping")
                if self._gone is not None:
                    raise Busy(self._gone)
                if folder not in self._active:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Busy("another session is in a round for this sender and data dir")
                self._freed.wait(left)
            self._active.add(folder)
        try:
            return self._prepare(folder, max(deadline - time.monotonic(), 0.0))
        except BaseException:
            self.end(folder)
            raise

    def _prepare(self, folder: SenderFolder, wait: float) -> FolderLoader:
        refuse_links(folder.data_dir, folder.data)  # before recovery or a write touches it
        ended = None
        with self._lock:
            loader = self._loaders.get(folder)
            if loader is not None and not loader.hold():  # it ended idle: all applied
                ended, loader = self._loaders.pop(folder), None
        if ended is not None:
            ended.close()  # its thread is gone; its handle on load.log goes too
        if loader is not None and loader.pending():
            loader.finish(wait)  # the loads of an abandoned round: let them land first
            if loader.pending():
                raise Busy(f"still loading {loader.pending()} files of the last round")
        if any(p.exists() for p in (folder.sync_log, folder.load_log, folder.sync_end)):
            # The last round did not finish cleanly. The idle loader is replaced so
            # that it cannot hold a handle on a log that recovery deletes.
            if loader is not None:
                self._drop(folder)
                loader = None
            if not recover_folder(folder, self.storage, self.owners, self.inspect):
                raise Busy("files of an earlier round could not be loaded yet (see receiver log)")
        folder.data.mkdir(parents=True, exist_ok=True)
        sweep_temporaries(folder.data)
        if loader is None:
            loader = FolderLoader(folder, self.storage, self.owners, self.inspect, held=True)
            with self._lock:
                if self._closed:
                    loader.close()
                    raise Busy("the receiver is stopping")
                self._loaders[folder] = loader
        return loader

    def loader(self, folder: SenderFolder) -> FolderLoader | None:
        """The folder's loader, if one was created (for status and tests)."""
        with self._lock:
            return self._loaders.get(folder)

    def _drop(self, folder: SenderFolder) -> None:
        with self._lock:
            loader = self._loaders.pop(folder, None)
        if loader is not None:
            loader.close()

    def end(self, folder: SenderFolder) -> None:
        with self._lock:
            self._active.discard(folder)
            loader = self._loaders.get(folder)
            self._freed.notify_all()
        if loader is not None:
            loader.release()

    def suspend(self, reason: str) -> None:
        """The storage is gone: no round starts and every loader stops (what it had not
        applied stays in its round's logs, in the storage, for recovery), so that
        nothing is written into whatever is at the storage's path now."""
        with self._lock:
            self._gone = reason
            self._freed.notify_all()
        self._stop_loaders()

    def resume(self) -> None:
        """The storage is back: rounds start again (a folder whose loader was stopped
        is recovered at its next round start)."""
        with self._lock:
            self._gone = None

    def close(self) -> None:
        """Stop every loader; what they had not applied is replayed by recovery at start."""
        with self._lock:
            self._closed = True
            self._freed.notify_all()
        self._stop_loaders()

    def _stop_loaders(self) -> None:
        with self._lock:
            loaders, self._loaders = list(self._loaders.values()), {}
        for loader in loaders:
            try:
                loader.close()
            except Exception:
                log.exception("closing a loader failed")
