"""The sender's side of one session (the order in :mod:`sealsync.protocol`'s docstring).

``sync.log`` is written here, and only after the receiver's answer: a deleted name
once its DELETE_ACK arrived, a new file once its VERDICT said *verified*. Recovery
treats every logged name as synced, so logging earlier would mark files synced that
the receiver never stored (docs/design.md §9.5); logging later only costs a resend.

Files and deletions are pipelined: up to ``pipeline_depth`` files are in flight, their
verdicts read by a separate thread (:mod:`.reader`) and applied between sends, with
one fsync for all verdicts that arrived together; the file part of a round, with its
resends, is :mod:`.files`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import tenacity

from sealsync.crashpoints import crash_point
from sealsync.errors import LocalIOError, SealsyncError
from sealsync.protocol import (
    ANOTHER_SENDER,
    MAX_DEVICES_PER_QUERY,
    MAX_SCHEMA_PAYLOAD,
    PROTOCOL_VERSION,
    RESUME_MIN,
    AnyMessage,
    Bye,
    Delete,
    DeleteAck,
    Held,
    HeldQuery,
    Hello,
    Inventory,
    InventoryQuery,
    Message,
    Owners,
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
    check_device,
    encode,
    expect,
    send,
    speaks,
)
from sealsync.synclog import SyncLog
from sender.manage.snapshot import Placed, drop_from_snapshot
from sender.transfer.errors import ConnectionLost
from sender.transfer.files import FILE_WAIT, RoundFiles
from sender.transfer.filestream import PACKET_PAYLOAD, file_buffer
from sender.transfer.reader import LINK_ERRORS, REPLY_TIMEOUT, FrameReader, lost
from sender.transfer.refusals import RefusalBook
from sender.transfer.report import DirReport
from sender.transfer.schema_pos import read_position, write_position
from sender.transfer.throttle import TokenBucket, paced_sendall
from sender.transfer.verified_log import VerifiedLog

if TYPE_CHECKING:
    from sealsync.formats.common import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")

_Msg = TypeVar("_Msg", bound=Message)

Progress = Callable[..., None]
"""``progress(event: str, **fields)``; events are listed in :class:`SenderSession`."""

CLOSING_ERROR_WAIT = 1.0
"""How long a failed send waits for the ERROR frame that may say why the receiver closed."""
RETRYABLE_CODES = frozenset({"timeout", "closed"})
"""ERROR codes that end a session for a reason a new connection may not meet again."""


class _Guarded:
    """The stream as the session writes to it: paced by the bandwidth cap, counted for
    the report, and with link failures turned into ConnectionLost, or, when the
    receiver ended the session with an ERROR frame, into that error: the sender is
    usually still streaming when a refusal (``quota``, ``busy``) arrives, and the
    receiver's reason is the one line worth reporting."""

    def __init__(
        self,
        stream: Stream,
        reader: FrameReader | None = None,
        bucket: TokenBucket | None = None,
        stall_timeout: float | None = None,
    ) -> None:
        self._stream = stream
        self._reader = reader
        self._bucket = bucket
        self._stall_timeout = stall_timeout
        self.sent = 0
        """Bytes written so far."""
        self.last_sent = time.monotonic()
        """When the last write finished."""

    def recv(self, n: int) -> bytes:
        return self._stream.recv(n)

    def sendall(self, data: bytes | memoryview) -> None:
        try:
            paced_sendall(self._stream, data, self._bucket)
        except TimeoutError:
            after = f" for {self._stall_timeout:g} s" if self._stall_timeout else ""
            raise ConnectionLost(f"transfer stalled: the receiver took no data{after}") from None
        except LINK_ERRORS as exc:
            error = None
            if self._reader is not None:
                error = self._reader.closing_error(CLOSING_ERROR_WAIT)
            if error is None:
                raise lost(exc) from None
            if error.code in RETRYABLE_CODES:
                raise ConnectionLost(f"receiver ended the session: {error.message}") from None
            raise ProtocolError(f"receiver: {error.message}", code=error.code) from None
        self.sent += len(data)
        self.last_sent = time.monotonic()


class SenderSession:
    """One SSH channel's worth of protocol, from HELLO to BYE.

    Progress events: ``schema`` (position, size), ``dir_start`` (index, files, bytes,
    deleted), ``bytes`` (index, sent, total), ``file`` (index, name, status, reason),
    ``dir_end`` (index, shipped, failed, refused).
    """

    def __init__(
        self,
        stream: Stream,
        *,
        chunk_size: int = 262144,
        pipeline_depth: int = 1024,
        max_retries: int = 5,
        progress: Progress | None = None,
        reply_timeout: float = REPLY_TIMEOUT,
        file_wait: tenacity.wait.wait_base | None = None,
        inspect: Callable[[Path], FileInfo] | None = None,
        bucket: TokenBucket | None = None,
    ) -> None:
        self.reader = FrameReader(stream, reply_timeout)
        self.stream = _Guarded(stream, self.reader, bucket, _send_timeout(stream))
        self.chunk_size = chunk_size
        self.pipeline_depth = pipeline_depth
        self.max_retries = max_retries
        self.file_wait = FILE_WAIT if file_wait is None else file_wait
        self._progress = progress
        self.inspect = inspect
        self.buffer = file_buffer(chunk_size)
        """Reused for every chunk read: sends take views of it, never copies."""
        self.packet_payload = _packet_payload(stream)
        """Channel bytes per SSH packet the receiver takes: CHUNK frames fill packets."""
        self._next_id = 0
        self.welcome: Welcome | None = None
        self._files_done: float | None = None
        self._started: int | None = None  # the data dir whose ROUND_START went out early
        self.closing = False
        """Set by the caller before the session's last round: its ROUND_END carries BYE."""
        self._bye_sent = False

    # --- plumbing --------------------------------------------------------------------

    def emit(self, event: str, **fields: Any) -> None:
        if self._progress is not None:
            self._progress(event, **fields)

    def new_file_id(self) -> int:
        """Unique within the session, so a verdict always names one offer."""
        self._next_id += 1
        return self._next_id - 1

    def send(self, msg: AnyMessage) -> None:
        send(self.stream, msg)

    def receive(self, wanted: type[_Msg]) -> _Msg:
        return expect(self.reader.get(), wanted)

    def close(self) -> None:
        self.reader.stop(join=0.0)

    # --- session ---------------------------------------------------------------------

    def start_round(self, index: int) -> None:
        """Ask for data dir ``index``'s round ahead of :meth:`round`, which reads the
        answer: the round trip then overlaps the sender's own preparation (the snapshot)."""
        self.send(RoundStart(index))
        self._started = index

    def hello(self, uuid: str, name: str, sent: bool = False) -> Welcome:
        """HELLO (unless the connection ``sent`` it already) and the receiver's WELCOME."""
        if not sent:
            self.send(Hello(PROTOCOL_VERSION, uuid, name))
        welcome = self.receive(Welcome)
        if not speaks(welcome.version):
            raise ProtocolError(
                f"receiver speaks protocol version {welcome.version}, this sender "
                f"{PROTOCOL_VERSION} and the one before: upgrade the "
                f"{'sender' if welcome.version > PROTOCOL_VERSION else 'receiver'}"
            )
        self.welcome = welcome
        return welcome

    @property
    def version(self) -> int:
        """The session's protocol version, as the receiver's WELCOME chose it."""
        return self.welcome.version if self.welcome is not None else PROTOCOL_VERSION

    def held(self) -> Held | None:
        """The receiver's summary of what it holds of this sender; None from a
        receiver whose protocol version has no HELD_QUERY."""
        if self.version < 2:
            return None
        self.send(HeldQuery())
        return self.receive(Held)

    def bye(self, linger: float = 2.0) -> None:
        """Say goodbye and give the receiver a moment to close its end first.

        Closing our socket while the receiver's last SSH messages are unread makes the
        kernel reset the connection, which the receiver would log as an error.
        """
        if not self._bye_sent:
            self.send(Bye())
        deadline = time.monotonic() + linger
        try:
            while time.monotonic() < deadline:
                if self.reader.wait(deadline - time.monotonic()) is None:
                    break
        except (ConnectionLost, ProtocolError):
            pass  # the expected end: the receiver closed the channel

    def inventory(self) -> dict[str, tuple[int, str]]:
        """What the receiver holds of this sender (``send --reconcile``), page by page."""
        held: dict[str, tuple[int, str]] = {}
        after = ""
        while True:
            self.send(InventoryQuery(after))
            page = self.receive(Inventory)
            for name, size, md5 in page.files:
                held[name] = (size, md5)
            if not page.more or not page.files:
                return held
            after = page.files[-1][0]

    def ship_schema(self, schema_log: Path, pos_file: Path) -> int:
        """Send the schema log from the acknowledged position on; bytes newly acknowledged."""
        pos = read_position(pos_file)
        try:
            f = open(schema_log, "rb")  # noqa: SIM115
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise LocalIOError(f"cannot read schema log {schema_log}: {exc.strerror}") from None
        with f:
            size = os.fstat(f.fileno()).st_size
            if pos > size:
                log.warning(
                    "%s: %s says %d bytes were shipped but the log has %d; not resending",
                    schema_log,
                    pos_file,
                    pos,
                    size,
                )
                return 0
            start, rewound = pos, False
            while pos < size:
                f.seek(pos)
                data = f.read(min(MAX_SCHEMA_PAYLOAD, size - pos))
                if not data:
                    break
                self.send(Schema(pos, data))
                acked = self.receive(SchemaAck).position
                if acked == pos or (acked < pos and rewound):
                    raise ProtocolError(
                        f"receiver did not accept the schema log at byte {pos} (it holds {acked})"
                    )
                rewound = rewound or acked < pos  # it holds less than we thought: resend
                pos = acked
                write_position(pos_file, pos)
                self.emit("schema", position=pos, size=size)
            return max(pos - start, 0)

    def round(
        self,
        index: int,
        *,
        snapshot_dir: Path,
        new: Mapping[str, Placed],
        deleted: Sequence[str],
        sync_log: Path,
        refusals: RefusalBook,
        report: DirReport,
        own_uuid: str,
    ) -> None:
        """One data dir's round: deletions, then files; ``report`` says what happened.

        ``new``: the files to send, as ``take_snapshot`` placed them in ``snapshot_dir``."""
        started, sent = time.monotonic(), self.stream.sent
        try:
            self._files_done = None
            if self._started != index:
                self.start_round(index)
            self._started = None
            # asked before ROUND_READY is read (answered after a busy one too, empty):
            # its round trip overlaps ROUND_START's; a small-file round asks nothing
            ask = any(placed.size >= RESUME_MIN for placed in new.values())
            if ask:
                self.send(PartialsQuery())
            ready = self.receive(RoundReady)
            held = self.receive(Partials).partials if ask else []
            if ready.status == "busy":
                report.note = (
                    f"receiver busy ({ready.message or 'still loading an earlier round'}); "
                    "this data dir is retried on the next run"
                )
                return
            to_send = self._owners_check(list(new), refusals, report, own_uuid)
            total = sum(new[n].stream_size for n in to_send)
            partials = {name: (size, mtime, head, n) for name, size, mtime, head, n in held}
            self.emit(
                "dir_start", index=index, files=len(to_send), bytes=total, deleted=len(deleted)
            )
            with SyncLog(sync_log) as slog:
                slog.start()
                crash_point("sender.synclog.start")
                self._deletes(deleted, slog, report)
                slog.tsfile_start()
                crash_point("sender.synclog.tsfile_start")
                without_mods = {n for n, placed in new.items() if not placed.has_mods}
                verified = VerifiedLog(
                    slog,
                    sync_log,
                    lambda names: drop_from_snapshot(snapshot_dir, names, without_mods),
                )
                try:
                    files = RoundFiles(self, index, snapshot_dir, verified, refusals, report, total)
                    files.without_mods = without_mods
                    files.partials = partials
                    files.run(to_send)
                except BaseException:
                    try:
                        verified.close()  # what was verified still counts for recovery
                    except SealsyncError:
                        pass
                    raise
                verified.close()
                slog.tsfile_end()
                crash_point("sender.synclog.tsfile_end")
                self._files_done = self.stream.last_sent
                if self.closing:  # the session's last round: BYE goes with ROUND_END
                    self.stream.sendall(encode(RoundEnd()) + encode(Bye()))
                    self._bye_sent = True
                else:
                    self.send(RoundEnd())
                done = self.receive(RoundDone)
                slog.end()
                crash_point("sender.synclog.end")
            report.complete = True
            report.loaded = done.loaded
            self.emit(
                "dir_end",
                index=index,
                shipped=len(report.shipped),
                failed=len(report.failed),
                refused=len(report.refused),
            )
        finally:
            # up to the last byte before ROUND_END (the last verdicts are not paced)
            last = self._files_done if self._files_done is not None else self.stream.last_sent
            report.transfer_bytes += self.stream.sent - sent
            report.transfer_seconds += max(last - started, 0.0)

    # --- round parts -----------------------------------------------------------------

    def _owners_check(
        self, new: Sequence[str], refusals: RefusalBook, report: DirReport, own_uuid: str
    ) -> list[str]:
        """The files to send: all of ``new`` but remembered conflicts still owned elsewhere."""
        queried: dict[str, tuple[str, ...]] = {}
        devices: dict[str, None] = {}
        for name in new:
            entry = refusals.get(name)
            if entry is None or entry.status != Verdict.CONFLICT or not entry.devices:
                continue
            wanted = [d for d in dict.fromkeys(entry.devices) if d not in devices]
            if len(devices) + len(wanted) > MAX_DEVICES_PER_QUERY:
                continue  # does not fit in the one query: just offer the file again
            try:
                for device in wanted:
                    check_device(device)
            except ProtocolError:
                continue
            devices.update(dict.fromkeys(wanted))
            queried[name] = entry.devices
        if not queried:
            return list(new)
        self.send(OwnersQuery(list(devices)))
        owners = self.receive(Owners).owners
        out = []
        for name in new:
            held = [
                (d, owners.get(d, ""))
                for d in queried.get(name, ())
                if owners.get(d, "") not in ("", own_uuid)
            ]
            if not held:
                out.append(name)
                continue
            device, owner = held[0]
            more = f" and {len(held) - 1} more" if len(held) > 1 else ""
            whose = "another sender" if owner == ANOTHER_SENDER else f"sender {owner}"
            said = f"device {device} is owned by "  # the receiver's verdict names the owner
            entry = refusals.get(name)
            if owner == ANOTHER_SENDER and entry is not None and entry.reason.startswith(said):
                whose = entry.reason[len(said) :].split(" (and ", 1)[0]
            report.refused[name] = (
                f"conflict: device {device}{more} owned by {whose} on the receiver; "
                "not resent until released there (`sealsync owners release`)"
            )
        return out

    def _deletes(self, names: Sequence[str], slog: SyncLog, report: DirReport) -> None:
        slog.deleted_start()
        crash_point("sender.synclog.deleted_start")
        depth = self.pipeline_depth
        for start in range(0, len(names), depth):
            window = names[start : start + depth]
            self.stream.sendall(b"".join(encode(Delete(n)) for n in window))
            acked: list[str] = []
            try:
                for name in window:
                    ack = self.receive(DeleteAck)
                    if ack.name != name:
                        raise ProtocolError(
                            f"receiver acknowledged deleting {ack.name}, expected {name}"
                        )
                    acked.append(name)
            finally:
                if acked:
                    slog.deleted_many(acked)
                    crash_point("sender.synclog.deleted")
                    report.deleted.extend(acked)
        slog.deleted_end()
        crash_point("sender.synclog.deleted_end")


def _send_timeout(stream: Stream) -> float | None:
    """The channel's own send timeout (the stall timeout), for the error message."""
    gettimeout = getattr(stream, "gettimeout", None)
    timeout = gettimeout() if callable(gettimeout) else None
    return float(timeout) if isinstance(timeout, int | float) else None


def _packet_payload(stream: Stream) -> int:
    """Channel bytes per SSH packet on ``stream``: the largest packet the receiver
    takes (its channel's maximum; an earlier release takes 64 KiB), less what paramiko
    keeps for the packet's own fields."""
    largest = getattr(stream, "out_max_packet_size", None)
    return largest - 64 if isinstance(largest, int) else PACKET_PAYLOAD
