"""One sender's loader: applies its events in arrival order on a thread of its own (DESIGN §4).

The session hands over each event once it is in ``sync.log``, so the transfer never
waits for a load, and a sender's events are applied in the order the sender sent them
(a delete of ``X`` before a later load of ``X``). A failed event (a device conflict,
a full disk, a storage refusal) is recorded and the rest go on; its staged file and
its ``sync.log`` line stay, so recovery retries it, and ``finish`` then refuses to
clean the round (DESIGN §8.6: nothing is erased silently).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from sealsync.errors import SealsyncError
from sealsync.names import check_data_name

from ..layout import SenderFolder
from ..storage import Storage
from .apply import Applier, Inspect, finish_round
from .owners import DeviceOwners

log = logging.getLogger(__name__)

_LOAD = "load"
_DELETE = "delete"


class Loader:
    """Applies one sender folder's events in order; see the module docstring."""

    def __init__(
        self,
        folder: SenderFolder,
        storage: Storage,
        owners: DeviceOwners,
        inspect: Inspect,
    ) -> None:
        self.folder = folder
        self._applier = Applier(folder, storage, owners, inspect)
        self._cond = threading.Condition()
        self._events: deque[tuple[str, str]] = deque()
        self._unapplied = 0  # queued plus the one in progress
        self._failures: dict[str, str] = {}
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"sealsync-loader-{folder.uuid}", daemon=True
        )
        self._thread.start()

    def delete(self, name: str) -> None:
        """Queue a delete; the caller has already logged it in ``sync.log``."""
        self._enqueue(_DELETE, name)

    def load(self, name: str) -> None:
        """Queue a load; the file is already staged and logged in ``sync.log``."""
        self._enqueue(_LOAD, name)

    def _enqueue(self, kind: str, name: str) -> None:
        check_data_name(name)
        with self._cond:
            if self._stopping:
                raise SealsyncError(f"loader for {self.folder.root} is closed")
            self._events.append((kind, name))
            self._unapplied += 1
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._events and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return  # what is still queued is in sync.log: recovery replays it
                kind, name = self._events.popleft()
            problem = self._apply(kind, name)
            with self._cond:
                if problem is None:
                    self._failures.pop(name, None)
                else:
                    self._failures[name] = problem
                self._unapplied -= 1
                self._cond.notify_all()

    def _apply(self, kind: str, name: str) -> str | None:
        try:
            if kind == _LOAD:
                self._applier.load(name)
            else:
                self._applier.delete(name)
        except SealsyncError as exc:
            log.warning("%s %s in %s failed, kept: %s", kind, name, self.folder.root, exc)
            return str(exc)
        except Exception as exc:  # a load must never kill the loader thread
            log.warning(
                "%s %s in %s failed, kept for recovery: %s",
                kind,
                name,
                self.folder.root,
                exc,
                exc_info=True,
            )
            return f"{name}: {exc}"
        return None

    def pending(self) -> int:
        """Events handed over and not yet applied (or failed)."""
        with self._cond:
            return self._unapplied

    def failures(self) -> dict[str, str]:
        """Names whose last attempt failed, with a one-line reason each."""
        with self._cond:
            return dict(self._failures)

    def finish(self, timeout: float) -> bool:
        """Wait for the queue, then forget the round if it fully applied.

        True when every event applied and ``sync.log``, ``load.log``, ``sync.end`` and
        the staging folder are gone; False while still loading, after a failure, or
        without ``sync.end`` (the round did not finish arriving), with all state kept.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._cond:
            while self._unapplied:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    return False
                self._cond.wait(left)
            if self._failures or not self.folder.sync_end.exists():
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

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
