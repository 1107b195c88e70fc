"""Writes of large received files on a thread of their own.

Hashing a chunk and then writing it on one thread would run the two one after the
other, although both release the GIL, and copying into the page cache costs about as
much as MD5 (docs/performance.md). So the session thread hashes while this thread
writes the previous chunks.

Writes of one file go out in order (one thread, one queue). A write error is kept
for the file and reported by :meth:`BackgroundWriter.wait_for`; the file's
descriptors are only closed after that wait, so a queued write can never land on a
descriptor number the process has reused for another file.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import Protocol


class Target(Protocol):
    """What the writer needs of a file being received."""

    write_error: OSError | None


QUEUE_LIMIT = 32 << 20
"""Bytes waiting to be written before the session blocks (memory bound)."""
WRITEBACK_STEP = 8 << 20
"""Each time a file's writes pass a multiple of this, the kernel is asked to start
writing the step just completed to disk. The verdict waits for the file's fsync;
without this, all of a large file's bytes were still dirty in the page cache then,
and the last file of a round waited for the whole of it to reach the disk."""


class BackgroundWriter:
    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self._limit = limit
        self._cond = threading.Condition()
        self._queue: deque[tuple[Target, int, memoryview]] = deque()
        self._queued = 0
        self._pending: dict[int, int] = {}  # id(target) -> pieces not yet written
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, target: Target, fd: int, data: memoryview) -> None:
        """Queue ``data`` for ``fd``; blocks while too much is queued already."""
        with self._cond:
            if self._closed:
                raise RuntimeError("writer closed")
            while self._queued > self._limit:
                self._cond.wait()
            self._queue.append((target, fd, data))
            self._queued += len(data)
            key = id(target)
            self._pending[key] = self._pending.get(key, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sealsync-writer", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def wait_for(self, target: Target) -> None:
        """Return once every piece queued for ``target`` is written (or failed)."""
        key = id(target)
        with self._cond:
            while self._pending.get(key):
                self._cond.wait()

    def close(self) -> None:
        """Finish what is queued, then end the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                target, fd, data = self._queue.popleft()
            size = len(data)
            if target.write_error is None:
                try:
                    while data:
                        data = data[os.write(fd, data) :]
                    _start_writeback(fd, size)
                except OSError as exc:
                    target.write_error = exc
            with self._cond:
                self._queued -= size
                key = id(target)
                left = self._pending[key] - 1
                if left:
                    self._pending[key] = left
                else:
                    del self._pending[key]
                self._cond.notify_all()


def drop_cached(fd: int) -> None:
    """Release the page cache of a durable file that this process will not read again.

    A received file is hashed, inspected and fsynced before its pages are released,
    and only renamed after. Its pages freed at once are the ones the next file's
    writes take, instead of pages the kernel must first find (reclaim on a full host,
    on a virtual machine pages the hypervisor took back), and a reload of terabytes
    does not push the host database's own working set out of the cache.
    """
    _advise(fd, 0, 0)


def _advise(fd: int, offset: int, length: int) -> None:
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
    except OSError:  # only advice: a file system that declines it costs nothing else
        pass


def _start_writeback(fd: int, written: int) -> None:
    """Start writeback of the step the last ``written`` bytes completed, if any.

    ``POSIX_FADV_DONTNEED`` starts writeback of the range's dirty pages without
    waiting for it (and drops only pages already clean): the fsync before the
    verdict then finds most of the file on disk.
    """
    end = os.lseek(fd, 0, os.SEEK_CUR)
    step = end // WRITEBACK_STEP * WRITEBACK_STEP
    if step and step > end - written:
        _advise(fd, step - WRITEBACK_STEP, WRITEBACK_STEP)
