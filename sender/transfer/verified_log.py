"""Verified names into ``sync.log`` on a thread of their own (group commit).

An fsync per verdict batch on the sending thread would leave the link idle while the log
flushes, and with small files that is most of a round (docs/performance.md, "Figures
behind choices in the code"). Here the fsyncs run beside the sending, and every name
that arrives during one fsync goes into the next, so a fast receiver costs a handful of
fsyncs per window.

Logging a verified name late is always safe: until its line is on disk the file
simply counts as unsynced (a crash resends it, the receiver takes it idempotently).
The round flushes before it writes ``sync tsfile end`` and before recovery reads the
log, so the log's sections stay in order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path

from sealsync.crashpoints import crash_point
from sealsync.errors import LocalIOError
from sealsync.synclog import SyncLog

_STOP = object()


class VerifiedLog:
    """Appends names to ``slog``'s tsfile section from a background thread."""

    def __init__(
        self, slog: SyncLog, path: Path, logged: Callable[[list[str]], None] | None = None
    ) -> None:
        """``logged``: called on this thread with each batch of names once it is on disk
        (the round drops their snapshot links there, off its own serial path)."""
        self._slog = slog
        self._path = path
        self._logged = logged
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._pending = 0
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="sealsync-synclog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            batch: list[str] = []
            stop = item is _STOP
            if not stop:
                batch.append(item)  # type: ignore[arg-type]
            while not stop:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                else:
                    batch.append(item)  # type: ignore[arg-type]
            if batch:
                try:
                    if self._error is None:
                        self._slog.tsfile_many(batch)
                        crash_point("sender.synclog.tsfile")
                        if self._logged is not None:
                            self._logged(batch)
                except BaseException as exc:  # reported to the round at its next call
                    self._error = exc
                with self._cond:
                    self._pending -= len(batch)
                    self._cond.notify_all()
            if stop:
                return

    def _check(self) -> None:
        if self._error is not None:
            exc = self._error
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise LocalIOError(f"cannot write {self._path}: {reason}")

    def add(self, names: list[str]) -> None:
        self._check()
        if not names:
            return
        with self._cond:
            self._pending += len(names)
        for name in names:
            self._queue.put(name)

    def flush(self) -> None:
        """Return once every added name is on disk (or raise why it is not)."""
        with self._cond:
            while self._pending and self._thread.is_alive():
                self._cond.wait(0.5)
        self._check()

    def close(self) -> None:
        """Flush what is queued and end the thread."""
        self._queue.put(_STOP)
        self._thread.join()
        self._check()
