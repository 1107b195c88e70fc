"""The receiver's side of one connection: HELLO, schema, rounds (docs/design.md §4.2, §5.2).

Everything from the wire is untrusted: frames are validated by
:mod:`sealsync.protocol` before they get here, the order of frames is checked here,
and a violation ends this session with an ERROR frame — never the service, and
nothing is written outside the receiver's own folders.

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

A name is in ``sync.log`` only once its file is staged (fsynced at its name in
``data/``, where it was written or renamed to) and its ownership claimed; the loader
gets it right after, and only then does the sender hear *verified*. Verdicts are sent
in the order files arrived, and nothing is awaited from the sender between files, so
the sender may pipeline.

Complete files are committed in batches: those that arrived while the previous
batch was being committed, flushed as soon as the sender's next bytes are not
already waiting (it may be waiting for verdicts) or after ``MAX_BATCH`` files. A
batch's fsyncs run together and share file-system journal commits, and its names
take one ``sync.log`` fsync, an order of magnitude cheaper per file than one by one
(docs/performance.md). A full batch whose sender is still streaming is committed
on the session's commit threads while this one reads on (``_pump_commits``); batches
queue there in arrival order, two committing at a time (the later one logs only after
the earlier), and their verdicts are still sent by this thread, in order, as each
commit is done. When the sender's bytes stop
(it may be waiting for verdicts) this thread waits only for the oldest batch, so it
reads the next files as soon as that batch's verdicts have let the sender go on.

What one sender may hold is bounded here (``SessionLimits``, from ``receiver.limits``):
sessions per UUID at HELLO; bytes of unfinished uploads, reserved at each FILE_BEGIN
by the announced size (a file that does not fit is read and dropped, never written,
and refused); bytes stored, against the sender's quota (ERROR ``quota``); and
progress, since a frame or file stream that trickles in holds a session as surely
as a silent one (ERROR ``timeout``).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import logging
import os
import secrets
import select
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, cast

from receiver.auth import KeyLimit, Retired, SenderKeys
from receiver.incoming import Fsyncs, IncomingFile, stage_all, store_failure_reason
from receiver.layout import SenderFolder, SyncLog
from receiver.limits import ByteLedger, Quota, SlotCounter, StallWindow
from receiver.load.loader import Loader, LoaderClosed
from receiver.load.owners import DeviceOwners
from receiver.metrics import ReceiverMetrics
from receiver.partials import DEFAULT_MAX_AGE, PartialStore
from receiver.rounds import Busy, Rounds
from receiver.schema import SchemaStore
from receiver.storage import safe_dirs
from receiver.writer import BackgroundWriter
from sealsync import __version__, durable
from sealsync.crashpoints import crash_point
from sealsync.durable import SYNCFS
from sealsync.errors import FormatError, SealsyncError
from sealsync.output import human_bytes
from sealsync.printable import printable
from sealsync.protocol import (
    MAX_FILE_SIZE,
    MAX_INVENTORY_PAGE,
    MAX_TEXT,
    PROTOCOL_VERSION,
    AnyMessage,
    Bye,
    Chunk,
    ConnectionClosed,
    Delete,
    DeleteAck,
    Error,
    ErrorCode,
    FileBegin,
    FileEnd,
    FileVerdict,
    Hello,
    Inventory,
    InventoryQuery,
    Owners,
    OwnersQuery,
    Partials,
    PartialsQuery,
    ProtocolError,
    ReadBuffer,
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
    receive,
    send,
)

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")

DEFAULT_LOAD_WAIT = 10.0
MAX_BATCH = 128
"""Files committed together while more stream in; the sender's default pipeline (1,024)
holds several batches, so it sends the next ones while this one commits. Each batch
costs a few syncs (its files', its folders', ``sync.log``'s, the loader's) whatever
its size: 64 small files a batch moved more per second than 32 (docs/performance.md,
"Session 11"), and with 1,024 files in flight 128 more than 64 ("Session 16")."""
MAX_BATCH_BYTES = 16 << 20
"""...or as soon as this many bytes arrived: a large file's fsync then runs while the
next file streams in, instead of all of them at the end of the round."""
IO_THREADS = 8
COMMIT_THREADS = 2
"""Batches committed at once. A batch's commit is mostly waiting (the worker pool's
check, the disk's fsyncs), and with one at a time the commit thread was the round's
serial path; the second batch checks and stages while the first logs, and names
still reach ``sync.log`` and the loader in arrival order."""
MAX_ARRIVED = 2 * MAX_BATCH
"""Complete streams waiting for a verdict before the next FILE_BEGIN waits for their
commit: each holds descriptors and temporaries, and a sender that never reads its
verdicts must not pile them up without end. Two batches: the 256 streams it was with
four batches of 64, so the descriptors ``receiver.openfiles`` asks for stay as they were."""
ERROR_REPLY_TIMEOUT = 5.0
"""Longest wait to send a closing ERROR: a peer that reads nothing must not hold it."""


@dataclass
class SessionLimits:
    """What one sender may hold (``receiver.limits``); the defaults limit nothing."""

    sender_sessions: SlotCounter = field(default_factory=lambda: SlotCounter(None))
    """Sessions per sender UUID (``max_sessions_per_sender``)."""
    partial: ByteLedger = field(default_factory=lambda: ByteLedger(None))
    """Bytes of unfinished uploads per sender UUID (``max_partial_bytes``)."""
    quota: Quota | None = None
    """Bytes stored per sender UUID (``sender_quota_bytes``), None: no quota."""
    stall_timeout: float | None = None
    """A frame or file stream with less than ``min_transfer_rate`` bytes a second over
    this many seconds has stalled; None: only the channel's idle timeout applies."""
    min_transfer_rate: int = 1


class Stalled(TimeoutError):
    """The sender stopped making progress inside a frame or a file stream."""


class _Watched:
    """The channel as the session reads it, with the stall rule of ``StallWindow``.

    Unarmed reads wait as long as the channel's own (idle) timeout allows; armed
    reads wait at most what is left of the current window, and a window without
    enough bytes raises :class:`Stalled`.
    """

    def __init__(self, channel: Stream, window: StallWindow | None) -> None:
        self._channel = channel
        self.window = window
        gettimeout = getattr(channel, "gettimeout", None)
        self._idle: float | None = gettimeout() if gettimeout is not None else None

    def recv(self, n: int) -> bytes:
        window = self.window
        if window is None:
            return self._channel.recv(n)
        if not window.armed:
            data = self._channel.recv(n)
            if data:
                window.arm()  # a frame has begun: the rest of it must keep coming
            return data
        self._set_timeout(window.wait_limit())
        started = time.monotonic()
        try:
            data = self._channel.recv(n)
        except TimeoutError:
            window.record(time.monotonic() - started, 0)
            raise Stalled(window.describe()) from None
        finally:
            self._set_timeout(self._idle)
        if not data:
            return data  # the peer closed: that is not a stall
        if window.record(time.monotonic() - started, len(data)):
            raise Stalled(window.describe())
        return data

    def _set_timeout(self, seconds: float | None) -> None:
        settimeout = getattr(self._channel, "settimeout", None)
        if settimeout is not None:
            settimeout(seconds)

    def sendall(self, data: bytes | memoryview) -> None:
        self._channel.sendall(data)


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


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` made fit for a protocol string field (one line, bounded, control
    characters escaped: it may quote a device id from a file) for the peer."""
    text = printable(" ".join(str(text).replace("\x00", " ").split()))
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode("utf-8", errors="ignore") + "..."


def _unexpected(msg: AnyMessage, where: str) -> ProtocolError:
    return ProtocolError(f"{msg.kind.name} not expected {where}", code=ErrorCode.UNEXPECTED)


class _Round:
    """The state of one round in flight on one sender folder."""

    def __init__(self, folder: SenderFolder, loader: Loader) -> None:
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
        self._in = ReadBuffer(_Watched(channel, self._stall))  # frames parsed from large reads
        self._writer = BackgroundWriter()  # large files: writing overlaps hashing
        self.ctx = ctx
        self.peer_ip = peer_ip
        self.key_fingerprint = key_fingerprint
        self.uuid = ""
        self.name = ""
        self._round: _Round | None = None
        self._partials: PartialStore | None = None  # the round's sender folder's
        self._held: list[tuple[str, int, str]] | None = None  # INVENTORY pages' listing
        self._file: IncomingFile | _Refused | None = None
        self._reserved: dict[int, int] = {}  # id(IncomingFile) -> bytes held in ctx.limits.partial
        self._sender_slot = False  # holds one of ctx.limits.sender_sessions for self.uuid
        self._arrived: list[_Arrived] = []  # complete streams waiting for their verdicts
        self._arrived_bytes = 0  # their stream bytes, kept as they arrive (checked per frame)
        # batches handed to the commit threads, oldest first: each answered once done
        self._committing: collections.deque[tuple[Future[None], list[_Arrived]]] = (
            collections.deque()
        )
        self._commit_thread: ThreadPoolExecutor | None = None
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
                if self._arrived or self._committing:
                    self._pump_commits()  # before blocking: the sender may wait for verdicts
                msg = self._recv()
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
            self._send_error(exc.code, str(exc))
        except Stalled as exc:
            log.warning("%s: stalled (%s), closing the session", who, exc)
            self._send_error(ErrorCode.TIMEOUT, f"session stalled: {exc}")
        except TimeoutError:  # socket.timeout: the channel's idle timeout
            log.warning("%s: idle for too long, closing the session", who)
            self._send_error(ErrorCode.TIMEOUT, "session idle for too long")
        except LoaderClosed:  # stop() while this round committed: routine, not a failure
            log.info("%s: the receiver is stopping; the round stays for recovery", who)
            self._send_error(ErrorCode.BUSY, "receiver stopping, retry later")
        except OSError as exc:  # the receiver's disk, outside a file (a file gets a verdict)
            reason = store_failure_reason(exc, "its state")
            log.warning("%s: %s", who, printable(reason))
            self._send_error(ErrorCode.IO, reason)
        except Exception as exc:
            log.exception("%s: session failed", who)
            self._send_error(ErrorCode.INTERNAL, f"receiver error: {type(exc).__name__}: {exc}")
        finally:
            self._abandon()
            if self._sender_slot:
                self.ctx.limits.sender_sessions.release(self.uuid)
                self._sender_slot = False
            if opened:
                self.ctx.metrics.session_closed()

    def _recv(self) -> AnyMessage:
        if self._stall is not None:
            if self._file is None and not self._in.pending():
                self._stall.disarm()  # between frames, outside a file: the idle timeout
            else:
                self._stall.arm()
        try:
            return receive(self._in)
        except TimeoutError:
            raise
        except (OSError, EOFError) as exc:
            raise ConnectionClosed(f"connection lost: {exc}") from None

    def _send(self, msg: AnyMessage) -> None:
        try:
            send(self.channel, msg)
        except (OSError, EOFError) as exc:
            raise ConnectionClosed(f"connection lost: {exc}") from None

    def _send_frames(self, frames: bytes) -> None:
        """Write frames :func:`encode` made, in one write."""
        try:
            self.channel.sendall(frames)
        except (OSError, EOFError) as exc:
            raise ConnectionClosed(f"connection lost: {exc}") from None

    def _send_error(self, code: str, message: str) -> None:
        try:
            settimeout = getattr(self.channel, "settimeout", None)
            if settimeout is not None:
                settimeout(ERROR_REPLY_TIMEOUT)
            send(self.channel, Error(clean_text(code, 64) or "error", clean_text(message)))
        except Exception:  # the peer may be gone already
            pass

    def _data_waiting(self) -> bool:
        """True if the sender's next bytes are already here (no need to flush verdicts yet)."""
        if self._in.pending():
            return True
        ready = getattr(self.channel, "recv_ready", None)
        if ready is not None:  # a paramiko Channel
            return bool(ready())
        readable, _, _ = select.select([cast(socket.socket, self.channel)], [], [], 0)  # a socket
        return bool(readable)

    def _abandon(self) -> None:
        """Release what a session ended mid-way holds; a round's logged events are
        applied and the round forgotten once its loader drained (bounded by
        ``load_wait``), else they stay for recovery at the next round start."""
        if self._file is not None:
            incoming = self._file
            self._file = None
            if isinstance(incoming, IncomingFile) and self._partials is not None:
                self._keep_partial(incoming)
            else:
                incoming.discard()
            self._release(incoming)
        while self._committing:  # let them finish: they may be writing sync.log
            future, _ = self._committing.popleft()
            try:
                future.result()
            except Exception:  # never answered: the sender sends its files again
                pass
        if self._commit_thread is not None:
            self._commit_thread.shutdown(wait=True)
        arrived = self._take_arrived()
        for item in arrived:  # never answered: the sender sends them again
            if item.incoming is not None:
                item.incoming.discard()
                self._release(item.incoming)
        for size in self._reserved.values():  # whatever path a stream took, nothing stays held
            self.ctx.limits.partial.release(self.uuid, size)
        self._reserved.clear()
        self._writer.close()
        rnd, self._round = self._round, None
        self._partials = None
        if rnd is not None:
            self.ctx.metrics.round_ended("abandoned")
            try:
                rnd.sync_log.close()
                rnd.loader.finish(self.ctx.load_wait, abandoned=True)
            except (OSError, SealsyncError) as exc:  # the round stays for recovery
                log.warning("%s: abandoned round not cleared: %s", rnd.folder.root, exc)
            finally:
                self.ctx.rounds.end(rnd.folder)

    def _keep_partial(self, incoming: IncomingFile) -> None:
        """A stream cut inside a large data file: keep its bytes to resume from."""
        store = self._partials
        assert store is not None
        begin = incoming.begin
        limit = self.ctx.limits.partial.limit
        if begin.resumable and limit is not None:
            held = min(incoming.received, begin.size)
            if store.total(exclude=begin.name) + held > limit:
                incoming.discard()  # max_partial_bytes covers kept partial uploads too
                return
        if incoming.keep(store):
            log.info(
                "sender %s: kept %d bytes of %s to resume from",
                self.uuid,
                min(incoming.received, begin.size),
                printable(begin.name),
            )

    # --- handshake -------------------------------------------------------------------

    def _hello(self) -> None:
        msg = self._recv()
        if not isinstance(msg, Hello):
            raise _unexpected(msg, "before HELLO")
        if msg.version != PROTOCOL_VERSION:
            raise ProtocolError(
                f"protocol version {msg.version} not supported "
                f"(receiver speaks {PROTOCOL_VERSION})",
                code=ErrorCode.VERSION,
            )
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
        sessions = self.ctx.limits.sender_sessions
        if not sessions.acquire(msg.uuid):
            log.warning(
                "refused: sender %s from %s already has %d sessions open",
                msg.uuid,
                self.peer_ip,
                sessions.count(msg.uuid),
            )
            raise ProtocolError(
                f"receiver busy: sender {msg.uuid} already has {sessions.limit} sessions open "
                "(max_sessions_per_sender), retry later",
                code=ErrorCode.BUSY,
            )
        self._sender_slot = True
        self.uuid, self.name = msg.uuid, msg.name
        self._send(Welcome(PROTOCOL_VERSION, f"sealsync {__version__}"))

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
            self._commit_arrived()  # every answer goes out in the order of the requests
            if isinstance(msg, Delete):
                self._delete(msg)
            elif isinstance(msg, OwnersQuery):
                self._owners(msg)
            elif isinstance(msg, PartialsQuery):
                self._send(Partials([p.entry() for p in self._round_partials().list()]))
            elif isinstance(msg, RoundEnd):
                self._round_end()
            else:
                raise _unexpected(msg, "inside a round")
        elif isinstance(msg, Schema):
            self._schema(msg)
        elif isinstance(msg, RoundStart):
            self._round_start(msg)
        elif isinstance(msg, OwnersQuery):
            self._owners(msg)
        elif isinstance(msg, PartialsQuery):
            # the sender asks right after ROUND_START, before it has read the answer;
            # after a busy one there is no round, and nothing to resume in it
            self._send(Partials([]))
        elif isinstance(msg, InventoryQuery):
            self._inventory(msg)
        else:
            raise _unexpected(msg, "outside a round")

    # --- schema ----------------------------------------------------------------------

    def _schema(self, msg: Schema) -> None:
        position = self.ctx.schema.append(self.uuid, msg.offset, msg.data)
        self._send(SchemaAck(position))

    # --- rounds ----------------------------------------------------------------------

    def _round_start(self, msg: RoundStart) -> None:
        dirs = self.ctx.data_dirs
        folder = SenderFolder(dirs[msg.data_dir % len(dirs)], self.peer_ip, self.uuid)
        try:
            loader = self.ctx.rounds.begin(folder, wait=self.ctx.load_wait)
        except Busy as exc:
            log.info("sender %s: round on %s refused: busy: %s", self.uuid, folder.root, exc)
            self.ctx.metrics.refused("round_busy")
            self._send(RoundReady("busy", clean_text(str(exc))))
            return
        try:
            self._round = _Round(folder, loader)
            self._partials = PartialStore(folder.root, self.ctx.partial_max_age)
            self._partials.sweep()  # expired, torn, orphaned: the round holds the folder
        except BaseException:
            self._round = None
            self._partials = None
            self.ctx.rounds.end(folder)
            raise
        if self.ctx.limits.quota is not None:
            self.ctx.limits.quota.used(self.uuid)  # measured once per sender, here, not mid-stream
        log.debug("sender %s: round started in %s", self.uuid, folder.root)
        self._send(RoundReady("ready", ""))

    def _owners(self, msg: OwnersQuery) -> None:
        try:
            owners = self.ctx.owners.owners_of(msg.devices)
        except SealsyncError as exc:  # a device id the owner log cannot hold (a TAB)
            raise ProtocolError(f"OWNERS_QUERY: {exc}", code=ErrorCode.BAD_DEVICE) from None
        self._send(Owners({d: owners.get(d, "") for d in msg.devices}))

    def _inventory(self, msg: InventoryQuery) -> None:
        """One page of what the storage holds of this sender, listed once per session
        (at its first page) so that the pages of one listing fit together."""
        if msg.after == "" or self._held is None:
            held = self.ctx.rounds.storage.inventory(self.uuid)
            self._held = sorted((name, size, md5) for name, (size, md5) in held.items())
        start = bisect.bisect_right(self._held, (msg.after, MAX_FILE_SIZE + 1, ""))
        page = self._held[start : start + MAX_INVENTORY_PAGE]
        more = start + len(page) < len(self._held)
        self._send(Inventory([list(entry) for entry in page], more))

    def _delete(self, msg: Delete) -> None:
        rnd = self._require_round()
        rnd.log_deleted(msg.name)
        rnd.loader.delete(msg.name)
        rnd.deleted += 1
        self.ctx.metrics.deleted()
        self._send(DeleteAck(msg.name))

    def _round_end(self) -> None:
        rnd = self._require_round()
        rnd.end()
        durable.atomic_write(rnd.folder.sync_end, b"")
        crash_point("receiver.sync_end")
        loaded = rnd.loader.finish(self.ctx.load_wait)
        self._round = None
        self._partials = None
        self.ctx.rounds.end(rnd.folder)
        self.ctx.metrics.round_ended("done")
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
        self._send(RoundDone(bool(loaded)))

    def _require_round(self) -> _Round:
        if self._round is None:  # pragma: no cover - _dispatch guarantees it
            raise ProtocolError("no round in progress", code=ErrorCode.UNEXPECTED)
        return self._round

    # --- files -----------------------------------------------------------------------

    def _file_begin(self, msg: FileBegin) -> None:
        rnd = self._require_round()
        rnd.close_deleted()
        while len(self._arrived) + sum(len(b) for _, b in self._committing) >= MAX_ARRIVED:
            if not self._committing:
                self._queue_commit()
            self._answer_committed(wait_oldest=True)  # make room before this file's temporaries
        size = msg.stream_size
        resume = None
        if msg.resumable:
            store = self._round_partials()
            resume = store.get(msg.name)
            if resume is not None and not (
                msg.offset
                and resume.size == msg.size
                and resume.mtime == msg.mtime
                and msg.offset <= resume.held
            ):
                store.forget(msg.name)  # the sender did not take it: its bytes are stale
                resume = None
        if msg.offset and resume is None:
            reason = "the partial upload to resume is no longer held; send the whole file"
            self._file = _Refused(msg, reason, Verdict.MISMATCH)
            return
        refusal = self._admit_stream(size, msg.name if msg.resumable else None)
        if refusal is not None:
            log.warning("sender %s: %s refused: %s", self.uuid, msg.name, refusal)
            self._file = _Refused(msg, refusal)
            return
        token = f"{self._token}-{next(self._streams)}"
        staged = rnd.staging_path(msg.name) if resume is None else None
        incoming = IncomingFile(msg, rnd.folder.data, token, self._writer, resume, staged)
        self._reserved[id(incoming)] = size
        self._file = incoming

    def _round_partials(self) -> PartialStore:
        if self._partials is None:  # pragma: no cover - set with every round
            raise ProtocolError("no round in progress", code=ErrorCode.UNEXPECTED)
        return self._partials

    def _make_room(self, resuming: str | None) -> None:
        """Kept partial uploads count against ``max_partial_bytes``: the oldest go
        (never the one being resumed) when the streams in flight need their room."""
        partial = self.ctx.limits.partial
        if partial.limit is None or self._partials is None:
            return
        kept = [p for p in self._partials.list() if p.name != resuming]
        total = sum(p.held for p in kept)
        while kept and partial.held(self.uuid) + total > partial.limit:
            oldest = kept.pop()
            log.info(
                "sender %s: dropping the partial upload of %s for room", self.uuid, oldest.name
            )
            self._partials.forget(oldest.name)
            total -= oldest.held

    def _admit_stream(self, size: int, resuming: str | None = None) -> str | None:
        """Reserve ``size`` bytes of unfinished uploads for this sender, or say why not.

        Over ``max_partial_bytes`` the file is refused (its bytes are read and dropped,
        nothing is written) and the sender offers it again next round; over the
        sender's storage quota the session ends with ERROR ``quota``: nothing more can
        be stored until files are deleted or the quota is raised.
        """
        limits = self.ctx.limits
        partial = limits.partial
        if partial.limit is not None and size > partial.limit:
            return (
                f"a file of {size} bytes is larger than the receiver takes in one upload "
                f"(max_partial_bytes = {partial.limit})"
            )
        if limits.quota is not None and self._over_quota(size) is not None:
            self._commit_arrived()  # what already arrived is answered (and counted) first
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
                self._make_room(resuming)
            return None
        if self._arrived or self._committing:
            self._commit_arrived()  # staged files are no longer unfinished uploads
            if partial.reserve(self.uuid, size):
                if resuming is not None:
                    self._make_room(resuming)
                return None
        return (
            f"the receiver already holds {partial.held(self.uuid)} bytes of unfinished "
            f"uploads from this sender; a file of {size} bytes would exceed "
            f"max_partial_bytes = {partial.limit}"
        )

    def _over_quota(self, size: int) -> int | None:
        quota = self.ctx.limits.quota
        assert quota is not None
        return quota.over(self.uuid, self.ctx.limits.partial.held(self.uuid) + size)

    def _release(self, incoming: IncomingFile | _Refused) -> None:
        """Give back what ``incoming`` held of this sender's unfinished-upload bytes."""
        size = self._reserved.pop(id(incoming), None)
        if size is not None:
            self.ctx.limits.partial.release(self.uuid, size)

    def _file_end(self, msg: FileEnd) -> None:
        incoming = self._file
        assert incoming is not None
        self._file = None
        begin = incoming.begin
        if msg.file_id != begin.file_id:
            incoming.discard()
            self._release(incoming)
            raise ProtocolError(
                f"FILE_END for file {msg.file_id} while file {begin.file_id} is open",
                code=ErrorCode.UNEXPECTED,
            )
        if isinstance(incoming, _Refused):
            refused = _Arrived(begin, None)
            refused.verdict(incoming.status, incoming.reason)
            self._add_arrived(refused)
            return
        incoming.finish_writes()
        item = _Arrived(begin, incoming)
        self._require_round().bytes += incoming.received
        self.ctx.metrics.received(incoming.received)
        if incoming.error is not None:
            item.verdict(Verdict.REFUSED, store_failure_reason(incoming.error))
        else:
            problem = incoming.check(msg.md5)
            if problem is not None:
                item.verdict(Verdict.MISMATCH, problem)
        if item.status is not None:
            incoming.discard()  # decided: free its descriptors and disk space now
        self._add_arrived(item)

    def _add_arrived(self, item: _Arrived) -> None:
        self._arrived.append(item)
        self._arrived_bytes += item.begin.stream_size

    def _take_arrived(self) -> list[_Arrived]:
        arrived, self._arrived, self._arrived_bytes = self._arrived, [], 0
        return arrived

    def _pump_commits(self) -> None:
        """Commit in the background while the sender's next files stream in.

        A full batch is queued on the session's commit threads while this thread reads
        on; verdicts go out (from this thread, in order) as each batch is done. With
        nothing left to read the sender may be waiting for verdicts: what arrived is
        queued too, and this thread waits for the oldest batch only, then reads again
        if the sender's next bytes came meanwhile. With many small files, commits
        (fsyncs, inspection) used to keep this thread busy most of the time.
        """
        self._answer_committed()
        if self._data_waiting():
            if len(self._arrived) >= MAX_BATCH or self._arrived_bytes >= MAX_BATCH_BYTES:
                self._queue_commit()
            return
        self._queue_commit()
        while self._committing:
            self._answer_committed(wait_oldest=True)
            if self._committing and self._data_waiting():
                return  # the answers let the sender go on: read while the rest commits

    def _queue_commit(self) -> None:
        """Hand what arrived to the commit threads as one batch."""
        batch = self._take_arrived()
        if not batch:
            return
        if self._commit_thread is None:
            self._commit_thread = ThreadPoolExecutor(COMMIT_THREADS, "sealsync-commit")
        earlier = self._committing[-1][0] if self._committing else None  # else all answered
        future = self._commit_thread.submit(self._commit, batch, self._require_round(), earlier)
        self._committing.append((future, batch))

    def _answer_committed(self, wait_oldest: bool = False, wait_all: bool = False) -> None:
        """Answer the queued batches that are done, oldest first (waiting as told)."""
        while self._committing:
            future, batch = self._committing[0]
            if not (wait_all or wait_oldest) and not future.done():
                return
            wait_oldest = False
            self._committing.popleft()
            future.result()  # the commit's exception is the session's
            # one write for the batch's verdicts: one SSH packet to build and encrypt
            # here and to decrypt on the sender, instead of one per file
            self._send_frames(b"".join([self._answer(item) for item in batch]))

    def _commit_arrived(self) -> None:
        """Verify, stage, log and answer every complete stream, in arrival order."""
        self._queue_commit()
        self._answer_committed(wait_all=True)

    def _commit(
        self, batch: list[_Arrived], rnd: _Round, earlier: Future[None] | None = None
    ) -> None:
        """Verify, stage, log and hand to the loader; decides each verdict, sends none.

        Done for a batch at a time so that the fsyncs of many files share journal
        commits and ``sync.log`` takes one fsync per batch; a verdict is still sent
        only once its file is staged, logged and handed to the loader. ``earlier`` is
        the batch that arrived before this one, if still committing: this one is
        checked and staged meanwhile, but logged only after it (and not at all if it
        failed, which ends the session: staged and unlogged, recovery sweeps them).
        """
        fsyncs = None
        try:
            # the disk works while the worker pool checks the files
            fsyncs = Fsyncs(
                [item.file for item in batch if item.status is None],
                self.ctx.executor,
                self.ctx.sync_method,
            )
            self._check_batch(batch)
            accepted = [item for item in batch if item.status is None]
            errors = stage_all(
                [(item.file, rnd.folder.staged(item.name)) for item in accepted],
                self.ctx.executor,
                fsyncs,
            )
            staged = []
            for item, error in zip(accepted, errors, strict=True):
                if error is None:
                    staged.append(item)
                else:
                    item.verdict(Verdict.REFUSED, store_failure_reason(error))
            if earlier is not None:
                earlier.result()
            if staged:
                crash_point("receiver.staged")
                try:
                    rnd.log_tsfiles([item.name for item in staged])
                except OSError as exc:  # staged but not logged: recovery sweeps them
                    for item in staged:
                        item.verdict(Verdict.REFUSED, store_failure_reason(exc))
                    staged = []
            quota = self.ctx.limits.quota
            for item in staged:
                rnd.loader.load(item.name, item.devices)  # read once: the loader reuses them
                item.verdict(Verdict.VERIFIED, "")
                if quota is not None:
                    quota.add(self.uuid, item.begin.stream_size)
        finally:
            if fsyncs is not None:
                fsyncs.wait()  # no fsync may outlive the descriptor discard() closes
            for item in batch:
                if item.incoming is not None:
                    item.incoming.discard()  # a no-op for the staged ones
                    self._release(item.incoming)

    def _check_batch(self, batch: list[_Arrived]) -> None:
        """Format and devices (inspected concurrently), then ownership in arrival order."""
        todo = [item for item in batch if item.status is None]
        many = self.ctx.inspect_many
        if many is not None and len(todo) > 1:
            found = many([item.file.data_tmp for item in todo])
            infos = [
                self._format_problem(item, info) if isinstance(info, FormatError) else info
                for item, info in zip(todo, found, strict=True)
            ]
        else:
            infos = list(self.ctx.executor.map(self._inspect, todo))
        valid = []
        for item, info in zip(todo, infos, strict=True):
            if isinstance(info, str):
                item.verdict(Verdict.REFUSED, info)
            else:
                valid.append((item, info))
        claims = self.ctx.owners.claim_each([info.devices for _, info in valid], self.uuid)
        for (item, info), conflicts in zip(valid, claims, strict=True):
            if isinstance(conflicts, SealsyncError):
                item.verdict(Verdict.REFUSED, f"device ownership not recorded: {conflicts}")
            elif conflicts:
                item.verdict(Verdict.CONFLICT, _conflict_reason(conflicts))
            else:
                item.devices = info.devices

    def _inspect(self, item: _Arrived) -> FileInfo | str:
        """The file's devices, or why it is not a valid data file."""
        incoming = item.file
        try:
            return self.ctx.inspect(incoming.data_tmp)
        except FormatError as exc:
            return self._format_problem(item, exc)

    def _format_problem(self, item: _Arrived, exc: FormatError) -> str:
        """The refusal reason, named after the sender's file rather than the temporary."""
        incoming = item.file
        reason = str(exc).replace(str(incoming.data_tmp), item.name)
        reason = reason.replace(incoming.data_tmp.name, PurePosixPath(item.name).name)
        return f"not a valid data file: {reason}"

    def _answer(self, item: _Arrived) -> bytes:
        """Count and log ``item``'s verdict; returns its frame for the caller to send."""
        status = item.status or Verdict.REFUSED
        self.ctx.metrics.verdict(status)
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


class _Refused:
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


class _Arrived:
    """A complete file stream and, once decided, its verdict.

    ``incoming`` is None for a stream refused at FILE_BEGIN (it has its verdict).
    """

    __slots__ = ("begin", "incoming", "status", "reason", "devices")

    def __init__(self, begin: FileBegin, incoming: IncomingFile | None) -> None:
        self.begin = begin
        self.incoming = incoming
        self.status: str | None = None
        self.reason = ""
        self.devices: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.begin.name

    @property
    def file(self) -> IncomingFile:
        """The temporaries of a stream still to be decided (those always have them)."""
        assert self.incoming is not None
        return self.incoming

    def verdict(self, status: str, reason: str) -> None:
        self.status, self.reason = status, reason


def _conflict_reason(conflicts: dict[str, str]) -> str:
    devices = sorted(conflicts)
    first = devices[0]
    more = f" (and {len(devices) - 1} more devices)" if len(devices) > 1 else ""
    return f"device {first} is owned by sender {conflicts[first]}{more}"
