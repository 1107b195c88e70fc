"""One send (one ``sealsync send`` process): an attempt per receiver, each recorded
however it ends (the words are docs/design.md §1.1's).

An attempt is the lock, then one round per data dir (:mod:`sender.attempt`). It ends one of four
ways (:mod:`sender.manage.history`): *ok*; *failed* (the receiver down or refusing,
a file here that cannot be written, a round that left files unsynced); *busy*
(another sender holds the lock); *interrupted* (Ctrl-C or SIGTERM — the round's own
clean-up has run by then, as it does on any error, so the next send recovers). Every
one is appended to the receiver's history before the send moves on, and after the
last one the metrics textfile is rewritten from the histories.

Nothing here prints: the CLI words what the results say.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.errors import (
    EXIT_FAILURE,
    EXIT_LOCKED,
    EXIT_OK,
    ConfigError,
    LocalIOError,
    LockHeld,
    SealsyncError,
    describe_os_error,
    interrupt_exit_code,
)
from sealsync.printable import single_line
from sealsync.protocol import ProtocolError
from sender.manage.history import (
    BUSY,
    FAILED,
    INTERRUPTED,
    OK,
    Attempt,
    append_attempt,
)
from sender.manage.layout import SchemaPaths, data_dir_problem
from sender.transfer.report import AttemptReport, new_report

if TYPE_CHECKING:
    from typing import TextIO

    from sender.fleet import Cancel
    from sender.transfer.session import Progress

INCOMPLETE = "incomplete"
"""The failure kind of a round that ran but left files unsynced or a data dir unfinished."""
INTERNAL = "internal"
"""The failure kind of an unexpected error (a bug): recorded, then raised as it is."""


@dataclass
class AttemptResult:
    """What one attempt did, as the CLI needs it."""

    attempt: Attempt
    report: AttemptReport | None
    """The round's report, also when it raised part-way; None if it never started."""
    exit_code: int
    error: BaseException | None = None
    """The exception that ended the attempt (SealsyncError, KeyboardInterrupt, a bug)."""
    record_error: str | None = None
    """Why the attempt could not be added to the history, if it could not."""

    @property
    def interrupted(self) -> KeyboardInterrupt | None:
        return self.error if isinstance(self.error, KeyboardInterrupt) else None

    def to_dict(self) -> dict[str, Any]:
        a = self.attempt
        return {
            "receiver": a.receiver,
            "address": a.address,
            "outcome": a.outcome,
            "kind": a.kind,
            "error": a.error,
            "exit_code": self.exit_code,
            "started": a.start,
            "ended": a.end,
            "seconds": round(a.seconds, 3),
            "shipped_files": a.new,
            "shipped_bytes": a.bytes,
            "deleted_files": a.deleted,
            "refused_files": a.refused,
            "failed_files": a.failed,
        }


@dataclass
class SendResult:
    """Every attempt of one ``sealsync send``, in receiver order."""

    results: list[AttemptResult] = field(default_factory=list)
    interruption: KeyboardInterrupt | None = None
    """Ctrl-C or SIGTERM while rounds ran on their own threads (a round's own
    interruption is in its result)."""
    preflight: ConfigError | None = None
    """A configuration mistake found before any receiver (it failed every attempt)."""
    metrics_error: str | None = None

    @property
    def interrupted(self) -> KeyboardInterrupt | None:
        if self.interruption is not None:
            return self.interruption
        for r in self.results:
            if r.interrupted is not None:
                return r.interrupted
        return None

    @property
    def exit_code(self) -> int:
        """The send's exit code: an interruption's; else the one code all failures share,
        or 1 when they differ; 1 when nothing failed but a record could not be written."""
        if self.interrupted is not None:
            return interrupt_exit_code(self.interrupted)
        codes = {r.exit_code for r in self.results if r.exit_code != EXIT_OK}
        if len(codes) == 1:
            return codes.pop()
        if codes:
            return EXIT_FAILURE
        if self.metrics_error or any(r.record_error for r in self.results):
            return EXIT_FAILURE
        return EXIT_OK


def check_data_dirs(config: SenderConfig) -> None:
    """Raise ConfigError (file, key, folder and fix) for a data dir that is not one, or
    whose state another sender owns (:mod:`sender.manage.data_owner`)."""
    from sender.manage.data_owner import owner_problem

    for i, data_dir in enumerate(config.data_dirs):
        problem = data_dir_problem(data_dir)
        if problem is not None:
            raise ConfigError(f"{config.source}: [sender] data_dirs[{i}]: {problem}")
        owned = owner_problem(config.source, i, data_dir, config.schema_dir)
        if owned is not None:
            raise ConfigError(owned)


def send_all(
    config: SenderConfig,
    receivers: list[ReceiverEndpoint],
    *,
    progress_for: Callable[[ReceiverEndpoint, TextIO | None], Progress | None] = (
        lambda r, stream: None
    ),
    each: Callable[[AttemptResult], None] = lambda r: None,
    reconcile: bool = False,
) -> SendResult:
    """An attempt per receiver, all at once (:mod:`sender.fleet`), then the metrics.

    ``progress_for(receiver, stream)`` makes a round's progress display, drawing on
    ``stream`` (None: stderr). ``each`` sees the results in receiver order once every
    round has ended. An interruption cancels every round; each records itself as
    interrupted while it unwinds.
    """
    from sender.fleet import Lane, run_fleet

    sent = SendResult()
    try:
        check_data_dirs(config)
    except ConfigError as exc:
        sent.preflight = exc
    done: dict[int, AttemptResult] = {}
    index = {id(r): i for i, r in enumerate(receivers)}

    def one(lane: Lane) -> AttemptResult:
        result = run_attempt(
            config,
            lane.receiver,
            progress=progress_for(lane.receiver, lane.progress),
            preflight=sent.preflight,
            cancel=lane.cancel,
            reconcile=reconcile,
        )
        done[index[id(lane.receiver)]] = result
        return result

    try:
        run_fleet(receivers, one)
    except KeyboardInterrupt as exc:
        sent.interruption = exc
    sent.results = [done[i] for i in sorted(done)]
    for result in sent.results:
        each(result)
    if config.metrics_textfile is not None:
        from sender.metrics import write_sender_metrics

        try:
            write_sender_metrics(config)
        except LocalIOError as exc:
            sent.metrics_error = str(exc)
    return sent


def run_attempt(
    config: SenderConfig,
    receiver: ReceiverEndpoint,
    *,
    progress: Progress | None = None,
    preflight: ConfigError | None = None,
    cancel: Cancel | None = None,
    reconcile: bool = False,
) -> AttemptResult:
    """Lock, round, and the history line, whatever happens.

    Raises nothing of the round's (only a second interruption while recording): the
    caller re-raises ``result.error`` when it is an interruption or a bug, after it has
    said what it has to say.
    """
    from sender.attempt import sync_to_receiver
    from sender.lock import receiver_lock

    start, started = time.time(), time.monotonic()
    report: AttemptReport | None = None
    error: BaseException | None = None
    try:
        if preflight is not None:
            raise preflight
        with receiver_lock(config.schema_dir, receiver.host, receiver.port):
            report = new_report(receiver.name, receiver.address, config.data_dirs)
            report = sync_to_receiver(
                config,
                receiver,
                progress=progress,
                report=report,
                cancel=cancel,
                reconcile=reconcile,
            )
    except (Exception, KeyboardInterrupt) as exc:  # every end is recorded
        error = exc
    stopped = cancel.reason if cancel is not None else None
    if isinstance(stopped, KeyboardInterrupt) and (report is None or not report.ok):
        error = stopped  # cancelled by the main thread's interruption: recorded as such
    # the end is the start plus the time measured on the monotonic clock: a wall-clock
    # step during the attempt must not make its duration (a metric) wrong or negative
    attempt = _attempt(receiver, start, start + (time.monotonic() - started), report, error)
    result = AttemptResult(attempt, report, _exit_code(attempt, error), error)
    try:
        append_attempt(SchemaPaths(config.schema_dir, receiver.host, receiver.port), attempt)
    except LocalIOError as exc:
        result.record_error = str(exc)
    return result


def _attempt(
    receiver: ReceiverEndpoint,
    start: float,
    end: float,
    report: AttemptReport | None,
    error: BaseException | None,
) -> Attempt:
    attempt = Attempt(
        receiver=receiver.name,
        address=receiver.address,
        start=start,
        end=end,
        outcome=OK,
    )
    if report is not None:
        d = report.to_dict()
        attempt = replace(
            attempt,
            new=report.shipped_files,
            bytes=report.shipped_bytes,
            deleted=sum(len(x["deleted"]) for x in d["dirs"]),
            refused=sum(len(x["refused"]) for x in d["dirs"]),
            failed=sum(len(x["failed"]) for x in d["dirs"]),
            schema_bytes=report.schema_bytes,
            connections=report.attempts,
        )
    if isinstance(error, KeyboardInterrupt):
        return replace(attempt, outcome=INTERRUPTED, kind=None, error=_interrupt_text(error))
    if isinstance(error, LockHeld):
        return replace(attempt, outcome=BUSY, kind=error.kind, error=single_line(str(error)))
    if error is not None:
        kind, text = failure_of(error)
        return replace(attempt, outcome=FAILED, kind=kind, error=text)
    assert report is not None
    if not report.ok:
        return replace(attempt, outcome=FAILED, kind=INCOMPLETE, error=incomplete_reason(report))
    return attempt


def failure_of(error: BaseException) -> tuple[str, str]:
    """(kind, one line) of an error that ended an attempt."""
    if isinstance(error, ProtocolError):
        kind = "receiver" if str(error).startswith("receiver: ") else "protocol"
        return kind, single_line(str(error))
    if isinstance(error, SealsyncError):
        return error.kind, single_line(str(error))
    if isinstance(error, OSError) and error.filename is not None:
        return LocalIOError.kind, describe_os_error(error, "access")
    return INTERNAL, single_line(f"internal error: {type(error).__name__}: {error}")


def _interrupt_text(exc: KeyboardInterrupt) -> str:
    from sealsync.errors import interrupt_name

    return f"interrupted by {interrupt_name(exc)}"


def _exit_code(attempt: Attempt, error: BaseException | None) -> int:
    if isinstance(error, KeyboardInterrupt):
        return interrupt_exit_code(error)
    if isinstance(error, SealsyncError):
        return error.exit_code
    if attempt.outcome == BUSY:
        return EXIT_LOCKED
    return EXIT_OK if attempt.outcome == OK else EXIT_FAILURE


def incomplete_reason(report: AttemptReport) -> str:
    """The first thing a round left undone, and how many more there are."""
    problems: list[str] = []
    for d in report.dirs:
        if d.note:
            problems.append(f"{d.data_dir}: {d.note}")
        problems.extend(f"refused {n}: {why}" for n, why in sorted(d.refused.items()))
        problems.extend(f"not synced {n}: {why}" for n, why in sorted(d.failed.items()))
        if not d.complete and not d.note:
            problems.append(f"{d.data_dir}: the round did not finish")
    if not problems:
        return "the round did not finish"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return single_line(problems[0]) + more
