"""Each sender's schema log, kept as a byte-exact copy on the receiver (docs/design.md §4.9).

A sender ships the new part of its ``mlog.txt`` from the position it last saw
acknowledged. The receiver's copy lives at ``<schema dir>/sync/senders/<uuid>/mlog.txt``
and **its size is the receiver's position**: an increment that overlaps what is
already there (a resend after a lost acknowledgement) has the overlap skipped, so
resending is harmless; an increment that would leave a gap is refused.

Appends are raw bytes (a schema log line may be cut between two increments), so
they do not go through :class:`sealsync.durable.AppendLog`, which repairs torn
*lines*; each append is fsynced before it is acknowledged.

What a sender makes the receiver keep here is bounded: each append is first offered
to the caller's ``admit`` (the session's limits: ``max_schema_bytes``,
``max_schema_bytes_per_session``, the sender's quota, which counts this copy too),
which refuses it, whole, with one line.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from receiver.folders import refuse_links
from sealsync.durable import fsync_dir
from sealsync.protocol import ErrorCode, ProtocolError

SCHEMA_LOG = "mlog.txt"

Admit = Callable[[int, int], None]
"""Called with (bytes held, new bytes) before an append; raises to refuse it."""


def schema_log_path(schema_dir: Path, uuid: str) -> Path:
    """Where sender ``uuid``'s copy is kept (``uuid`` validated by the caller)."""
    return Path(schema_dir) / "sync" / "senders" / uuid / SCHEMA_LOG


def schema_log_size(schema_dir: Path, uuid: str) -> int:
    """Bytes of sender ``uuid``'s copy (0 if it has none), for its quota."""
    try:
        return os.lstat(schema_log_path(schema_dir, uuid)).st_size
    except OSError:
        return 0


class SchemaStore:
    """The schema logs of every sender of one receiver; thread-safe per UUID."""

    def __init__(self, schema_dir: Path) -> None:
        self.schema_dir = Path(schema_dir)
        self.root = self.schema_dir / "sync" / "senders"
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def path(self, uuid: str) -> Path:
        """The copy of ``uuid``'s log; ``uuid`` was validated by the protocol layer."""
        return schema_log_path(self.schema_dir, uuid)

    def _uuid_lock(self, uuid: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(uuid, threading.Lock())

    def position(self, uuid: str) -> int:
        try:
            return self.path(uuid).stat().st_size
        except FileNotFoundError:
            return 0

    def append(self, uuid: str, offset: int, data: bytes, admit: Admit | None = None) -> int:
        """Add the part of ``data`` (bytes ``offset``... of the sender's log) not yet held.

        Returns the new position. ProtocolError if ``offset`` is past the end: the
        bytes in between were never received, and the copy must stay a prefix; and
        whatever ``admit`` raises for the new bytes (nothing is written then).
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
            if admit is not None:
                admit(size, len(new))
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
