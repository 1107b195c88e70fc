"""Durable state changes: atomic replace and fsynced line appends.

A crash at any instant must leave every state file either as before or as after a
change (docs/design.md §2.1), so writers go through here and nowhere else.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


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


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never half."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


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


def remove(path: str | os.PathLike[str]) -> bool:
    """Delete ``path`` if present and persist the deletion; True if it existed."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(Path(path).parent)
    return True


def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename and persist the change in both folders."""
    os.replace(src, dst)
    fsync_dir(Path(dst).parent)
    if Path(src).parent != Path(dst).parent:
        fsync_dir(Path(src).parent)


class AppendLog:
    """A line log whose every ``append`` is on disk before it returns.

    Crash recovery trusts a logged line to mean the event happened, so a line must
    never be reported written while it still sits in a buffer. ``append_many``
    pays one fsync for several lines (group commit).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        existed = self.path.exists()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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
