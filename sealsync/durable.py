"""Durable state changes: atomic replace and fsynced line appends.

A crash at any instant must leave every state file either as before or as after a
change (docs/design.md §2.1), so writers go through here and nowhere else.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from sealsync import libc


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Persist a directory entry change (create, rename, unlink) in ``path``."""
    _fsync(path, os.O_RDONLY | os.O_DIRECTORY)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Persist the data of a file someone else wrote (and did not fsync)."""
    _fsync(path, os.O_RDONLY)


def _fsync(path: str | os.PathLike[str], flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


SYNCFS = "syncfs"
"""``sync_method``: a batch of files made durable by one ``syncfs`` (the default)."""
FSYNC = "fsync"
"""``sync_method``: every file fsynced on its own."""
SYNC_METHODS = (SYNCFS, FSYNC)


def _load_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs``, if the kernel reports its write-back errors (Linux 5.8 on).

    Before 5.8 ``syncfs`` returned 0 even when writing a file back failed, so a
    verdict could follow a lost write; there, and without the call (not Linux, an
    old C library), everything is fsynced file by file.
    """
    system = os.uname()
    found = re.match(r"(\d+)\.(\d+)", system.release)
    if system.sysname != "Linux" or found is None or (int(found[1]), int(found[2])) < (5, 8):
        return None
    return libc.function("syncfs", [ctypes.c_int])


_SYNCFS = _load_syncfs()


def can_syncfs() -> bool:
    """Whether :func:`syncfs` is available here (see ``_load_syncfs``)."""
    return _SYNCFS is not None


def syncfs(fd: int) -> None:
    """Persist everything written on the file system that holds ``fd``'s file.

    Linux waits for the writes, so this gives what an fsync of every file on that
    file system would (syncfs(2)), for one call: the many small files of a batch
    share one write-back and one flush of the disk's cache. It also writes back
    other processes' files, and an error it reports may be theirs: a caller that
    must know which of its files failed fsyncs them one by one after an error.
    OSError as ``os.fsync`` raises it; RuntimeError where ``can_syncfs()`` is false.
    """
    if _SYNCFS is None:
        raise RuntimeError("syncfs is not available on this system")
    if _SYNCFS(fd) != 0:
        code = libc.errno()
        raise OSError(code, os.strerror(code))


def atomic_write(
    path: str | os.PathLike[str],
    data: bytes | str,
    mode: int = 0o644,
    *,
    replace: bool = True,
    sync: bool = True,
) -> None:
    """Publish ``data`` at ``path`` so that readers see the old or the new file, never half.

    The temporary has a name of its own in ``path``'s folder, so two writers of one
    path (two senders of one instance, a run and its rerun) never write into each
    other's temporary; the last rename wins whole. It is created private (0600) and
    set to exactly ``mode`` before any byte is written, whatever the umask, so a key
    is never readable by others, not even for an instant. A failure at any step
    removes the temporary and leaves ``path`` as it was; one a crash left behind is
    removed by the next write of ``path`` (see :func:`_remove_dead_temporaries`).

    ``replace=False`` publishes only if ``path`` does not exist yet (a hard link,
    which raises FileExistsError otherwise): "create once" without a check-then-write
    race. ``sync=False`` skips the fsyncs, for files whose crash consistency does not
    matter (the simulated edge database) but whose readers must still see them whole.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    _remove_dead_temporaries(path)
    fd, tmp = _locked_temporary(path)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
            if replace:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)
                os.unlink(tmp)
        finally:
            os.close(fd)  # only now: the lock marks the temporary live until it is renamed
    except BaseException:
        with contextlib.suppress(OSError):  # never hide the failure that got us here
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(path.parent)


def _locked_temporary(path: Path) -> tuple[int, str]:
    """A new temporary for ``path``, open and flocked: the lock says a writer owns it.

    A sweeper may lock and remove the file between its creation and our lock; the
    lock then comes once it is gone (no link left), and we take another name.
    """
    while True:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with contextlib.suppress(OSError):  # no flock here (some FUSE): no sweeping either
                fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink > 0:
                return fd, tmp
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)


def _remove_dead_temporaries(path: Path) -> None:
    """Remove the temporaries of ``path`` whose writer died (a crash, a kill).

    A shared temporary name cleaned itself up (the next writer reused it); names of
    their own would pile up after crashes instead. A live writer holds a flock on its
    temporary until it is renamed, so one that can be locked has no writer left.
    Failures are ignored: a temporary left here is only clutter, removed next time.
    """
    prefix = f".{path.name}."
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        tmp = path.parent / name
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            here, locked = os.lstat(tmp), os.fstat(fd)
            if (here.st_dev, here.st_ino) == (locked.st_dev, locked.st_ino):
                os.unlink(tmp)
        except OSError:
            pass  # locked by a live writer, or renamed or removed meanwhile
        finally:
            os.close(fd)


def write_lines(path: str | os.PathLike[str], lines: Iterable[str]) -> None:
    """Atomically replace ``path`` with one line per item, each newline-terminated."""
    atomic_write(path, "".join(f"{line}\n" for line in lines))


def read_lines(path: str | os.PathLike[str]) -> list[str]:
    """Complete lines of ``path``; a torn last line (crash mid-append) is dropped.

    A missing file reads as empty: every state file's absence has a defined meaning.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    return lines[:-1]  # the part after the last newline is empty or torn


def unlink(path: str | os.PathLike[str]) -> bool:
    """Delete ``path`` if present, without persisting the deletion; True if it existed.

    For what nothing depends on being gone after a crash: temporaries and disposable
    links, which recovery sweeps anyway."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def remove(path: str | os.PathLike[str]) -> bool:
    """Delete ``path`` if present and persist the deletion; True if it existed."""
    if not unlink(path):
        return False
    fsync_dir(Path(path).parent)
    return True


def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename and persist the change in both folders."""
    os.replace(src, dst)
    fsync_dir(Path(dst).parent)
    if Path(src).parent != Path(dst).parent:
        fsync_dir(Path(src).parent)


def rename_noreplace(src: str, dst: str) -> bool:
    """Rename ``src`` to ``dst`` only if ``dst`` does not exist, in one system call,
    without persisting it; False, with nothing done, where the C library or the file
    system cannot (then look before renaming).

    The check and the rename are one step, so a caller learns that the target was
    free from the rename itself instead of a lookup before it. FileExistsError if
    ``dst`` exists, FileNotFoundError if ``src`` does not.
    """
    return libc.renameat2(src, dst, libc.RENAME_NOREPLACE)


class AppendLog:
    """A line log whose every ``append`` is on disk before it returns.

    Crash recovery trusts a logged line to mean the event happened, so a line must
    never be reported written while it still sits in a buffer. ``append_many``
    pays one fsync for several lines (group commit).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        existed = self.path.exists()
        # O_NOFOLLOW: a link planted at a log's name would carry its appends elsewhere
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        if not existed:
            fsync_dir(self.path.parent)
        self._repair_torn_tail()

    def _repair_torn_tail(self) -> None:
        """Cut a torn last line (crash mid-append) so it never reads as an event."""
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        data = self.path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            os.ftruncate(self._fd, keep)
            os.fsync(self._fd)

    def append(self, line: str) -> None:
        self.append_many([line])

    def append_many(self, lines: Iterable[str]) -> None:
        data = "".join(f"{line}\n" for line in lines).encode("utf-8")
        if not data:
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
