"""One round in flight on one sender folder, and its ``sync.log`` (docs/design.md §5.2).

The receiver's ``sync.log`` of a round, written with the sender's ``SyncLog`` (same
vocabulary, same parser), always has this shape::

    sync start
    sync deleted file names start      } only when the round deletes something:
    <name acknowledged as deleted>...  } opened at the first DELETE,
    sync deleted file names end        } closed at the first file or at ROUND_END
    sync tsfile start                  opened at the first verified file (or ROUND_END)
    <name of a verified file>...
    sync tsfile end                    at ROUND_END
    sync end                           at ROUND_END, then ``sync.end`` is created

Its writes are crash points (``sealsync.crashpoints``), so that recovery is tested
from the prefixes of this shape a crash can leave.

The round's staging folders are bounded before any is made: a name deeper than
``MAX_STAGING_DEPTH`` folders, or one whose new folders would take the sender's
rounds in flight past ``max_staging_folders``, is refused at its FILE_BEGIN
(:meth:`RoundState.staging_problem`), and the folders a round made and left empty (a
refused file's) go when it ends, done or abandoned (:meth:`RoundState.prune`): every
one is an fsynced inode no byte quota sees.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from receiver.folders import safe_dirs
from receiver.layout import SenderFolder, SyncLog
from receiver.limits import ByteLedger
from receiver.load.loader import FolderLoader
from sealsync import durable
from sealsync.crashpoints import crash_point
from sealsync.protocol import ErrorCode, ProtocolError

MAX_STAGING_DEPTH = 64
"""Folders a staged name may nest (``sequence/`` included): IoTDB's names nest 4."""


class RoundState:
    """The state of one round in flight on one sender folder: its counters, its
    staging folders, and its ``sync.log`` written in the order the module describes."""

    def __init__(
        self, folder: SenderFolder, loader: FolderLoader, folders: ByteLedger | None = None
    ) -> None:
        """``folders``: staging folders per sender (a count, ``max_staging_folders``),
        shared by the sender's rounds in flight; this round takes from it what it makes."""
        self.folder = folder
        self.loader = loader
        self._budget = folders if folders is not None else ByteLedger(None)
        self._taken = 0  # of the budget, given back when the round ends
        self._known: set[str] = set()  # staging folders this round made or found there
        self._made: list[str] = []  # those it made, parents first
        self._used: set[str] = set()  # folders of files in sync.log: the loader's now
        self.sync_log = SyncLog(folder.sync_log)
        self.deleted_open = False
        self.deleted_done = False
        self.tsfile_open = False
        self.started = time.monotonic()
        self.received = 0  # files verified
        self.refused = 0  # any other verdict
        self.deleted = 0
        self.bytes = 0  # of every file stream received whole
        self._folders: dict[str, bool] = {}  # staging folders made (True) or refused
        self.sync_log.start()
        crash_point("receiver.synclog.start")

    def staging_problem(self, name: str) -> str | None:
        """Why ``name`` may not be staged in this round (None: it may), taking the
        staging folders it needs from the sender's budget: checked at its FILE_BEGIN,
        before anything is made, so a refused name makes nothing."""
        path = self.folder.staged_name(name)
        depth = name.count("/")
        if depth > MAX_STAGING_DEPTH:
            return (
                f"the name nests {depth} folders; the receiver stages at most {MAX_STAGING_DEPTH}"
            )
        top = os.fspath(self.folder.data)
        missing: list[str] = []
        parent = os.path.dirname(path)
        while parent != top and parent not in self._known:
            if os.path.isdir(parent):  # left by an earlier round: nothing to make
                break
            missing.append(parent)
            parent = os.path.dirname(parent)
        if missing:
            uuid = self.folder.uuid
            if not self._budget.reserve(uuid, len(missing)):
                return (
                    f"the sender's rounds in flight made {self._budget.held(uuid)} staging "
                    f"folders; this name needs {len(missing)} more, past max_staging_folders "
                    f"({self._budget.limit}): it is offered again next round"
                )
            self._taken += len(missing)
            self._made.extend(reversed(missing))
            self._known.update(missing)
        return None

    def prune(self) -> int:
        """Remove the staging folders this round made for files it did not log (refused
        ones), that are empty, deepest first, and give them back to the sender's
        budget; returns how many went. Folders of logged files are the loader's until
        the round is cleaned up (it moves their files out and persists the folder:
        one gone under it would fail the load), and go with that clean-up. Only this
        round's folders, never one holding anything, never through a link (``rmdir``
        refuses all three)."""
        removed = 0
        parents: set[str] = set()
        for folder in reversed(self._made):
            if folder in self._used:
                continue
            try:
                os.rmdir(folder)
            except OSError:
                continue  # not empty, or gone
            removed += 1
            parents.discard(folder)
            parents.add(os.path.dirname(folder))
        self._made = []
        self._known.clear()
        self._budget.release(self.folder.uuid, self._taken)
        self._taken = 0
        for parent in parents:  # the removals persist with one fsync per surviving parent
            try:
                durable.fsync_dir(parent)
            except OSError:
                pass  # gone too (a clean-up meanwhile): nothing to persist
        return removed

    def abandon(self) -> None:
        """The session ended mid-round: its empty staging folders go now, before the
        loader drains (the rest go with the round's clean-up, or at recovery), and
        what it took of the sender's budget comes back whatever else fails."""
        try:
            self.sync_log.close()
        finally:
            self.prune()

    def staging_path(self, name: str) -> str | None:
        """Where ``name`` is staged, its folder made (checked and made once a round, and
        checked again by every batch's staging), for its stream to be written there
        directly; None if the folder cannot be made: the stream then goes to
        temporaries, and staging says why."""
        path = self.folder.staged_name(name)
        parent = os.path.dirname(path)
        made = self._folders.get(parent)
        if made is None:
            try:
                safe_dirs(self.folder.data, Path(parent))
                made = True
            except OSError:
                made = False
            self._folders[parent] = made
        return path if made else None

    def log_deleted(self, name: str) -> None:
        if self.deleted_done:
            raise ProtocolError(
                "DELETE not expected after the first file", code=ErrorCode.UNEXPECTED
            )
        if not self.deleted_open:
            self.sync_log.deleted_start()
            crash_point("receiver.synclog.deleted_start")
            self.deleted_open = True
        self.sync_log.deleted(name)
        crash_point("receiver.synclog.deleted")

    def close_deleted(self) -> None:
        if self.deleted_open:
            self.sync_log.deleted_end()
            crash_point("receiver.synclog.deleted_end")
            self.deleted_open = False
        self.deleted_done = True

    def log_tsfiles(self, names: list[str]) -> None:
        """Verified names, one fsync for all of them; their folders are the loader's
        from now on (never pruned)."""
        top = os.fspath(self.folder.data)
        for name in names:
            folder = os.path.dirname(self.folder.staged_name(name))
            while folder != top and folder not in self._used:
                self._used.add(folder)
                folder = os.path.dirname(folder)
        if not self.tsfile_open:
            self.sync_log.tsfile_start()
            crash_point("receiver.synclog.tsfile_start")
            self.tsfile_open = True
        self.sync_log.tsfile_many(names)
        crash_point("receiver.synclog.tsfile")

    def end(self) -> None:
        self.close_deleted()
        if not self.tsfile_open:
            self.sync_log.tsfile_start()
            self.tsfile_open = True
        self.sync_log.tsfile_end()
        crash_point("receiver.synclog.tsfile_end")
        self.sync_log.end()
        crash_point("receiver.synclog.end")
        self.sync_log.close()
        self.prune()  # (if a write above fails, the session abandons the round: abandon())
