"""The parts of a receiver session, each alone: the commit pipeline, one session's share
of its sender's limits, the stall-watched channel and a round's ``sync.log``.

test_receiver_session.py drives them together through a whole session over a socket
pair; here each is given fakes, so an ordering or accounting rule fails by itself.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from receiver.channel import SessionChannel, Stalled, WatchedStream
from receiver.commit import Arrived, CommitPipeline
from receiver.layout import SenderFolder
from receiver.limits import ByteLedger, Quota, SlotCounter, StallWindow
from receiver.round_state import RoundState
from receiver.session_limits import SessionAdmission, SessionLimits
from sealsync.protocol import ErrorCode, FileBegin, ProtocolError, RoundEnd, encode

UUID = "01234567-89ab-cdef-0123-456789abcdef"


def _item(i: int, size: int = 10) -> Arrived:
    begin = FileBegin(i, f"sequence/sg/0/{i}.tsfile", size, 0, -1)
    return Arrived(begin, None)


class _Recorder:
    """A commit function that records its batches and may be held back per batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.logged: list[str] = []
        self.gates: dict[int, threading.Event] = {}
        self.lock = threading.Lock()

    def commit(self, batch: list[Arrived], rnd: object, earlier: Future[None] | None) -> None:
        with self.lock:
            index = len(self.batches)
            self.batches.append([item.name for item in batch])
        gate = self.gates.get(index)
        if gate is not None:
            assert gate.wait(10)
        if earlier is not None:
            earlier.result()
        with self.lock:
            self.logged.extend(item.name for item in batch)
        for item in batch:
            item.verdict("verified", "")


def _pipeline(
    recorder: _Recorder, waiting: list[bool], **bounds: int
) -> tuple[CommitPipeline, list[str]]:
    answered: list[str] = []
    pipeline = CommitPipeline(
        recorder.commit,  # type: ignore[arg-type]
        lambda batch: answered.extend(item.name for item in batch),
        lambda: waiting[0],
        **bounds,
    )
    return pipeline, answered


def test_a_pipeline_answers_every_stream_in_arrival_order_whatever_order_batches_finish() -> None:
    recorder = _Recorder()
    recorder.gates[0] = threading.Event()  # the first batch is slow
    waiting = [True]  # the sender keeps streaming: only full batches go
    pipeline, answered = _pipeline(recorder, waiting, max_batch=2)
    rnd = object()
    items = [_item(i) for i in range(5)]
    for item in items:
        pipeline.add(item)
        pipeline.pump(rnd)  # type: ignore[arg-type]
    assert recorder.batches[:2] == [[items[0].name, items[1].name], [items[2].name, items[3].name]]
    assert answered == []  # the first batch holds every answer behind it
    recorder.gates[0].set()
    assert pipeline.flush(rnd)  # type: ignore[arg-type]
    assert answered == [item.name for item in items]
    assert recorder.logged == answered  # the second batch logged after the first
    assert not pipeline.pending
    assert not pipeline.flush(rnd)  # type: ignore[arg-type]
    assert pipeline.close() == []


def test_a_pipeline_closes_a_batch_at_its_byte_bound_while_the_sender_streams() -> None:
    recorder = _Recorder()
    pipeline, answered = _pipeline(recorder, [True], max_batch=100, max_batch_bytes=25)
    for i in range(6):
        pipeline.add(_item(i, size=10))
        pipeline.pump(object())  # type: ignore[arg-type]
    pipeline.flush(object())  # type: ignore[arg-type]
    assert [len(b) for b in recorder.batches] == [3, 3]
    assert len(answered) == 6


def test_a_pipeline_commits_at_once_when_the_sender_waits_for_verdicts() -> None:
    recorder = _Recorder()
    pipeline, answered = _pipeline(recorder, [False])
    pipeline.add(_item(1))
    pipeline.pump(object())  # type: ignore[arg-type]
    assert answered == [_item(1).name]  # answered before the caller reads again
    assert not pipeline.pending


def test_a_pipeline_makes_room_by_answering_before_a_new_stream() -> None:
    recorder = _Recorder()
    pipeline, answered = _pipeline(recorder, [True], max_batch=100, max_arrived=3)
    for i in range(3):
        pipeline.add(_item(i))
    pipeline.make_room(object())  # type: ignore[arg-type]
    assert len(answered) == 3  # three unanswered streams are the bound: they went first
    pipeline.add(_item(3))
    pipeline.make_room(object())  # type: ignore[arg-type]
    assert len(answered) == 3  # one is below it


def test_a_closed_pipeline_waits_for_its_commits_and_returns_what_never_went() -> None:
    recorder = _Recorder()
    recorder.gates[0] = threading.Event()
    pipeline, answered = _pipeline(recorder, [True], max_batch=1)
    pipeline.add(_item(0))
    pipeline.pump(object())  # type: ignore[arg-type]  # a full batch: committing, held back
    pipeline.add(_item(1))  # arrived, not yet queued
    threading.Timer(0.2, recorder.gates[0].set).start()
    left = pipeline.close()
    assert [item.name for item in left] == [_item(1).name]
    assert recorder.logged == [_item(0).name]  # the commit under way was let finish
    assert answered == []  # nothing is answered once the session is closing


def test_a_failed_commit_is_the_callers_exception_and_nothing_after_it_is_answered() -> None:
    def commit(batch: list[Arrived], rnd: object, earlier: Future[None] | None) -> None:
        raise OSError("disk gone")

    answered: list[str] = []
    pipeline = CommitPipeline(
        commit,  # type: ignore[arg-type]
        lambda batch: answered.extend(i.name for i in batch),
        lambda: False,
    )
    pipeline.add(_item(0))
    with pytest.raises(OSError, match="disk gone"):
        pipeline.flush(object())  # type: ignore[arg-type]
    assert answered == []
    pipeline.close()


# --- one session's share of its sender's limits ---------------------------------------


def test_a_second_session_beyond_the_per_sender_limit_is_busy_and_slots_come_back() -> None:
    limits = SessionLimits(sender_sessions=SlotCounter(1))
    first = SessionAdmission(limits, lambda: False)
    first.open_session(UUID, "10.1.2.3")
    second = SessionAdmission(limits, lambda: False)
    with pytest.raises(ProtocolError) as err:
        second.open_session(UUID, "10.1.2.4")
    assert err.value.code == ErrorCode.BUSY
    assert "max_sessions_per_sender" in str(err.value)
    first.close_session()
    first.close_session()  # once only
    assert limits.sender_sessions.count(UUID) == 0
    second.open_session(UUID, "10.1.2.4")
    assert limits.sender_sessions.count(UUID) == 1


def test_unfinished_upload_bytes_are_reserved_held_and_all_given_back() -> None:
    limits = SessionLimits(partial=ByteLedger(100))
    admission = SessionAdmission(limits, lambda: False)
    admission.open_session(UUID, "10.1.2.3")
    assert "larger than the receiver takes" in (admission.admit(101, None) or "")
    a, b = object(), object()
    assert admission.admit(60, None) is None
    admission.hold(a, 60)
    refusal = admission.admit(50, None)
    assert refusal is not None and "max_partial_bytes = 100" in refusal
    assert admission.admit(40, None) is None
    admission.hold(b, 40)
    assert limits.partial.held(UUID) == 100
    admission.release(a)
    admission.release(a)  # a stream gives back once
    assert limits.partial.held(UUID) == 40
    admission.release_all()
    assert limits.partial.held(UUID) == 0


def test_a_stream_that_does_not_fit_is_admitted_once_complete_streams_are_flushed() -> None:
    limits = SessionLimits(partial=ByteLedger(100))
    held: list[object] = []

    def flush() -> bool:  # staging gives back what the complete streams held
        for stream in held:
            admission.release(stream)
        had = bool(held)
        held.clear()
        return had

    admission = SessionAdmission(limits, flush)
    admission.open_session(UUID, "10.1.2.3")
    first = object()
    assert admission.admit(80, None) is None
    admission.hold(first, 80)
    held.append(first)
    assert admission.admit(80, None) is None  # after the flush
    assert limits.partial.held(UUID) == 80


def test_over_its_quota_a_sender_is_refused_with_error_quota_after_a_flush() -> None:
    stored = {UUID: 90}
    limits = SessionLimits(quota=Quota(100, lambda uuid: stored[uuid]))
    flushes: list[int] = []
    admission = SessionAdmission(limits, lambda: bool(flushes.append(1)))
    admission.open_session(UUID, "10.1.2.3")
    admission.round_started()
    assert admission.admit(10, None) is None  # exactly at the quota
    with pytest.raises(ProtocolError) as err:
        admission.admit(11, None)
    assert err.value.code == ErrorCode.QUOTA
    assert "sender_quota_bytes" in str(err.value)
    assert flushes  # what arrived was answered (and counted) before refusing


def test_kept_partial_uploads_count_against_max_partial_bytes_in_every_data_dir(
    tmp_path: Path,
) -> None:
    """A sender's kept partials are its own, whichever address kept them and in
    whichever data dir: ``max_partial_bytes`` and the quota see all of them."""
    from receiver.partials import PartialStore
    from sealsync.protocol import PARTIAL_HEAD, RESUME_MIN

    dirs = [tmp_path / "d0", tmp_path / "d1"]
    size = RESUME_MIN
    held = PARTIAL_HEAD + 100
    for i, data_dir in enumerate(dirs):
        store = PartialStore.of(data_dir, UUID)
        src = tmp_path / f"src{i}"
        src.write_bytes(b"x" * held)
        assert store.keep(f"sequence/g/0/{i}.tsfile", size, 1, src, held) is not None
    limit = 3 * held
    admission = SessionAdmission(SessionLimits(partial=ByteLedger(limit)), lambda: False, dirs)
    admission.uuid = UUID
    store = PartialStore.of(dirs[0], UUID)
    assert admission.may_keep(store, "sequence/g/0/new.tsfile", held)  # two kept + this: fits
    assert not admission.may_keep(store, "sequence/g/0/new.tsfile", held + 1)
    assert admission.may_keep(store, "sequence/g/0/0.tsfile", 2 * held)  # replaces its own
    quota = Quota(2 * held + 10, lambda uuid: 2 * held)  # the partials are measured in it
    counted = SessionAdmission(SessionLimits(quota=quota), lambda: False, dirs)
    counted.uuid = UUID
    assert counted.may_keep(store, "sequence/g/0/new.tsfile", 10)
    assert not counted.may_keep(store, "sequence/g/0/new.tsfile", 11)
    unlimited = SessionAdmission(SessionLimits(), lambda: False, dirs)
    unlimited.uuid = UUID
    assert unlimited.may_keep(store, "a", 10**9)


# --- the stall-watched channel ----------------------------------------------------------


def test_a_trickle_inside_a_frame_is_stalled_and_an_idle_wait_between_frames_is_not() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.settimeout(2.0)
        window = StallWindow(0.3, 1000)
        channel = SessionChannel(ours, window)
        frame = encode(RoundEnd())
        timer = threading.Timer(0.5, theirs.sendall, [frame])  # longer than the window
        timer.start()
        assert isinstance(channel.recv(in_stream=False), RoundEnd)  # idle: not a stall
        timer.join()
        theirs.sendall(frame[:2])  # a frame begun, then a trickle below the rate
        started = time.monotonic()
        with pytest.raises(Stalled, match="stall_timeout"):
            channel.recv(in_stream=False)
        assert time.monotonic() - started < 1.5
        assert ours.gettimeout() == 2.0  # the idle timeout is put back


def test_an_unwatched_stream_reads_as_the_channel_does() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        stream = WatchedStream(ours, None)
        theirs.sendall(b"abc")
        assert stream.recv(10) == b"abc"
        theirs.close()
        assert stream.recv(10) == b""


def test_data_waiting_sees_bytes_already_sent() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        channel = SessionChannel(ours, None)
        assert not channel.data_waiting()
        theirs.sendall(encode(RoundEnd()) * 2)
        time.sleep(0.05)
        assert channel.data_waiting()
        channel.recv(in_stream=False)
        assert channel.data_waiting()  # the second frame is buffered already


# --- a round's sync.log -----------------------------------------------------------------


class _NoLoader:
    pass


def test_a_rounds_sync_log_has_deletions_before_files_and_its_end(tmp_path: Path) -> None:
    folder = SenderFolder(tmp_path / "data0", "10.1.2.3", UUID)
    folder.root.mkdir(parents=True)
    rnd = RoundState(folder, _NoLoader())  # type: ignore[arg-type]
    rnd.log_deleted("sequence/sg/0/old.tsfile")
    rnd.close_deleted()
    with pytest.raises(ProtocolError, match="DELETE not expected"):
        rnd.log_deleted("sequence/sg/0/late.tsfile")
    rnd.log_tsfiles(["sequence/sg/0/1.tsfile", "sequence/sg/0/2.tsfile"])
    rnd.end()
    assert folder.sync_log.read_text().splitlines() == [
        "sync start",
        "sync deleted file names start",
        "sequence/sg/0/old.tsfile",
        "sync deleted file names end",
        "sync tsfile start",
        "sequence/sg/0/1.tsfile",
        "sequence/sg/0/2.tsfile",
        "sync tsfile end",
        "sync end",
    ]


def test_a_round_without_files_still_opens_and_closes_its_tsfile_section(tmp_path: Path) -> None:
    folder = SenderFolder(tmp_path / "data0", "10.1.2.3", UUID)
    folder.root.mkdir(parents=True)
    rnd = RoundState(folder, _NoLoader())  # type: ignore[arg-type]
    rnd.end()
    assert folder.sync_log.read_text().splitlines() == [
        "sync start",
        "sync tsfile start",
        "sync tsfile end",
        "sync end",
    ]
