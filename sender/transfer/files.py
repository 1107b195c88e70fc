"""The file part of one round: a send queue, a window of files in flight, resends.

Up to ``pipeline_depth`` files are in flight; their verdicts, read by the session's
reader thread, are applied between sends, and the verified ones reach ``sync.log``
together (:class:`~sender.transfer.verified_log.VerifiedLog`). A *mismatch* verdict
puts the file back in the queue after a tenacity backoff until ``max_retries`` sends,
after which it stays unsynced for the next run; *conflict* and *refused* are
reported and remembered in ``refused.txt`` (:mod:`.refusals`) instead of being
marked synced.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import tenacity

from sealsync.crashpoints import crash_point
from sealsync.protocol import AnyMessage, FileVerdict, ProtocolError, Stream, Verdict, expect
from sender.manage.snapshot import snapshot_path
from sender.transfer.filestream import OpenedFile, Unsendable, open_snapshot_file, send_file
from sender.transfer.reader import FrameReader
from sender.transfer.refusals import Refusal, RefusalBook
from sender.transfer.report import DirReport
from sender.transfer.verified_log import VerifiedLog

if TYPE_CHECKING:
    from sealsync.formats.common import FileInfo

log = logging.getLogger("sealsync.sender.transfer.session")  # a round's lines are the session's

FILE_WAIT: tenacity.wait.wait_base = tenacity.wait_exponential(multiplier=0.05, max=2.0)
"""Backoff before resending a file the receiver answered *mismatch* for."""


def backoff(wait: tenacity.wait.wait_base, attempt: int) -> float:
    """Seconds tenacity's ``wait`` prescribes after failed attempt number ``attempt``.

    Resends are interleaved with the other files in flight, so tenacity cannot drive
    them as a decorated call; it still decides how long each one waits.
    """
    state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]
    state.attempt_number = attempt
    return float(wait(state))


class FileChannel(Protocol):
    """What the file part of a round uses of its session (``SenderSession``)."""

    @property
    def stream(self) -> Stream: ...
    @property
    def reader(self) -> FrameReader: ...
    @property
    def buffer(self) -> bytearray: ...
    @property
    def packet_payload(self) -> int: ...
    @property
    def pipeline_depth(self) -> int: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def file_wait(self) -> tenacity.wait.wait_base: ...
    @property
    def inspect(self) -> Callable[[Path], FileInfo] | None: ...
    def emit(self, event: str, **fields: Any) -> None: ...
    def new_file_id(self) -> int: ...


@dataclass
class _InFlight:
    name: str
    sends: int
    size: int


class RoundFiles:
    """The file part of one round: a send queue, a window of files in flight, resends."""

    def __init__(
        self,
        session: FileChannel,
        index: int,
        snapshot_dir: Path,
        verified: VerifiedLog,
        refusals: RefusalBook,
        report: DirReport,
        total: int,
    ) -> None:
        self.s = session
        self.index = index
        self.snapshot_dir = snapshot_dir
        self.verified = verified
        self.refusals = refusals
        self.report = report
        self.total = total
        self.sent_bytes = 0
        self.in_flight: OrderedDict[int, _InFlight] = OrderedDict()
        self.sends: dict[str, int] = {}
        self.resend: list[tuple[float, int, str]] = []  # (due, tie-break, name)
        self.partials: dict[str, tuple[int, int, str, int]] = {}
        """The receiver's partial uploads (PARTIALS): name -> (size, mtime, head, held)."""
        self.resumed_bytes = 0
        """Bytes not sent because the receiver held them already."""
        self.without_mods: set[str] = set()
        """Names the snapshot holds no ``.mods`` for: none is looked for."""

    def run(self, names: Sequence[str]) -> None:
        todo = deque(names)
        while todo or self.resend or self.in_flight:
            self.absorb(block=False)
            if len(self.in_flight) >= self.s.pipeline_depth:
                self.absorb(block=True)
                continue
            now = time.monotonic()
            if self.resend and self.resend[0][0] <= now:
                self.offer(heapq.heappop(self.resend)[2])
            elif todo:
                self.offer(todo.popleft())
            elif self.resend:
                delay = self.resend[0][0] - now
                if self.in_flight:
                    self.absorb(block=True, timeout=delay)
                else:
                    time.sleep(delay)
            elif self.in_flight:
                self.absorb(block=True)

    def offer(self, name: str) -> None:
        try:
            opened = open_snapshot_file(self.snapshot_dir, name, mods=name not in self.without_mods)
        except Unsendable as exc:
            self.report.failed[name] = str(exc)
            self.s.emit("file", index=self.index, name=name, status="failed", reason=str(exc))
            return
        try:
            file_id = self.s.new_file_id()
            sends = self.sends.get(name, 0) + 1
            self.sends[name] = sends
            if sends > 1:
                self.total += opened.stream_size  # progress counts the resend too
            self.in_flight[file_id] = _InFlight(name, sends, opened.stream_size)
            offset = self.resume_offset(opened)
            if offset:
                self.on_bytes(offset)  # held by the receiver: done as far as progress goes
            send_file(
                self.s.stream,
                opened,
                file_id,
                self.s.buffer,
                self.on_bytes,
                offset,
                self.s.packet_payload,
            )
            crash_point("sender.file.sent")
        finally:
            opened.close()

    def resume_offset(self, opened: OpenedFile) -> int:
        """Where this file's stream may start: the bytes of it the receiver holds
        (same size, mtime and first-chunk digest), else 0. Used once: a resend after
        a mismatch sends the whole file."""
        held = self.partials.pop(opened.name, None)
        if held is None or not opened.resumable:
            return 0
        size, mtime, head, offset = held
        if size != opened.size or mtime != opened.mtime or not 0 < offset <= size:
            return 0
        if opened.head_md5() != head:
            log.info("%s: the receiver's partial upload is of another file", opened.name)
            return 0
        log.info("%s: resuming at byte %d of %d", opened.name, offset, opened.size)
        self.resumed_bytes += offset
        return offset

    def on_bytes(self, n: int) -> None:
        self.sent_bytes += n
        self.s.emit("bytes", index=self.index, sent=self.sent_bytes, total=self.total)

    def absorb(self, block: bool, timeout: float | None = None) -> None:
        """Apply the verdicts that are here (after waiting for one if ``block``)."""
        verified: list[_InFlight] = []
        try:
            first = True
            while self.in_flight:
                if first and block:
                    if timeout is None:
                        msg: AnyMessage | None = self.s.reader.get()
                    else:
                        msg = self.s.reader.wait(max(timeout, 0.0))
                else:
                    msg = self.s.reader.poll()
                first = False
                if msg is None:
                    break
                verdict = expect(msg, FileVerdict)
                item = self.match(verdict)
                if verdict.status == Verdict.VERIFIED:
                    verified.append(item)
                else:
                    self.not_verified(item, verdict)
        finally:
            if verified:
                self.verified.add([v.name for v in verified])
                for v in verified:
                    self.report.shipped.append(v.name)
                    self.report.shipped_bytes += v.size
                    self.report.failed.pop(v.name, None)
                    self.report.refused.pop(v.name, None)
                    self.refusals.forget(v.name)
                    self.s.emit(
                        "file", index=self.index, name=v.name, status=Verdict.VERIFIED, reason=""
                    )

    def match(self, verdict: FileVerdict) -> _InFlight:
        expected_id, item = next(iter(self.in_flight.items()))
        if verdict.file_id != expected_id or verdict.name != item.name:
            raise ProtocolError(
                f"receiver answered for file {verdict.file_id} ({verdict.name}), "
                f"expected {expected_id} ({item.name})"
            )
        del self.in_flight[expected_id]
        return item

    def not_verified(self, item: _InFlight, verdict: FileVerdict) -> None:
        name, reason = item.name, verdict.reason
        if verdict.status == Verdict.MISMATCH:
            if item.sends < self.s.max_retries:
                due = time.monotonic() + backoff(self.s.file_wait, item.sends)
                heapq.heappush(self.resend, (due, item.sends, name))
                log.info("%s: receiver answered mismatch (%s), resending", name, reason)
                return
            why = f"checksum mismatch after {item.sends} attempts"
            self.report.failed[name] = f"{why}: {reason}" if reason else why
        else:
            devices: tuple[str, ...] = ()
            if verdict.status == Verdict.CONFLICT:
                devices = _devices(Path(snapshot_path(self.snapshot_dir, name)), self.s.inspect)
            self.refusals.record(Refusal(name, verdict.status, reason, devices))
            self.report.refused[name] = f"{verdict.status}: {reason}" if reason else verdict.status
        self.s.emit("file", index=self.index, name=name, status=verdict.status, reason=reason)


def _devices(path: Path, inspect: Callable[[Path], FileInfo] | None) -> tuple[str, ...]:
    """The devices of a refused file, for the next round's OWNERS_QUERY.

    The devices come from the file's metadata (``formats.verify``, as the receiver reads
    them), which every format version the receiver accepts has, without decoding data.
    ``sealsync.formats`` is imported here, not at the top: the format readers pull in
    heavy libraries that a round without conflicts never needs.
    """
    try:
        inspect_file: Callable[[Path], FileInfo]
        if inspect is None:
            from sealsync.formats import verify as inspect_file
        else:
            inspect_file = inspect
        return tuple(str(d) for d in inspect_file(path).devices)
    except Exception as exc:  # unreadable here: the file is simply offered again
        log.warning("cannot read the devices of %s (%s); it will be offered again", path, exc)
        return ()
