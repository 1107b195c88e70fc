"""Each sender's schema log, kept as a byte-exact copy on the receiver (docs/design.md §4.9).

A sender ships the new part of its ``mlog.txt`` from the position it last saw
acknowledged. The receiver's copy lives at ``<schema dir>/sync/senders/<uuid>/mlog.txt``
and **its size is the receiver's position**: an increment that overlaps what is
already there (a resend after a lost acknowledgement) has the overlap skipped, so
resending is harmless; an increment that would leave a gap is refused.

Appends are raw bytes (a schema log line may be cut between two increments), so
they do not go through :class:`sealsync.durable.AppendLog`, which repairs torn
*lines*; each append is fsynced before it is acknowledged.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from receiver.folders import refuse_links
from sealsync.durable import fsync_dir
from sealsync.protocol import ErrorCode, ProtocolError

SCHEMA_LOG = "mlog.txt"


class SchemaStore:
    """The schema logs of every sender of one receiver; thread-safe per UUID."""

    def __init__(self, schema_dir: Path) -> None:
        self.root = Path(schema_dir) / "sync" / "senders"
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def path(self, uuid: str) -> Path:
        """The copy of ``uuid``'s log; ``uuid`` was validated by the protocol layer."""
        return self.root / uuid / SCHEMA_LOG

    def _uuid_lock(self, uuid: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(uuid, threading.Lock())

    def position(self, uuid: str) -> int:
        try:
            return self.path(uuid).stat().st_size
        except FileNotFoundError:
            return 0

    def append(self, uuid: str, offset: int, data: bytes) -> int:
        """Add the part of ``data`` (bytes ``offset``... of the sender's log) not yet held.

        Returns the new position. ProtocolError if ``offset`` is past the end: the
        bytes in between were never received, and the copy must stay a prefix.
        """
        with self._uuid_lock(uuid):
            path = self.path(uuid)
            size = self.position(uuid)
            if offset > size:
                raise ProtocolError(
                    f"SCHEMA: offset {offset} is past the receiver's position {size}",
                    code=ErrorCode.SCHEMA_GAP,
                )
            new = data[size - offset :]
            if not new:
                return size
            created = not path.exists()
            # No link below the schema dir is followed: it would carry the appends out.
            refuse_links(self.root.parent.parent, path.parent)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
            try:
                view = memoryview(new)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if created:  # persist the new entries up to <schema dir>/sync
                for folder in (path.parent, self.root, self.root.parent):
                    fsync_dir(folder)
            return size
