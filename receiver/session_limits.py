"""What one sender may hold through its sessions, and one session's share of it.

The counters are the service's and shared by every session (``receiver.limits``);
:class:`SessionAdmission` is one session's side of them: the session slot it holds
for its sender's UUID, and the bytes each of its unfinished uploads reserved, so that
whatever way a session ends it gives back exactly what it took.

* sessions per UUID, taken at HELLO (ERROR ``busy`` beyond ``max_sessions_per_sender``);
* bytes of unfinished uploads, reserved at each FILE_BEGIN by the announced size: a
  file that does not fit is refused (read and dropped, never written) and offered
  again next round; kept partial uploads count too, the sender's in every data dir
  whichever address kept them;
* bytes stored, against the sender's quota: past it the session ends with ERROR
  ``quota``, since nothing more can be stored until files are deleted or the quota
  is raised. What is stored is everything the sender makes the receiver keep: its
  files, staged and loaded, its kept partial uploads, its copy of the schema log and
  its lines of ``device_owner.log``;
* bytes of schema log: what one sender's copy may hold (``max_schema_bytes``) and
  what one session may append (``max_schema_bytes_per_session``), ERROR ``quota``
  past either, whatever the quota;
* staging folders the sender's rounds in flight may make (``max_staging_folders``,
  :class:`~receiver.round_state.RoundState` takes them).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from receiver.incoming import TEMP_PREFIX, IncomingFile
from receiver.layout import RECEIVER_FOLDER, partial_dir
from receiver.limits import ByteLedger, Quota, SlotCounter
from receiver.load.owners import DeviceOwners
from receiver.partials import Partial, PartialStore, is_claimed, sender_partials
from receiver.schema import schema_log_size
from receiver.storage import Storage
from sealsync.config import ReceiverConfig
from sealsync.errors import SealsyncError
from sealsync.printable import printable
from sealsync.protocol import ErrorCode, ProtocolError

log = logging.getLogger(f"sealsync.{__name__}")

T = TypeVar("T")


@dataclass
class SessionLimits:
    """What one sender may hold (``receiver.limits``); the defaults limit nothing."""

    sender_sessions: SlotCounter = field(default_factory=lambda: SlotCounter(None))
    """Sessions per sender UUID (``max_sessions_per_sender``)."""
    partial: ByteLedger = field(default_factory=lambda: ByteLedger(None))
    """Bytes of unfinished uploads per sender UUID (``max_partial_bytes``)."""
    quota: Quota | None = None
    """Bytes stored per sender UUID (``sender_quota_bytes``), None: no quota."""
    schema_max: int | None = None
    """Bytes one sender's copy of its schema log may hold (``max_schema_bytes``)."""
    schema_per_session: int | None = None
    """Bytes of schema log one session may append (``max_schema_bytes_per_session``)."""
    staging: ByteLedger = field(default_factory=lambda: ByteLedger(None))
    """Staging folders per sender UUID made by its rounds in flight (a count:
    ``max_staging_folders``)."""
    stall_timeout: float | None = None
    """A frame or file stream with less than ``min_transfer_rate`` bytes a second over
    this many seconds has stalled; None: only the channel's idle timeout applies."""
    min_transfer_rate: int = 1


def limits_for(
    config: ReceiverConfig, storage: Storage, owners: DeviceOwners | None = None
) -> SessionLimits:
    """The limits ``config`` sets, counted over ``storage`` (and ``owners``' log, for
    the quota); SealsyncError if it sets a quota that ``storage`` cannot measure."""
    quota = None
    if config.sender_quota_bytes:
        if not storage.measures_usage:
            raise SealsyncError(
                "sender_quota_bytes needs a storage that can measure a sender's files "
                "(measures_usage, as the directory storage has)"
            )
        data_dirs = list(config.data_dirs)
        usage = storage.usage
        schema_dir = config.schema_dir

        def measure(uuid: str) -> int:
            kept = schema_log_size(schema_dir, uuid)
            if owners is not None:
                kept += owners.owned_bytes(uuid)
            return stored_bytes(usage, data_dirs, uuid) + kept

        quota = Quota(config.sender_quota_bytes, measure)
    return SessionLimits(
        sender_sessions=SlotCounter(config.max_sessions_per_sender),
        partial=ByteLedger(config.max_partial_bytes),
        quota=quota,
        schema_max=config.max_schema_bytes or None,
        schema_per_session=config.max_schema_bytes_per_session,
        staging=ByteLedger(config.max_staging_folders),
        # inside a frame the receiver never waits longer than between frames
        stall_timeout=min(config.stall_timeout, config.idle_timeout),
        min_transfer_rate=config.min_transfer_rate,
    )


def stored_bytes(usage: Callable[[str], int], data_dirs: Sequence[Path], uuid: str) -> int:
    """What ``uuid`` holds here: its loaded files (``usage``, the storage's count),
    staged ones waiting to load, and its kept partial uploads."""
    total = int(usage(uuid))
    for data_dir in data_dirs:
        folders = [f / "data" for f in (Path(data_dir) / RECEIVER_FOLDER).glob(f"*_{uuid}")]
        folders.append(partial_dir(data_dir, uuid))
        for here, _dirs, files in itertools.chain.from_iterable(
            os.walk(f) for f in folders if not f.is_symlink()
        ):
            for name in files:
                if name.startswith(TEMP_PREFIX):
                    continue  # unfinished uploads: counted by max_partial_bytes
                try:
                    total += os.lstat(os.path.join(here, name)).st_size
                except OSError:
                    pass  # loaded or removed meanwhile
    return total


class SessionAdmission:
    """One session's holdings against its sender's limits.

    ``flush`` commits and answers the session's complete streams and says whether
    there were any: staged files are no longer unfinished uploads, and stored ones
    count against the quota, so a stream that does not fit is admitted again after it.
    """

    def __init__(
        self, limits: SessionLimits, flush: Callable[[], bool], data_dirs: Sequence[Path] = ()
    ) -> None:
        """``data_dirs``: the receiver's, where the sender's kept partial uploads are
        counted (all of them, whichever address kept them)."""
        self.limits = limits
        self.data_dirs = list(data_dirs)
        self.uuid = ""
        self._flush = flush
        self._slot = False  # holds one of limits.sender_sessions for self.uuid
        self._reserved: dict[int, int] = {}  # id(stream) -> bytes held in limits.partial
        self._schema_appended = 0  # bytes of schema log this session appended

    # --- sessions per sender ---------------------------------------------------------

    def open_session(self, uuid: str, peer_ip: str) -> None:
        """Take one of ``uuid``'s session slots, or end the session with ERROR ``busy``."""
        sessions = self.limits.sender_sessions
        if not sessions.acquire(uuid):
            log.warning(
                "refused: sender %s from %s already has %d sessions open",
                uuid,
                peer_ip,
                sessions.count(uuid),
            )
            raise ProtocolError(
                f"receiver busy: sender {uuid} already has {sessions.limit} sessions open "
                "(max_sessions_per_sender), retry later",
                code=ErrorCode.BUSY,
            )
        self._slot = True
        self.uuid = uuid

    def close_session(self) -> None:
        """Give the session slot back (once)."""
        if self._slot:
            self.limits.sender_sessions.release(self.uuid)
            self._slot = False

    # --- the quota -------------------------------------------------------------------

    def round_started(self) -> None:
        """Measure what the sender stores, once per sender, here rather than mid-stream."""
        if self.limits.quota is not None:
            self.limits.quota.used(self.uuid)

    def stored(self, size: int) -> None:
        """A file of ``size`` bytes was stored for the sender."""
        if self.limits.quota is not None:
            self.limits.quota.add(self.uuid, size)

    def _over_quota(self, size: int) -> int | None:
        quota = self.limits.quota
        assert quota is not None
        return quota.over(self.uuid, self.limits.partial.held(self.uuid) + size)

    # --- the schema log --------------------------------------------------------------

    def admit_schema(self, held: int, new: int) -> None:
        """``new`` more bytes for the sender's copy of its schema log (``held`` now),
        or ERROR ``quota`` naming the limit: past what one session may append (the
        rest comes with the next connection), past what the copy may hold, past the
        sender's quota. Counted against the quota once admitted."""
        limits = self.limits
        per_session = limits.schema_per_session
        if per_session is not None and self._schema_appended + new > per_session:
            raise ProtocolError(
                f"sender {self.uuid} appended {self._schema_appended} bytes of schema log in "
                f"this session; {new} more would exceed max_schema_bytes_per_session "
                f"({per_session}): the rest is taken at its next connection",
                code=ErrorCode.QUOTA,
            )
        if limits.schema_max is not None and held + new > limits.schema_max:
            raise ProtocolError(
                f"sender {self.uuid}'s schema log copy holds {held} bytes; {new} more would "
                f"exceed max_schema_bytes ({limits.schema_max}): raise it on the receiver "
                "if the sender's schema log is really that large",
                code=ErrorCode.QUOTA,
            )
        quota = limits.quota
        if quota is not None:
            used = quota.over(self.uuid, new)
            if used is not None:
                raise ProtocolError(
                    f"sender {self.uuid} holds {used} bytes on the receiver (its schema log "
                    f"included); {new} more bytes of schema log would exceed its quota of "
                    f"{quota.limit} bytes (sender_quota_bytes); nothing more is stored until "
                    "files are deleted or the quota is raised",
                    code=ErrorCode.QUOTA,
                )
            quota.add(self.uuid, new)
        self._schema_appended += new

    # --- unfinished uploads ----------------------------------------------------------

    def admit(
        self, size: int, store: PartialStore | None, resuming: str | None = None
    ) -> str | None:
        """Reserve ``size`` bytes of unfinished uploads for this sender, or say why not.

        Over ``max_partial_bytes`` the file is refused (its bytes are read and dropped,
        nothing is written) and the sender offers it again next round; over the
        sender's storage quota the session ends with ERROR ``quota``: nothing more can
        be stored until files are deleted or the quota is raised. ``resuming``: the
        name of the partial upload this stream resumes, which ``store`` keeps.
        """
        limits = self.limits
        partial = limits.partial
        if partial.limit is not None and size > partial.limit:
            return (
                f"a file of {size} bytes is larger than the receiver takes in one upload "
                f"(max_partial_bytes = {partial.limit})"
            )
        if limits.quota is not None and self._over_quota(size) is not None:
            self._flush()  # what already arrived is answered (and counted) first
            used = self._over_quota(size)
            if used is not None:
                raise ProtocolError(
                    f"sender {self.uuid} holds {used} bytes on the receiver; a file of "
                    f"{size} bytes would exceed its quota of {limits.quota.limit} bytes "
                    "(sender_quota_bytes); nothing more is stored until files are deleted "
                    "or the quota is raised",
                    code=ErrorCode.QUOTA,
                )
        if partial.reserve(self.uuid, size):
            if resuming is not None:
                self._make_room(store, resuming)
            return None
        if self._flush():  # staged files are no longer unfinished uploads
            if partial.reserve(self.uuid, size):
                if resuming is not None:
                    self._make_room(store, resuming)
                return None
        return (
            f"the receiver already holds {partial.held(self.uuid)} bytes of unfinished "
            f"uploads from this sender; a file of {size} bytes would exceed "
            f"max_partial_bytes = {partial.limit}"
        )

    def _kept(
        self, store: PartialStore | None, name: str | None
    ) -> list[tuple[PartialStore, Partial]]:
        """The sender's kept partial uploads in every data dir, newest first, but
        ``store``'s partial of ``name``."""
        here = store.dir if store is not None else None
        kept = [
            (s, p)
            for s, p in sender_partials(self.data_dirs, self.uuid)
            if not (s.dir == here and p.name == name)
        ]
        kept.sort(key=lambda sp: sp[1].saved, reverse=True)
        return kept

    def _make_room(self, store: PartialStore | None, resuming: str) -> None:
        """Kept partial uploads count against ``max_partial_bytes``, from whatever address
        and in whatever data dir they were kept: the oldest go (never the one being
        resumed) when the streams in flight need their room."""
        partial = self.limits.partial
        if partial.limit is None or store is None:
            return
        kept = [(s, p) for s, p in self._kept(store, resuming) if not is_claimed(p)]
        total = sum(p.held for _, p in kept)
        while kept and partial.held(self.uuid) + total > partial.limit:
            owner, oldest = kept.pop()
            log.info(
                "sender %s: dropping the partial upload of %s for room",
                self.uuid,
                printable(oldest.name),
            )
            owner.forget(oldest.name)
            total -= oldest.held

    def keep_partial(self, incoming: IncomingFile, store: PartialStore) -> None:
        """A stream cut inside a large data file: keep its bytes in ``store`` to resume
        from, if they fit in ``max_partial_bytes``; else they go."""
        begin = incoming.begin
        held = min(incoming.received, begin.size)
        if begin.resumable and not self.may_keep(store, begin.name, held):
            incoming.discard()  # max_partial_bytes covers kept partial uploads too
            return
        if incoming.keep(store):
            self.stored(held)  # the quota counts kept partial uploads too
            log.info(
                "sender %s: kept %d bytes of %s to resume from",
                self.uuid,
                held,
                printable(begin.name),
            )

    def may_keep(self, store: PartialStore, name: str, held: int) -> bool:
        """True if ``held`` bytes of ``name`` may be kept to resume from:
        ``max_partial_bytes`` covers the sender's kept partial uploads, in every data
        dir and from every address, and so does its quota."""
        limit = self.limits.partial.limit
        if limit is not None and sum(p.held for _, p in self._kept(store, name)) + held > limit:
            return False
        quota = self.limits.quota
        return quota is None or quota.over(self.uuid, held) is None

    def hold(self, stream: object, size: int) -> None:
        """``stream`` holds the ``size`` bytes :meth:`admit` reserved, until released."""
        self._reserved[id(stream)] = size

    def opened(self, size: int, build: Callable[[], T]) -> T:
        """Build the stream :meth:`admit` reserved ``size`` bytes for and make it hold
        them; if building fails (a link in the staging path, a full disk), the bytes
        are given back before the error goes on: no stream holds them, so nothing
        else ever would."""
        try:
            stream = build()
        except BaseException:
            self.limits.partial.release(self.uuid, size)
            raise
        self.hold(stream, size)
        return stream

    def release(self, stream: object) -> None:
        """Give back what ``stream`` held of this sender's unfinished-upload bytes."""
        size = self._reserved.pop(id(stream), None)
        if size is not None:
            self.limits.partial.release(self.uuid, size)

    def release_all(self) -> None:
        """Whatever path a stream took, nothing stays held once the session ends."""
        for size in self._reserved.values():
            self.limits.partial.release(self.uuid, size)
        self._reserved.clear()
