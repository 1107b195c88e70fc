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
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from receiver.folders import safe_dirs
from receiver.layout import SenderFolder, SyncLog
from receiver.load.loader import FolderLoader
from sealsync.crashpoints import crash_point
from sealsync.protocol import ErrorCode, ProtocolError


class RoundState:
    """The state of one round in flight on one sender folder: its counters, its
    staging folders, and its ``sync.log`` written in the order the module describes."""

    def __init__(self, folder: SenderFolder, loader: FolderLoader) -> None:
        self.folder = folder
        self.loader = loader
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
        """Verified names, one fsync for all of them."""
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
