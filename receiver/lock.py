"""One receiver per storage: ``receiver.lock`` in the schema dir and every data dir.

Two receivers on the same folders would both replay the same rounds at start, load
the same files and append to the same device owner log, each believing itself
alone. So the receiver (``sealsync serve`` and the plugin in a host process alike)
takes an exclusive lock on each of its folders before it touches any of them, and
holds it for as long as it runs; a second one stops at once with its own exit code
(75, as a second sender does).

The locks are the kernel's (``flock``): a receiver killed by SIGKILL leaves no stale
lock behind. The holder's pid is written into the lock file for humans and for
``sealsync status``, which asks the kernel whether the lock is held rather than
trusting the file. Within one process the lock is not reentrant either: two
services on the same folders in one host are as wrong as in two.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from receiver.folders import refuse_links
from receiver.layout import RECEIVER_FOLDER
from sealsync.errors import LockHeld, SealsyncError

LOCK_NAME = "receiver.lock"
PATIENCE = 1.0
"""Seconds a starting receiver retries a held lock: ``status`` holds it for an instant
while it asks, which must not fail a receiver starting at that moment."""
_RETRY = 0.05


def lock_paths(schema_dir: Path, data_dirs: Iterable[Path]) -> list[Path]:
    """The lock files of one receiver's storage, schema dir first."""
    return [
        Path(schema_dir) / "sync" / LOCK_NAME,
        *(Path(d) / RECEIVER_FOLDER / LOCK_NAME for d in data_dirs),
    ]


class ReceiverLocked(LockHeld):
    """Another receiver serves one of these folders (exit code 75)."""


@dataclass(frozen=True)
class Holder:
    """A receiver that holds a storage lock: the lock file and its pid, if written."""

    path: Path
    pid: int | None

    def message(self) -> str:
        return (
            f"another receiver ({_describe(self.pid)}) serves this storage: {self.path} is locked"
        )


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _describe(pid: int | None) -> str:
    return f"pid {pid}" if pid is not None else "pid unknown"


class StorageLock:
    """The locks of one receiver's storage, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, schema_dir: Path, data_dirs: Iterable[Path]) -> None:
        self.paths = lock_paths(schema_dir, data_dirs)
        self._held: list[int] = []

    @property
    def held(self) -> bool:
        return bool(self._held)

    def acquire(self) -> StorageLock:
        """Take every lock or none; ReceiverLocked names the holder's pid."""
        if self._held:
            return self
        try:
            for path in self.paths:
                self._held.append(self._take(path))
        except BaseException:
            self.release()
            raise
        return self

    def _take(self, path: Path) -> int:
        try:
            # The configured folder exists (the config checks it); its sync/ or
            # sync-receiver/ subfolder is the receiver's own to make, and never a link
            # (everything the receiver writes there would go where it points).
            refuse_links(path.parent.parent, path)
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise SealsyncError(
                f"cannot open the receiver lock {path}: {exc.strerror or exc}"
            ) from None
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    pid = _read_pid(fd)
                    os.close(fd)
                    raise ReceiverLocked(Holder(path, pid).message()) from None
                time.sleep(_RETRY)
            except OSError as exc:
                os.close(fd)
                raise SealsyncError(
                    f"cannot lock the receiver lock {path}: {exc.strerror or exc}"
                ) from None
        # Written in place, not by an atomic replace: the lock lives on this inode. The
        # pid is for humans; nothing trusts it without asking the kernel.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError:
            pass
        return fd

    def release(self) -> None:
        """Drop every lock held (idempotent); the pid is cleared first."""
        held, self._held = self._held, []
        for fd in reversed(held):
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            os.close(fd)

    def __enter__(self) -> StorageLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(schema_dir: Path, data_dirs: Iterable[Path]) -> Holder | None:
    """The receiver running on this storage, if any; takes no lock but for an instant.

    A lock file nobody holds (left by a receiver that stopped or was killed) says
    nothing runs, whatever pid it still holds.
    """
    for path in lock_paths(schema_dir, data_dirs):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # never created, or unreadable: no answer from this one
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return Holder(path, _read_pid(fd))
            except OSError:
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return None
