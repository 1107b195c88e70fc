"""The folder loader (docs/design.md §1.1): one sender folder's events applied in order, on its
own thread (docs/design.md §4.5).

The session hands over each event once it is in ``sync.log``, so the transfer never
waits for a load, and a sender's events are applied in the order the sender sent them
(a delete of ``X`` before a later load of ``X``). A failed event (a device conflict,
a full disk, a storage refusal) is recorded and the rest go on; its staged file and
its ``sync.log`` line stay, so recovery retries it, and ``finish`` then refuses to
clean the round (docs/design.md §9.6: nothing is erased silently).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence

from receiver.layout import SenderFolder
from receiver.load.apply import Applier, Inspect, finish_round
from receiver.load.owners import DeviceOwners
from receiver.storage import Storage
from sealsync.errors import SealsyncError
from sealsync.names import check_data_name
from sealsync.printable import printable

log = logging.getLogger(f"sealsync.{__name__}")

_LOAD = "load"
_DELETE = "delete"
MAX_LOAD_BATCH = 256
"""Loads applied together: one ``load.log`` fsync and one fsync per folder for all."""
IDLE_EXIT = 10.0
"""Seconds a loader no round holds waits for an event before its thread ends: a fleet
of thousands of edges keeps threads for the few folders in or just out of a round, not
one per sender for the life of the service (10,000 idle threads kept one receiver core
busy in the kernel)."""


class FolderLoaderClosed(SealsyncError):
    """The service is stopping and its loaders with it: an event handed over now is
    not applied; the round's ``sync.log`` has it, and recovery applies it at the next
    start."""


class FolderLoader:
    """Applies one sender folder's events in order; see the module docstring."""

    def __init__(
        self,
        folder: SenderFolder,
        storage: Storage,
        owners: DeviceOwners,
        inspect: Inspect,
        *,
        held: bool = False,
    ) -> None:
        self.folder = folder
        self._applier = Applier(folder, storage, owners, inspect)
        self._cond = threading.Condition()
        self._events: deque[tuple[str, str, Sequence[str] | None]] = deque()
        self._unapplied = 0  # queued plus the batch in progress
        self._failures: dict[str, str] = {}
        self._stopping = False
        self._held = held  # a round uses it: it does not end idle (:meth:`hold`)
        self._thread = threading.Thread(
            target=self._run, name=f"sealsync-loader-{folder.uuid}", daemon=True
        )
        self._thread.start()

    def delete(self, name: str) -> None:
        """Queue a delete; the caller has already logged it in ``sync.log``."""
        self._enqueue(_DELETE, name, None)

    def load(self, name: str, claimed: Sequence[str] | None = None) -> None:
        """Queue a load; the file is already staged and logged in ``sync.log``.

        ``claimed``: the staged file's devices if the caller read and claimed them
        already, so that the loader does not read the file a second time.
        """
        self._enqueue(_LOAD, name, claimed)

    def _enqueue(self, kind: str, name: str, devices: Sequence[str] | None) -> None:
        check_data_name(name)
        with self._cond:
            if self._stopping:
                raise FolderLoaderClosed(f"loader for {self.folder.root} is closed")
            self._events.append((kind, name, devices))
            self._unapplied += 1
            self._cond.notify_all()

    def hold(self) -> bool:
        """Keep the thread for a round until :meth:`release`; False if it has ended
        (idle, or closed): the caller starts another loader for the folder."""
        with self._cond:
            if self._stopping:
                return False
            self._held = True
            return True

    def release(self) -> None:
        """The round is over: once idle for :data:`IDLE_EXIT` seconds the thread ends."""
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._events and not self._stopping:
                    if self._held:
                        self._cond.wait()
                    elif not self._cond.wait(IDLE_EXIT) and not (self._events or self._held):
                        self._stopping = True  # idle and unheld: nothing can be queued now
                if self._stopping:
                    return  # what is still queued is in sync.log: recovery replays it
                batch = [self._events.popleft()]
                while (  # consecutive loads go together; a delete keeps its place
                    batch[0][0] == _LOAD
                    and self._events
                    and self._events[0][0] == _LOAD
                    and len(batch) < MAX_LOAD_BATCH
                ):
                    batch.append(self._events.popleft())
            problems = self._apply_batch(batch)
            with self._cond:  # ``problems`` is short if close() cut the batch
                for (_, name, _), problem in zip(batch, problems, strict=False):
                    if problem is None:
                        self._failures.pop(name, None)
                    else:
                        self._failures[name] = problem
                self._unapplied -= len(batch)
                self._cond.notify_all()

    def _apply_batch(self, batch: list[tuple[str, str, Sequence[str] | None]]) -> list[str | None]:
        kind = batch[0][0]
        if kind == _LOAD and len(batch) > 1:
            try:
                errors = self._applier.load_many(
                    [(name, devices) for _, name, devices in batch], lambda: self._stopping
                )
            except Exception as exc:  # a load must never kill the loader thread
                errors = [exc] * len(batch)
            return [
                None if error is None else self._problem(kind, name, error)
                for (_, name, _), error in zip(batch, errors, strict=False)
            ]
        _, name, devices = batch[0]
        try:
            if kind == _LOAD:
                self._applier.load(name, devices)
            else:
                self._applier.delete(name)
        except Exception as exc:
            return [self._problem(kind, name, exc)]
        return [None]

    def _problem(self, kind: str, name: str, exc: Exception) -> str:
        if isinstance(exc, SealsyncError):
            log.warning(
                "%s %s in %s failed, kept: %s",
                kind,
                printable(name),
                self.folder.root,
                printable(exc),
            )
            return str(exc)
        log.warning(  # a load must never kill the loader thread
            "%s %s in %s failed, kept for recovery: %s",
            kind,
            printable(name),
            self.folder.root,
            printable(exc),
            # an OSError names its path and cause (disk full, a planted link): a
            # traceback would add nothing; anything else is a bug, and needs one
            exc_info=None if isinstance(exc, OSError) else exc,
        )
        return f"{name}: {exc}"

    def pending(self) -> int:
        """Events handed over and not yet applied (or failed)."""
        with self._cond:
            return self._unapplied

    def failures(self) -> dict[str, str]:
        """Names whose last attempt failed, with a one-line reason each."""
        with self._cond:
            return dict(self._failures)

    def finish(self, timeout: float, *, abandoned: bool = False) -> bool:
        """Wait for the queue, then forget the round if it fully applied.

        True when every event applied and ``sync.log``, ``load.log``, ``sync.end`` and
        the staging folder are gone; False while still loading, after a failure, or
        without ``sync.end`` (the round did not finish arriving), with all state kept.

        ``abandoned``: the session died mid-round, so no ``sync.end`` will come. Every
        event it logged was handed over here, so once they all applied the round is
        forgotten now, exactly as recovery would do at the sender's next round start
        (which may never come: a rerun with nothing left to ship starts no round).
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._cond:
            while self._unapplied:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    return False
                self._cond.wait(left)
            if abandoned and self._stopping:  # an event may not have been handed over
                return False
            if self._failures or not (abandoned or self.folder.sync_end.exists()):
                return False
            self._applier.close()  # load.log is about to go; the next event starts a new one
            finish_round(self.folder)
            return True

    def close(self) -> None:
        """Stop after the event in progress; the unapplied rest is replayed by recovery."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()
        self._applier.close()

    def __enter__(self) -> FolderLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
