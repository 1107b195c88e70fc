"""Is the storage still the one the receiver started with? (docs/design.md §4.10)

``serve`` checks the storage's markers before it starts (receiver/identity.py), but a
disk can go while the receiver runs: unmounted under it (its mount point, an empty
folder, is left at the path), or the folder renamed away and another one put in its
place. The receiver names its folders by path, so it would go on writing there: a
sender's next session would find none of its files, ship them all again into the
replacement, and a restart would take that folder for the storage.

So the service notes, once it holds the storage lock, each folder's device and inode
and the storage id of its marker, and looks again on a timer, at each HELLO and
before a round starts or ends. A folder that vanished, is another folder now (another
device or inode), or lost or changed its marker means the storage is gone: one error
line in the log ("storage gone: ..."), ``sealsync_receiver_storage_ok`` 0, sessions
ended, folder loaders stopped (what they had not applied stays in the rounds' logs,
in the storage, for recovery), and every sender turned away with that line (ERROR
``io``) until the same folders are back, which the timer notices too. Nothing is
written into the replacement in between.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from receiver.identity import MARKER, Folder, marker_storage
from sealsync.errors import SealsyncError

log = logging.getLogger(f"sealsync.{__name__}")

INTERVAL = 2.0
"""Seconds between the timer's looks at the storage."""


@dataclass(frozen=True)
class _Seen:
    """One folder as the receiver found it at start."""

    folder: Folder
    device: int
    inode: int
    storage: str | None
    """The storage id of its marker (None: a host's folder that carries no marker)."""


class StorageWatch:
    """The storage's identity at start, and what a look finds now; thread-safe."""

    def __init__(self, folders: Sequence[Folder]) -> None:
        self.folders = list(folders)
        self._seen: list[_Seen] = []
        self._lock = threading.Lock()
        self._problem: str | None = None

    def start(self) -> None:
        """Note each folder's identity (the service holds the storage lock now)."""
        seen = []
        for folder in self.folders:
            try:
                st = os.stat(folder.path)
            except OSError as exc:
                raise SealsyncError(
                    f"cannot read the receiver's {folder.role} {folder.path}: {exc.strerror or exc}"
                ) from None
            seen.append(_Seen(folder, st.st_dev, st.st_ino, marker_storage(folder.path)))
        with self._lock:
            self._seen = seen
            self._problem = None

    @property
    def ok(self) -> bool:
        """The storage was there at the last look (``sealsync_receiver_storage_ok``)."""
        with self._lock:
            return self._problem is None

    @property
    def problem(self) -> str | None:
        """The last look's line, None while the storage is there."""
        with self._lock:
            return self._problem

    def check(self) -> str | None:
        """Look now: the one line saying what is gone, or None. A change either way
        is logged once (an error when it goes, a warning when it is back)."""
        with self._lock:
            problem = next(filter(None, map(_problem, self._seen)), None)
            before, self._problem = self._problem, problem
        if problem is not None and before is None:
            log.error("%s", problem)
        elif problem is None and before is not None:
            log.warning(
                "storage back: every folder is the storage the receiver started with "
                "again; rounds are taken again"
            )
        return problem


def _problem(seen: _Seen) -> str | None:
    folder = seen.folder
    try:
        st = os.stat(folder.path)
    except FileNotFoundError:
        what = "vanished"
    except OSError as exc:
        what = f"cannot be read ({exc.strerror or exc})"
    else:
        if (st.st_dev, st.st_ino) != (seen.device, seen.inode):
            what = "is another folder now (renamed away or replaced, or a disk unmounted)"
        elif seen.storage is None:
            return None
        else:
            now = marker_storage(folder.path)
            if now == seen.storage:
                return None
            what = f"lost its {MARKER}" if now is None else f"holds storage {now} now"
    started = f" (storage {seen.storage})" if seen.storage is not None else ""
    return (
        f"storage gone: {folder.key} {folder.path}{started} {what} since the receiver "
        "started: no round is taken and nothing is written until it is back; mount it "
        "back, or stop the receiver and put the storage in place (`sealsync serve` then "
        "checks it)"
    )
