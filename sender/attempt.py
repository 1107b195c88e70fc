"""One attempt's work at one receiver: recover → connect → schema → one round per data
dir (select → snapshot → transfer → clean up), docs/design.md §3.1. In the words of
docs/design.md §1.1, an attempt holds one or more connections, each carrying rounds.

Recovery runs first (docs/design.md §9.1): the diff must start from what the last round
really achieved. Clean-up after a data dir *is* recovery (``recover(paths)``), so the
path a crash takes is the path every round takes.

A connection that drops mid-round is retried (tenacity, ``max_retries`` connections
that were made and lost): each new connection recovers again, which folds what
``sync.log`` recorded into ``last_local_files.txt``, and redoes select/snapshot/transfer
for what is left; data dirs already finished are not touched again. A receiver that
ends the session with ERROR ``busy`` once it is under way (it is stopping: "retry
later") has dropped the connection too. Reconnecting to a receiver that went away
(restarting: connection refused; unreachable) waits with exponential backoff and full
jitter, so that the senders of a fleet do not all come back at the same instant, and
goes on for ``reconnect_time`` seconds (a minute by default: longer than a restart)
from the first failed reconnect, however many connections that takes. A receiver that
turns a connection away for its load and says so (``Busy``: before its SSH banner, or
``ERROR busy`` at HELLO: its connection limit, too many unauthenticated connections, a
session cap) is retried the same way, from the first connection on. A connection
that cannot be made at all on the first try, a refused key or an unknown host key
are not retried: they would fail the same way (cron runs again later anyway).

The caller (:mod:`sender.send`) holds the receiver's ``sync.lock`` around this. A
``Cancel`` lets another thread end the attempt early (``sender.fleet`` does, when the
process is interrupted while attempts at several receivers run on their own threads).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import tenacity

from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.errors import naming_os_errors
from sealsync.protocol import PROTOCOL_VERSION, ErrorCode, Hello, ProtocolError, Stream, encode
from sender import lost_storage
from sender.fleet import Cancel
from sender.manage import idle_mark, shipped_mods
from sender.manage.data_owner import claim
from sender.manage.history import write_round_record
from sender.manage.identity import exchange_lease, hostname, sender_uuid
from sender.manage.layout import SchemaPaths, SenderPaths
from sender.manage.scan import scan
from sender.manage.selection import Selection, select
from sender.manage.snapshot import take_snapshot
from sender.manage.state import read_file_set
from sender.reconcile import Findings, compare, dir_state
from sender.recover.recovery import recover, recover_all
from sender.transfer.client import connect_receiver
from sender.transfer.errors import Busy, ConnectionLost, Unreachable
from sender.transfer.refusals import RefusalBook, refused_path
from sender.transfer.report import AttemptReport, DirReport, new_report
from sender.transfer.schema_pos import read_position, write_position
from sender.transfer.session import Progress, SenderSession
from sender.transfer.throttle import TokenBucket

__all__ = ["AttemptReport", "DirReport", "new_report", "sync_to_receiver"]

log = logging.getLogger(f"sealsync.{__name__}")

ROUND_WAIT: tenacity.wait.wait_base = tenacity.wait_random_exponential(multiplier=0.5, max=10.0)
"""Backoff between connections: exponential with full jitter, at most 10 s."""


class _Reconnects:
    """tenacity's stop and wait for one attempt's connections (see the module's doc):
    ``max_retries`` lost connections; reconnect failures (and connections turned away
    busy) for ``reconnect_time`` seconds from the first of a streak, the last wait cut
    so that one try falls at its end. ``lost``: connections that were made (none: the
    receiver never took one)."""

    def __init__(
        self, max_retries: int, reconnect_time: float, cancel: Cancel, wait: tenacity.wait.wait_base
    ) -> None:
        self.max_retries = max_retries
        self.reconnect_time = reconnect_time
        self.cancel = cancel
        self.backoff = wait
        self.lost = 0
        self.down_since: float | None = None
        """When the current streak of failed reconnects began (monotonic)."""

    def _down_for(self) -> float | None:
        return None if self.down_since is None else time.monotonic() - self.down_since

    def stop(self, state: tenacity.RetryCallState) -> bool:
        if self.cancel.is_set:
            return True
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, Unreachable):
            if self.down_since is None:
                self.down_since = time.monotonic()
            down = self._down_for()
            return down is None or down >= self.reconnect_time
        self.down_since = None  # a connection was made: a new streak starts from zero
        self.lost += 1
        return self.lost >= self.max_retries

    def wait(self, state: tenacity.RetryCallState) -> float:
        seconds = float(self.backoff(state))
        down = self._down_for()
        if down is not None:
            seconds = min(seconds, max(self.reconnect_time - down, 0.0))
        return seconds


class OpenConnection(Protocol):
    @property
    def stream(self) -> Stream: ...

    def close(self) -> None: ...


Connector = Callable[[SenderConfig, ReceiverEndpoint], OpenConnection]


def sync_to_receiver(
    config: SenderConfig,
    receiver: ReceiverEndpoint,
    *,
    progress: Progress | None = None,
    connector: Connector | None = None,
    report: AttemptReport | None = None,
    cancel: Cancel | None = None,
    reconcile: bool = False,
) -> AttemptReport:
    """Sync every data dir of ``config`` to ``receiver``; the report says what happened.

    Raises SealsyncError for what stops the whole attempt (unreachable, untrusted or
    refusing receiver, protocol error); a data dir that could not finish (receiver
    busy, connection lost for good) is a note in the report and ``ok`` is False.
    ``connector`` replaces the SSH connection (tests). ``report`` (from
    :func:`~sender.transfer.report.new_report`) is filled in as the attempt goes, so a
    caller whose attempt raised or was interrupted still knows what it did until then.
    Once ``cancel`` is set no new connection is made, and the data dirs that did
    not finish say "interrupted". ``reconcile`` first compares the receiver's
    inventory with this sender's state (:mod:`sender.reconcile`) and ships again or
    deletes what differs. Without it, the first connection checks that the receiver
    still holds what this sender shipped there (:mod:`sender.lost_storage`) and, as
    ``on_lost_storage`` says, reconciles, raises StorageLost, or does not ask.

    ``progress(event, **fields)`` is called on this thread with: ``connected``
    (receiver, attempt: the connection's number), ``retry`` (attempt, reason),
    ``reconcile`` (reason: the receiver lacks what was shipped, so this attempt
    reconciles), ``schema`` (position, size), ``dir_start`` (index, files, bytes, deleted),
    ``bytes`` (index, sent, total) after every chunk, ``file`` (index, name, status,
    reason) for each answer, ``dir_end`` (index, shipped, failed, refused).
    """
    started = time.monotonic()
    if report is None:
        report = new_report(receiver.name, receiver.address, config.data_dirs)
    report.bwlimit = config.bwlimit_for(receiver)
    own_uuid = str(uuid.UUID(sender_uuid(config.schema_dir)))
    for data_dir in config.data_dirs:  # before any state is written: whose it is
        claim(data_dir, own_uuid)
    cancel = cancel or Cancel()
    state = _Attempt(
        config, receiver, report, own_uuid, connector or _greeting(own_uuid), progress, cancel
    )
    state.reconcile = reconcile
    reconnects = _Reconnects(config.max_retries, config.reconnect_time, cancel, ROUND_WAIT)
    retrying = tenacity.Retrying(
        stop=reconnects.stop,
        wait=reconnects.wait,
        sleep=_until(cancel),
        retry=_retryable,
        before_sleep=state.before_sleep,
        reraise=True,
    )
    try:
        for connection in retrying:  # tenacity's attempts are connections here
            with connection:
                report.attempts = connection.retry_state.attempt_number
                state.connection()
    except (ConnectionLost, Unreachable) as exc:
        if isinstance(exc, Unreachable) and not reconnects.lost and not cancel.is_set:
            raise  # the receiver never took a connection: its reason is the attempt's
        for d in report.dirs:
            if not d.complete and d.note is None:
                d.note = (
                    "interrupted"
                    if cancel.is_set
                    else f"connection lost, gave up after {_connections(report.attempts)}: {exc}"
                )
    finally:
        report.seconds = time.monotonic() - started
    for d, data_dir in zip(report.dirs, config.data_dirs, strict=True):
        with naming_os_errors("write"):
            write_round_record(SenderPaths(data_dir, receiver.host, receiver.port), d.to_dict())
    return report


def _connections(n: int) -> str:
    return "1 connection" if n == 1 else f"{n} connections"


def _until(cancel: Cancel) -> Callable[[float], None]:
    """tenacity's sleep between connections, cut short by a cancel."""

    def sleep(seconds: float) -> None:
        cancel.event.wait(seconds)

    return sleep


def _retryable(state: tenacity.RetryCallState) -> bool:
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, ConnectionLost | Busy):
        return True  # Busy: the receiver said a later connection may be served
    # Unreachable on a reconnect: the receiver may be restarting (the stop rule bounds
    # it by time); on the first connection it is the answer (cron runs again later).
    return isinstance(exc, Unreachable) and state.attempt_number > 1


def _greeting(own_uuid: str) -> Connector:
    """The real connection, with this sender's HELLO sent alongside the subsystem request."""
    hello = encode(Hello(PROTOCOL_VERSION, own_uuid, hostname()))

    def connector(config: SenderConfig, receiver: ReceiverEndpoint) -> OpenConnection:
        return connect_receiver(config, receiver, greeting=hello)

    return connector


class _Attempt:
    """One attempt at one receiver: its connections one after another, and in each
    the rounds of the data dirs not finished yet."""

    def __init__(
        self,
        config: SenderConfig,
        receiver: ReceiverEndpoint,
        report: AttemptReport,
        own_uuid: str,
        connector: Connector,
        progress: Progress | None,
        cancel: Cancel,
    ) -> None:
        self.config = config
        self.receiver = receiver
        self.report = report
        self.own_uuid = own_uuid
        self.connector = connector
        self.progress = progress
        self.cancel = cancel
        # one bucket for the whole attempt: its connections and data dirs share the cap
        self.bucket = TokenBucket(report.bwlimit) if report.bwlimit else None
        self.reconcile = False
        self.held_checked = False
        """The lost-storage check (sender/lost_storage.py) ran, on the first connection."""
        self.schema_rewound = False
        """A reconcile offered the schema log from its start (once per attempt)."""
        self.findings: list[Findings] | None = None
        """This attempt's reconcile findings per data dir (asked again at each connection:
        what an earlier one shipped is held by then)."""

    def emit(self, event: str, **fields: object) -> None:
        if self.progress is not None:
            self.progress(event, **fields)

    def before_sleep(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        self.emit("retry", attempt=state.attempt_number, reason=str(exc))

    def connection(self) -> None:
        """One connection: recover, connect, then :meth:`_session`."""
        config, receiver = self.config, self.receiver
        with naming_os_errors("recover the sender state at"):
            recover_all(config.data_dirs, receiver.host, receiver.port)
        if self.cancel.is_set:
            raise ConnectionLost("interrupted")
        conn = self.connector(config, receiver)
        try:
            with self.cancel.closing(conn.close):
                self._session(conn)
        except ConnectionLost:
            reason = getattr(conn, "lost_reason", None)  # a dead link, said as such
            if reason and not self.cancel.is_set:
                raise ConnectionLost(reason) from None
            raise
        finally:
            conn.close()

    def _hello(self, session: SenderSession, conn: OpenConnection) -> None:
        """HELLO and WELCOME; a receiver answering busy (a session cap, its connection
        limit) may serve a later connection: Busy, retried."""
        try:
            session.hello(self.own_uuid, hostname(), sent=getattr(conn, "greeted", False))
        except ProtocolError as exc:
            if exc.code != ErrorCode.BUSY:
                raise
            raise Busy(f"receiver {self.receiver.address} turned the session away: {exc}") from None

    def _session(self, conn: OpenConnection) -> None:
        config, receiver = self.config, self.receiver
        self.emit("connected", receiver=receiver.address, attempt=self.report.attempts)
        session = SenderSession(
            conn.stream,
            chunk_size=config.chunk_size,
            pipeline_depth=config.pipeline_depth,
            max_retries=config.max_retries,
            progress=self.progress,
            reply_timeout=config.stall_timeout,
            bucket=self.bucket,
        )
        try:
            self._hello(session, conn)
            exchange_lease(  # before anything else: a copy of this sender stops here
                session,
                SchemaPaths(config.schema_dir, receiver.host, receiver.port).lease,
                config.schema_dir,
                config.source,
                receiver.name,
            )
            try:
                self._rounds(session)
            except ProtocolError as exc:
                if exc.code != ErrorCode.BUSY:
                    raise
                # under way, busy means the receiver is stopping: reconnect, retry later
                raise ConnectionLost(f"receiver ended the session: {exc}") from None
        finally:
            session.close()

    def _rounds(self, session: SenderSession) -> None:
        """The lost-storage check, schema, the reconcile's comparison, a round per
        unfinished data dir, BYE."""
        config, receiver = self.config, self.receiver
        if not self.reconcile and not self.held_checked:
            self.held_checked = True
            self._check_held(session)
        schema = SchemaPaths(config.schema_dir, receiver.host, receiver.port)
        shipped_from = read_position(schema.schema_pos)
        if self.reconcile and not self.schema_rewound:
            # a receiver that lost files may have lost its copy of the schema log too:
            # offered from the start once, it keeps only the bytes it lacks
            self.schema_rewound = True
            with naming_os_errors("write"):
                write_position(schema.schema_pos, 0)
        try:
            session.ship_schema(schema.schema_log, schema.schema_pos)
        finally:  # pieces acknowledged before a dropped connection count too
            shipped_to = read_position(schema.schema_pos)
            self.report.schema_bytes += max(shipped_to - shipped_from, 0)
        if self.reconcile:
            self.findings = self._compare(session)
        todo = [
            i for i, d in enumerate(self.report.dirs) if not d.complete and d.note is None
        ]  # the others finished (or were told busy) over an earlier connection
        for i in todo:
            # the last round's ROUND_END takes the BYE along: no round trip of its own
            session.closing = i == todo[-1]
            with naming_os_errors("update"):  # what the steps did not name
                self.data_dir(session, i, Path(config.data_dirs[i]), self.report.dirs[i])
        session.bye()

    def _check_held(self, session: SenderSession) -> None:
        """A receiver holding other files of this sender than it shipped there: turn
        this attempt into a reconcile, or refuse it (``on_lost_storage``)."""
        action = self.config.on_lost_storage
        if action == lost_storage.IGNORE:
            return
        with naming_os_errors("read"):
            shipped = lost_storage.shipped_to(self.config, self.receiver)
        if not shipped:
            return  # nothing shipped there yet: nothing it could have lost
        held = session.held()
        if held is None:
            return  # a receiver of protocol version 1: it cannot say
        problem = lost_storage.difference(held, shipped, self.receiver.name)
        if problem is None:
            return
        if action == lost_storage.FAIL:
            raise lost_storage.refusal(self.config, self.receiver, problem)
        log.warning("%s: reconciling, as send --reconcile does", problem)
        self.emit("reconcile", reason=problem)
        self.reconcile = True

    def _compare(self, session: SenderSession) -> list[Findings]:
        held = session.inventory()
        dirs = []
        for data_dir in self.config.data_dirs:
            paths = SenderPaths(Path(data_dir), self.receiver.host, self.receiver.port)
            with naming_os_errors("read"):
                dirs.append(dir_state(Path(data_dir), paths.last_local_files, paths.scan_cache))
        findings = compare(held, dirs, self.receiver.name)
        for d, found in zip(self.report.dirs, findings, strict=True):
            if d.reconcile is None:  # what the first connection found is what there was
                d.reconcile = found.to_dict()
        return findings

    def data_dir(self, session: SenderSession, index: int, data_dir: Path, d: DirReport) -> None:
        started = time.monotonic()
        paths = SenderPaths(data_dir, self.receiver.host, self.receiver.port)
        found = None
        mods_seen: dict[str, shipped_mods.ModsId] = {}
        with naming_os_errors("read"):
            idle = idle_mark.unchanged(
                paths.idle_mark, data_dir, paths.last_local_files, paths.shipped_mods
            )
        if idle and self.findings is None:
            d.rejected = {}
            selection = Selection(new=(), deleted=())  # nothing changed since an idle round
        else:
            found = scan(data_dir, cache=paths.scan_cache)
            d.rejected = dict(found.rejected)
            with naming_os_errors("read"):
                last = read_file_set(paths.last_local_files, known=found.present)
                mods_seen = shipped_mods.current_identities(data_dir, found.with_mods & last)
                shipped = shipped_mods.read_identities(paths.shipped_mods)
            changed = shipped_mods.changed(mods_seen, shipped)
            if self.findings is None:
                selection = select(found, last, changed)
            else:  # reconcile: ship again what the receiver lacks, delete what it has over
                found_here = self.findings[index]
                selection = select(found, last - found_here.reship, changed)
                # a different copy goes first: storage never replaces a file by another
                deleted = set(selection.deleted) | set(found_here.extra)
                deleted |= set(found_here.different) & set(selection.new)
                selection = Selection(new=selection.new, deleted=tuple(sorted(deleted)))
        with naming_os_errors("read"):
            refusals = RefusalBook(refused_path(paths))
        refusals.keep_only(selection.new)
        d.failed.clear()
        d.refused.clear()
        try:
            if not selection.new and not selection.deleted:
                d.complete = True
                if found is not None and not found.rejected:
                    with naming_os_errors("write"):
                        idle_mark.record(
                            paths.idle_mark,
                            data_dir,
                            found.folders,
                            paths.last_local_files,
                            paths.shipped_mods,
                            mods_seen,
                        )
                return
            session.start_round(index)  # its answer is read once the snapshot is taken
            with naming_os_errors("create"):
                paths.folder.mkdir(parents=True, exist_ok=True)
            with naming_os_errors("link"):
                placed = take_snapshot(
                    data_dir,
                    paths.snapshot,
                    selection.new,
                    with_mods=None if found is None else found.with_mods,
                )
            with naming_os_errors("write"):
                # before sync.log can name any of them (shipped_mods' docstring, point 1)
                shipped_mods.record_snapshot(paths, [n for n, p in placed.items() if p.has_mods])
                session.round(
                    index,
                    snapshot_dir=paths.snapshot,
                    new=placed,
                    deleted=selection.deleted,
                    sync_log=paths.sync_log,
                    refusals=refusals,
                    report=d,
                    own_uuid=self.own_uuid,
                )
        finally:
            with naming_os_errors("write"):
                refusals.save()
            with naming_os_errors("recover the sender state at"):
                recover(paths)  # the clean-up (docs/design.md §3.6) is recovery's steps 4-8
            d.seconds += time.monotonic() - started
