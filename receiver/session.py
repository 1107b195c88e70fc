"""The receiver's side of one connection: HELLO, schema, rounds (docs/design.md §4.2, §5.2).

Everything from the wire is untrusted: frames are validated by
:mod:`sealsync.protocol` before they get here, the order of frames is checked here,
and a violation ends this session with an ERROR frame — never the service, and
nothing is written outside the receiver's own folders.

:class:`Session` is the frame state machine; each of its other concerns is a part
with its own module:

* ``receiver.channel``: frames in and out, and the stall rule (a frame or file stream
  that trickles in holds a session as surely as a silent one: ERROR ``timeout``);
* ``receiver.session_limits``: what one sender may hold (sessions per UUID, bytes of
  unfinished uploads, its quota), checked at HELLO and at each FILE_BEGIN;
* ``receiver.round_state``: the round in flight and the shape of its ``sync.log``;
* ``receiver.commit``: complete files committed in batches on the session's commit
  threads, their verdicts sent in arrival order.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from receiver.auth import KeyLimit, Retired, SenderKeys
from receiver.channel import SessionChannel, Stalled, clean_text
from receiver.commit import Arrived, BatchCommitter, CommitPipeline
from receiver.gate import SessionGate
from receiver.incoming import IncomingFile, store_failure_reason
from receiver.layout import SenderFolder
from receiver.leases import Leases
from receiver.limits import StallWindow
from receiver.load.loader import FolderLoaderClosed
from receiver.load.owners import DeviceOwners
from receiver.metrics import ReceiverMetrics
from receiver.partials import DEFAULT_MAX_AGE, PartialStore, unclaim
from receiver.queries import SenderQueries
from receiver.round_state import RoundState
from receiver.rounds import Busy, Rounds
from receiver.schema import SchemaStore
from receiver.session_limits import SessionAdmission, SessionLimits
from receiver.writer import BackgroundWriter
from sealsync import __version__, durable
from sealsync.crashpoints import crash_point
from sealsync.durable import SYNCFS
from sealsync.errors import FormatError, SealsyncError
from sealsync.printable import printable
from sealsync.protocol import (
    MAX_DELETION_FILE_SIZE,
    PROTOCOL_VERSION,
    AnyMessage,
    Bye,
    Chunk,
    ConnectionClosed,
    Delete,
    DeleteAck,
    ErrorCode,
    FileBegin,
    FileEnd,
    FileVerdict,
    HeldQuery,
    Hello,
    InventoryQuery,
    Lease,
    OwnersQuery,
    Partials,
    PartialsQuery,
    ProtocolError,
    RoundDone,
    RoundEnd,
    RoundReady,
    RoundStart,
    Schema,
    SchemaAck,
    Stream,
    Verdict,
    Welcome,
    encode,
)
from sealsync.received import name_problem
from sealsync.units import human_bytes

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")

DEFAULT_LOAD_WAIT = 10.0
IO_THREADS = 8


def _storage_there() -> str | None:
    return None


@dataclass
class SessionContext:
    """What every session of one service shares."""

    data_dirs: list[Path]
    owners: DeviceOwners
    inspect: Callable[[Path], FileInfo]
    sender_keys: SenderKeys
    schema: SchemaStore
    rounds: Rounds
    load_wait: float = DEFAULT_LOAD_WAIT
    """How long ROUND_END waits for the loader before answering ``loaded=False``."""
    inspect_many: Callable[[list[Path]], list[FileInfo | FormatError]] | None = None
    """``inspect`` for a whole batch in one go (the service's worker pool), if available."""
    limits: SessionLimits = field(default_factory=SessionLimits)
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(IO_THREADS, thread_name_prefix="sealsync-io")
    )
    """Threads for fsyncs and inspections issued together (see ``incoming.stage_all``)."""
    metrics: ReceiverMetrics = field(default_factory=ReceiverMetrics)
    """The service's counters (receiver/metrics.py)."""
    partial_max_age: float = DEFAULT_MAX_AGE
    """Seconds a partial upload is kept (``partial_max_age``), swept at round start."""
    sync_method: str = SYNCFS
    """How a batch's files are made durable (``sync_method``, see ``incoming.Fsyncs``)."""
    storage_problem: Callable[[], str | None] = _storage_there
    """A fresh look at the storage (receiver/liveness.py): why it is gone, or None."""
    leases: Leases | None = None
    """The senders' identity leases (receiver/leases.py); None: not checked."""


def _unexpected(msg: AnyMessage, where: str) -> ProtocolError:
    return ProtocolError(f"{msg.kind.name} not expected {where}", code=ErrorCode.UNEXPECTED)


class Refused:
    """A file stream refused at FILE_BEGIN: its chunks are read and dropped, never written."""

    def __init__(self, begin: FileBegin, reason: str, status: str = Verdict.REFUSED) -> None:
        self.begin = begin
        self.reason = reason
        self.status = status
        self.received = 0

    def write(self, data: bytes | memoryview) -> None:
        self.received += len(data)

    def discard(self) -> None:
        """Nothing to delete: nothing was written."""


class Session:
    """One sender connection; :meth:`run` returns when the session is over, never raises."""

    def __init__(
        self, channel: Stream, ctx: SessionContext, peer_ip: str, key_fingerprint: str
    ) -> None:
        self.channel = channel
        limits = ctx.limits
        self._stall = (
            StallWindow(limits.stall_timeout, limits.min_transfer_rate)
            if limits.stall_timeout is not None
            else None
        )
        self._io = SessionChannel(channel, self._stall)
        self._writer = BackgroundWriter()  # large files: writing overlaps hashing
        self.ctx = ctx
        self.peer_ip = peer_ip
        self.key_fingerprint = key_fingerprint
        self.uuid = ""
        self.name = ""
        self.version = PROTOCOL_VERSION
        """The session's protocol version, as negotiated at HELLO."""
        self._gate = SessionGate(ctx.storage_problem, ctx.leases, ctx.metrics, peer_ip)
        self._round: RoundState | None = None
        self._partials: PartialStore | None = None  # the round's sender folder's
        self._queries: SenderQueries | None = None  # from HELLO on
        self._file: IncomingFile | Refused | None = None
        self._admission = SessionAdmission(limits, self._flush, ctx.data_dirs)
        committer = BatchCommitter(
            ctx.inspect,
            ctx.inspect_many,
            ctx.owners,
            ctx.executor,
            ctx.sync_method,
            self._admission,
        )
        self._commits = CommitPipeline(committer.commit, self._answer_batch, self._io.data_waiting)
        self._token = secrets.token_hex(4)
        self._streams = itertools.count()
        self.files_verified = 0

    # --- entry point -----------------------------------------------------------------

    def run(self) -> None:
        who = f"{self.peer_ip} ({self.key_fingerprint})"
        opened = False
        try:
            self._hello()
            who = f"sender {self.uuid} '{printable(self.name)}' at {self.peer_ip}"
            log.debug("%s: session open", who)
            self.ctx.metrics.session_opened()
            opened = True
            while True:
                if self._commits.pending:
                    self._commits.pump(self._round)  # before blocking: the sender may wait
                msg = self._io.recv(in_stream=self._file is not None)
                self._gate.arrived()  # the lease offered is the sender's now
                if isinstance(msg, Bye):
                    if self._round is not None or self._file is not None:
                        raise ProtocolError(
                            "BYE in the middle of a round", code=ErrorCode.UNEXPECTED
                        )
                    log.debug("%s: session closed (%d files verified)", who, self.files_verified)
                    return
                self._dispatch(msg)
        except ConnectionClosed as exc:
            if self._round is None:
                log.info("%s: %s", who, printable(exc))
            else:
                log.warning("%s: %s in the middle of a round", who, printable(exc))
        except ProtocolError as exc:
            log.warning("%s: protocol error (%s): %s", who, printable(exc.code), printable(exc))
            self._io.send_error(exc.code, str(exc))
        except Stalled as exc:
            log.warning("%s: stalled (%s), closing the session", who, exc)
            self._io.send_error(ErrorCode.TIMEOUT, f"session stalled: {exc}")
        except TimeoutError:  # socket.timeout: the channel's idle timeout
            log.warning("%s: idle for too long, closing the session", who)
            self._io.send_error(ErrorCode.TIMEOUT, "session idle for too long")
        except FolderLoaderClosed:  # stop() while this round committed: routine, not a failure
            log.info("%s: the receiver is stopping; the round stays for recovery", who)
            self._io.send_error(ErrorCode.BUSY, "receiver stopping, retry later")
        except OSError as exc:  # the receiver's disk, outside a file (a file gets a verdict)
            reason = store_failure_reason(exc, "its state")
            log.warning("%s: %s", who, printable(reason))
            self._io.send_error(ErrorCode.IO, reason)
        except Exception as exc:
            log.exception("%s: session failed", who)
            self._io.send_error(ErrorCode.INTERNAL, f"receiver error: {type(exc).__name__}: {exc}")
        finally:
            self._abandon()
            self._admission.close_session()
            if opened:
                self.ctx.metrics.session_closed()

    def _flush(self) -> bool:
        """Commit and answer every complete stream: every answer goes out in the order
        of the requests. False if there was none."""
        return self._commits.flush(self._round)

    def _abandon(self) -> None:
        """Release what a session ended mid-way holds; a round's logged events are
        applied and the round forgotten once its loader drained (bounded by
        ``load_wait``), else they stay for recovery at the next round start."""
        if self._file is not None:
            incoming = self._file
            self._file = None
            if isinstance(incoming, IncomingFile) and self._partials is not None:
                self._admission.keep_partial(incoming, self._partials)
            else:
                incoming.discard()
            self._admission.release(incoming)
        for item in self._commits.close():  # never answered: the sender sends them again
            if item.incoming is not None:
                item.incoming.discard()
                self._admission.release(item.incoming)
        self._admission.release_all()
        self._writer.close()
        rnd, self._round = self._round, None
        self._partials = None
        if rnd is not None:
            self.ctx.metrics.round_ended("abandoned")
            try:
                rnd.abandon()  # its sync.log closed, its empty staging folders gone
                rnd.loader.finish(self.ctx.load_wait, abandoned=True)
            except (OSError, SealsyncError) as exc:  # the round stays for recovery
                log.warning("%s: abandoned round not cleared: %s", rnd.folder.root, exc)
            finally:
                self.ctx.rounds.end(rnd.folder)

    # --- handshake -------------------------------------------------------------------

    def _hello(self) -> None:
        msg = self._io.recv(in_stream=False)
        if not isinstance(msg, Hello):
            raise _unexpected(msg, "before HELLO")
        version = self._gate.hello(msg)
        try:
            binding = self.ctx.sender_keys.bind(msg.uuid, self.key_fingerprint, self.peer_ip)
        except (KeyLimit, Retired) as exc:
            log.warning("refused: sender %s from %s: %s", msg.uuid, self.peer_ip, exc)
            self.ctx.metrics.refused("sender_key")
            raise ProtocolError(str(exc), code=ErrorCode.AUTH) from None
        if binding is None:
            log.warning(
                "refused: key %s from %s claims sender %s, bound to another key",
                self.key_fingerprint,
                self.peer_ip,
                msg.uuid,
            )
            self.ctx.metrics.refused("sender_key")
            raise ProtocolError(
                f"sender UUID {msg.uuid} is bound to another public key", code=ErrorCode.AUTH
            )
        self._gate.admitted(msg.uuid, msg.name, version)
        self._admission.open_session(msg.uuid, self.peer_ip)
        self.uuid, self.name, self.version = msg.uuid, msg.name, version
        self._queries = SenderQueries(msg.uuid, self.ctx.owners, self.ctx.rounds.storage)
        self.ctx.metrics.sender_accepted(msg.uuid, msg.name)
        self._io.send(Welcome(version, f"sealsync {__version__}"))

    # --- dispatch --------------------------------------------------------------------

    def _dispatch(self, msg: AnyMessage) -> None:
        if self._file is not None:
            if isinstance(msg, Chunk):
                self._file.write(msg.data)
            elif isinstance(msg, FileEnd):
                self._file_end(msg)
            else:
                raise _unexpected(msg, "inside a file stream")
        elif self._round is not None:
            if isinstance(msg, FileBegin):
                self._file_begin(msg)
                return
            self._flush()  # every answer goes out in the order of the requests
            if isinstance(msg, Delete):
                self._delete(msg)
            elif isinstance(msg, OwnersQuery):
                self._io.send(self._asked().owners(msg))
            elif isinstance(msg, PartialsQuery):
                self._io.send(Partials([p.entry() for p in self._round_partials().list()]))
            elif isinstance(msg, RoundEnd):
                self._round_end()
            else:
                raise _unexpected(msg, "inside a round")
        elif isinstance(msg, Schema):
            self._schema(msg)
        elif isinstance(msg, RoundStart):
            self._round_start(msg)
        elif isinstance(msg, OwnersQuery):
            self._io.send(self._asked().owners(msg))
        elif isinstance(msg, PartialsQuery):
            # the sender asks right after ROUND_START, before it has read the answer;
            # after a busy one there is no round, and nothing to resume in it
            self._io.send(Partials([]))
        elif isinstance(msg, InventoryQuery):
            self._io.send(self._asked().inventory(msg))
        elif isinstance(msg, HeldQuery) and self.version >= 2:
            self._io.send(self._asked().held())
        elif isinstance(msg, Lease) and self.version >= 2:
            self._io.send(self._gate.lease(msg))
        else:
            raise _unexpected(msg, "outside a round")

    def _asked(self) -> SenderQueries:
        assert self._queries is not None, "dispatch starts after HELLO"
        self._gate.storage()  # an empty folder in its place would answer "nothing held"
        return self._queries

    # --- schema ----------------------------------------------------------------------

    def _schema(self, msg: Schema) -> None:
        self._gate.may_write()
        position = self.ctx.schema.append(
            self.uuid, msg.offset, msg.data, self._admission.admit_schema
        )
        self._io.send(SchemaAck(position))

    # --- rounds ----------------------------------------------------------------------

    def _round_start(self, msg: RoundStart) -> None:
        dirs = self.ctx.data_dirs
        folder = SenderFolder(dirs[msg.data_dir % len(dirs)], self.peer_ip, self.uuid)
        self._gate.may_write()
        try:
            loader = self.ctx.rounds.begin(folder, wait=self.ctx.load_wait)
        except Busy as exc:
            log.info("sender %s: round on %s refused: busy: %s", self.uuid, folder.root, exc)
            self.ctx.metrics.refused("round_busy", self.uuid)
            self._io.send(RoundReady("busy", clean_text(str(exc))))
            return
        try:
            self._round = RoundState(folder, loader, self.ctx.limits.staging)
            self._partials = PartialStore.of(folder.data_dir, self.uuid, self.ctx.partial_max_age)
            self._partials.sweep()  # expired, torn, orphaned (a resumed one is claimed)
        except BaseException:
            self._round = None
            self._partials = None
            self.ctx.rounds.end(folder)
            raise
        self._admission.round_started()
        log.debug("sender %s: round started in %s", self.uuid, folder.root)
        self._io.send(RoundReady("ready", ""))

    def _delete(self, msg: Delete) -> None:
        rnd = self._require_round()
        rnd.log_deleted(msg.name)
        rnd.loader.delete(msg.name)
        rnd.deleted += 1
        self.ctx.metrics.deleted()
        self._io.send(DeleteAck(msg.name))

    def _round_end(self) -> None:
        rnd = self._require_round()
        self._gate.storage()  # the round's commit: it stays for recovery if gone
        rnd.end()
        durable.atomic_write(rnd.folder.sync_end, b"")
        crash_point("receiver.sync_end")
        loaded = rnd.loader.finish(self.ctx.load_wait)
        self._round = None
        self._partials = None
        self.ctx.rounds.end(rnd.folder)
        self.ctx.metrics.round_ended("done", self.uuid)
        log.info(
            "sender %s at %s: round done in %s: %d files received (%s), %d deleted, "
            "%d refused, %.1f s%s",
            self.uuid,
            self.peer_ip,
            rnd.folder.data_dir,
            rnd.received,
            human_bytes(rnd.bytes),
            rnd.deleted,
            rnd.refused,
            time.monotonic() - rnd.started,
            "" if loaded else ", still loading",
        )
        self._io.send(RoundDone(bool(loaded)))

    def _require_round(self) -> RoundState:
        if self._round is None:  # pragma: no cover - _dispatch guarantees it
            raise ProtocolError("no round in progress", code=ErrorCode.UNEXPECTED)
        return self._round

    # --- files -----------------------------------------------------------------------

    def _file_begin(self, msg: FileBegin) -> None:
        rnd = self._require_round()
        rnd.close_deleted()
        self._commits.make_room(rnd)  # before this file's temporaries
        problem = name_problem(msg.name)  # another sender's folder, a sidecar's path
        refusal = f"the receiver stores no file named so: {problem}" if problem else None
        refusal = refusal or rnd.staging_problem(msg.name)  # too deep, too many folders
        if refusal is not None:
            log.warning("sender %s: %s refused: %s", self.uuid, printable(msg.name), refusal)
            self._file = Refused(msg, refusal)
            return
        big = _deletion_file_too_large(msg)
        if big is not None:  # refused before a byte is stored: the loader could not hold it
            log.warning("sender %s: refused %s: %s", self.uuid, printable(msg.name), big)
            self._file = Refused(msg, big)
            return
        size = msg.stream_size
        resume = None
        if msg.resumable:
            store = self._round_partials()
            resume = store.take(msg.name)  # claimed: no sweep removes it while resumed
            if resume is not None and not (
                msg.offset
                and resume.size == msg.size
                and resume.mtime == msg.mtime
                and msg.offset <= resume.held
            ):
                unclaim(resume)
                store.forget(msg.name)  # the sender did not take it: its bytes are stale
                resume = None
        if msg.offset and resume is None:
            reason = "the partial upload to resume is no longer held; send the whole file"
            self._file = Refused(msg, reason, Verdict.MISMATCH)
            return
        refusal = self._admission.admit(size, self._partials, msg.name if msg.resumable else None)
        if refusal is not None:
            if resume is not None:
                unclaim(resume)
            log.warning("sender %s: %s refused: %s", self.uuid, msg.name, refusal)
            self._file = Refused(msg, refusal)
            return
        token = f"{self._token}-{next(self._streams)}"

        def build() -> IncomingFile:
            staged = rnd.staging_path(msg.name) if resume is None else None
            return IncomingFile(msg, rnd.folder.data, token, self._writer, resume, staged)

        self._file = self._admission.opened(size, build)

    def _round_partials(self) -> PartialStore:
        if self._partials is None:  # pragma: no cover - set with every round
            raise ProtocolError("no round in progress", code=ErrorCode.UNEXPECTED)
        return self._partials

    def _file_end(self, msg: FileEnd) -> None:
        incoming = self._file
        assert incoming is not None
        self._file = None
        begin = incoming.begin
        if msg.file_id != begin.file_id:
            incoming.discard()
            self._admission.release(incoming)
            raise ProtocolError(
                f"FILE_END for file {msg.file_id} while file {begin.file_id} is open",
                code=ErrorCode.UNEXPECTED,
            )
        if isinstance(incoming, Refused):
            refused = Arrived(begin, None)
            refused.verdict(incoming.status, incoming.reason)
            self._commits.add(refused)
            return
        incoming.finish_writes()
        item = Arrived(begin, incoming)
        self._require_round().bytes += incoming.received
        self.ctx.metrics.received(incoming.received, self.uuid)
        if incoming.error is not None:
            item.verdict(Verdict.REFUSED, store_failure_reason(incoming.error))
        else:
            problem = incoming.check(msg.md5)
            if problem is not None:
                item.verdict(Verdict.MISMATCH, problem)
        if item.status is not None:
            incoming.discard()  # decided: free its descriptors and disk space now
        self._commits.add(item)

    # --- verdicts --------------------------------------------------------------------

    def _answer_batch(self, batch: list[Arrived]) -> None:
        # one write for the batch's verdicts: one SSH packet to build and encrypt
        # here and to decrypt on the sender, instead of one per file
        self._io.send_frames(b"".join([self._answer(item) for item in batch]))

    def _answer(self, item: Arrived) -> bytes:
        """Count and log ``item``'s verdict; returns its frame for the caller to send."""
        status = item.status or Verdict.REFUSED
        self.ctx.metrics.verdict(status, self.uuid)
        rnd = self._round
        if status == Verdict.VERIFIED:
            self.files_verified += 1
            if rnd is not None:
                rnd.received += 1
        else:
            if rnd is not None:
                rnd.refused += 1
            log.warning(
                "sender %s: %s %s: %s",
                self.uuid,
                printable(item.name),
                status,
                printable(item.reason),
            )
        begin = item.begin
        return encode(FileVerdict(begin.file_id, begin.name, status, clean_text(item.reason)))


def _deletion_file_too_large(begin: FileBegin) -> str | None:
    """Why a file's ``.mods`` or ``.mods2`` is refused by its announced size, or None."""
    for suffix, size in ((".mods", begin.mods_size), (".mods2", begin.mods2_size)):
        if size > MAX_DELETION_FILE_SIZE:
            return (
                f"its {suffix} is {size} bytes, over the limit of {MAX_DELETION_FILE_SIZE} "
                "bytes for a deletion file: not stored"
            )
    return None
