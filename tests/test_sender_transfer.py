"""The sender's side of the protocol against a scripted receiver over a socketpair."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
from io import BytesIO
from pathlib import Path

import pytest
import tenacity
from sender_transfer_helpers import (
    OTHER_UUID,
    SENDER_UUID,
    FakeReceiver,
    frame_kinds,
)
from state_helpers import sync_log_lines, write_data_file

from sealsync.durable import read_lines
from sealsync.protocol import (
    MAX_SCHEMA_PAYLOAD,
    SSH_MAX_PACKET_SIZE,
    Chunk,
    Error,
    FileBegin,
    FileEnd,
    Hello,
    Partials,
    PartialsQuery,
    ProtocolError,
    ReadBuffer,
    RoundReady,
    RoundStart,
    Verdict,
    Welcome,
    receive,
    send,
)
from sender.manage.snapshot import Placed
from sender.transfer.errors import ConnectionLost
from sender.transfer.files import backoff
from sender.transfer.filestream import file_buffer, open_snapshot_file, send_file
from sender.transfer.refusals import Refusal, RefusalBook, read_refusals
from sender.transfer.report import DirReport
from sender.transfer.schema_pos import read_position, write_position
from sender.transfer.session import SenderSession

A = "sequence/root.sg1/0/0/1-1-0.tsfile"
B = "sequence/root.sg1/0/0/2-2-0.tsfile"
C = "unsequence/root.sg2/0/0/3-3-0.tsfile"
D = "sequence/root.sg1/0/0/4-4-0.parquet"
GONE1 = "sequence/root.sg1/0/0/0-9-0.tsfile"
GONE2 = "unsequence/root.sg2/0/0/0-8-0.tsfile"


class Harness:
    """A session on one end of a socketpair, the fake receiver on the other."""

    def __init__(self, tmp_path: Path, peer: FakeReceiver, **session_args: object) -> None:
        self.tmp = tmp_path
        self.peer = peer
        ours, theirs = socket.socketpair()
        ours.settimeout(5)
        self.sock = ours
        self.thread = peer.serve(theirs)
        args: dict[str, object] = {
            "chunk_size": 1024,
            "pipeline_depth": 64,
            "max_retries": 5,
            "reply_timeout": 5.0,
            "file_wait": tenacity.wait_none(),
        }
        args.update(session_args)
        self.session = SenderSession(ours, **args)  # type: ignore[arg-type]
        self.snapshot = tmp_path / "snapshot"
        self.sync_log = tmp_path / "sync.log"
        self.refusals = RefusalBook(tmp_path / "refused.txt")
        self.report = DirReport(0, str(tmp_path))

    def round(self, new: list[str], deleted: list[str] = (), index: int = 0) -> DirReport:
        self.session.round(
            index,
            snapshot_dir=self.snapshot,
            new=placed(self.snapshot, new),
            deleted=list(deleted),
            sync_log=self.sync_log,
            refusals=self.refusals,
            report=self.report,
            own_uuid=SENDER_UUID,
        )
        self.refusals.save()
        return self.report

    def finish(self) -> None:
        self.session.bye()
        self.thread.join(5)
        self.session.close()
        self.sock.close()
        assert self.peer.error is None


def placed(snapshot: Path, names: list[str]) -> dict[str, Placed]:
    """What ``take_snapshot`` would say of files a test put in ``snapshot`` itself (a
    piece missing counts as empty, a file missing as nothing: the send then fails)."""
    out = {}
    for name in names:
        sizes = [
            os.stat(f"{snapshot / name}{suffix}").st_size
            if os.path.exists(f"{snapshot / name}{suffix}")
            else -1
            for suffix in ("", ".resource", ".mods")
        ]
        out[name] = Placed(max(sizes[0], 0), sum(max(n, 0) for n in sizes), sizes[2] >= 0)
    return out


def stream_of(root: Path, name: str) -> bytes:
    path = root / name
    out = path.read_bytes() + Path(f"{path}.resource").read_bytes()
    mods = Path(f"{path}.mods")
    return out + (mods.read_bytes() if mods.exists() else b"")


def make_files(snapshot: Path, names: list[str], size: int = 100) -> None:
    for i, name in enumerate(names):
        write_data_file(snapshot, name, bytes([i % 251]) * size + name.encode(), b"res" + bytes(i))


def log_tsfiles(path: Path) -> list[str]:
    lines = read_lines(path)
    start, end = lines.index("sync tsfile start"), lines.index("sync tsfile end")
    return lines[start + 1 : end]


def test_frame_sequence_sync_log_and_bytes(tmp_path: Path) -> None:
    h = Harness(tmp_path, FakeReceiver())
    big = b"".join(bytes([i]) * 10 for i in range(250))  # 2500 bytes: chunks 1024+1024+452
    write_data_file(h.snapshot, A, big, b"R", mods=b"MOD")
    write_data_file(h.snapshot, B, b"small", b"res")
    schema = tmp_path / "mlog.txt"
    schema.write_bytes(b"create timeseries root.sg1.d1.s1\n")
    pos = tmp_path / "sync_schema_pos"

    assert h.session.hello(SENDER_UUID, "edge-1").receiver == "fake"
    assert h.session.ship_schema(schema, pos) == 33
    report = h.round([A, B], [GONE1, GONE2])
    h.finish()

    assert h.peer.frames == [
        ("HELLO", SENDER_UUID),
        ("SCHEMA", (0, 33)),
        ("ROUND_START", 0),
        ("DELETE", GONE1),
        ("DELETE", GONE2),
        ("FILE_BEGIN", A),
        ("CHUNK", 1024),
        ("CHUNK", 1024),
        ("CHUNK", 452),
        ("CHUNK", 1),
        ("CHUNK", 3),
        ("FILE_END", 0),
        ("FILE_BEGIN", B),
        ("CHUNK", 8),
        ("FILE_END", 1),
        ("ROUND_END", None),
        ("BYE", None),
    ]
    assert read_lines(h.sync_log) == sync_log_lines([GONE1, GONE2], [A, B])
    assert h.peer.files == {A: big + b"R" + b"MOD", B: b"smallres"}
    assert report.shipped == [A, B]
    assert report.shipped_bytes == 2504 + 8
    assert report.deleted == [GONE1, GONE2]
    assert (report.failed, report.refused, report.note) == ({}, {}, None)
    assert report.complete and report.loaded is True and report.ok
    assert bytes(h.peer.schema) == schema.read_bytes()
    assert read_position(pos) == 33


def test_all_files_go_out_before_the_first_verdict(tmp_path: Path) -> None:
    """The receiver answers nothing until it holds all ten files: only a pipelining
    sender gets there (a stop-and-wait one would time out waiting for a verdict)."""
    names = [f"sequence/root.sg1/0/0/{i}-{i}-0.tsfile" for i in range(10)]
    h = Harness(tmp_path, FakeReceiver(hold=10), reply_timeout=3.0)
    make_files(h.snapshot, names)
    streams = {n: stream_of(h.snapshot, n) for n in names}  # verified: gone once logged
    h.session.hello(SENDER_UUID, "edge")
    report = h.round(names)
    h.finish()
    kinds = frame_kinds(h.peer.frames)
    assert kinds.count("FILE_BEGIN") == 10
    assert report.shipped == names
    assert log_tsfiles(h.sync_log) == names
    assert h.peer.files == streams


def test_files_in_flight_never_exceed_pipeline_depth(tmp_path: Path) -> None:
    names = [f"sequence/root.sg1/0/0/{i}-{i}-0.tsfile" for i in range(8)]
    h = Harness(tmp_path, FakeReceiver(window_probe=3), pipeline_depth=3)
    make_files(h.snapshot, names)
    h.session.hello(SENDER_UUID, "edge")
    report = h.round(names)
    h.finish()
    # Probed after files 3..8: each time the sender had stopped, waiting for a verdict.
    assert h.peer.window_ok == [True] * 6
    assert report.shipped == names


def test_mismatch_is_resent_then_verified(tmp_path: Path) -> None:
    def policy(name: str, attempt: int, data: bytes) -> tuple[str, str]:
        if name == B and attempt == 1:
            return Verdict.MISMATCH, "md5 differs"
        return Verdict.VERIFIED, ""

    h = Harness(tmp_path, FakeReceiver(policy=policy))
    make_files(h.snapshot, [A, B, C])
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([A, B, C])
    h.finish()
    begins = [v for k, v in h.peer.frames if k == "FILE_BEGIN"]
    # B goes again as soon as its verdict is read: before or after C, timing decides
    assert begins in ([A, B, C, B], [A, B, B, C])
    assert h.peer.attempts == {A: 1, B: 2, C: 1}
    assert sorted(log_tsfiles(h.sync_log)) == [A, B, C]
    assert report.shipped == log_tsfiles(h.sync_log)
    assert report.failed == {}
    assert report.ok


def test_verified_files_leave_the_snapshot_as_they_are_logged(tmp_path: Path) -> None:
    """Only what is still to send (or to read devices from) stays for the clean-up."""

    def policy(name: str, attempt: int, data: bytes) -> tuple[str, str]:
        if name == C or (name == B and attempt == 1):  # B is read again for its resend
            return Verdict.REFUSED if name == C else Verdict.MISMATCH, "no"
        return Verdict.VERIFIED, ""

    h = Harness(tmp_path, FakeReceiver(policy=policy))
    make_files(h.snapshot, [A, B, C])
    Path(f"{h.snapshot / B}.mods").write_bytes(b"mods")
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([A, B, C])
    h.finish()
    assert h.peer.files[B].endswith(b"mods")
    assert sorted(report.shipped) == [A, B]
    left = sorted(
        p.relative_to(h.snapshot).as_posix() for p in h.snapshot.rglob("*") if p.is_file()
    )
    assert left == [C, f"{C}.resource"]


def test_mismatch_until_retries_run_out_leaves_the_file_unsynced(tmp_path: Path) -> None:
    def policy(name: str, attempt: int, data: bytes) -> tuple[str, str]:
        return (Verdict.MISMATCH, "md5 differs") if name == B else (Verdict.VERIFIED, "")

    h = Harness(tmp_path, FakeReceiver(policy=policy), max_retries=3)
    make_files(h.snapshot, [A, B, C])
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([A, B, C])
    h.finish()
    assert h.peer.attempts == {A: 1, B: 3, C: 1}
    assert log_tsfiles(h.sync_log) == [A, C]
    assert report.failed == {B: "checksum mismatch after 3 attempts: md5 differs"}
    assert report.shipped == [A, C]
    assert not report.ok


def test_sender_side_md5_is_checked_by_a_real_hash(tmp_path: Path) -> None:
    """The FILE_END MD5 is the MD5 of the whole stream: the fake receiver recomputes it."""
    h = Harness(tmp_path, FakeReceiver(), chunk_size=4096)
    payload = bytes(range(256)) * 100  # 25600 bytes, several chunks
    write_data_file(h.snapshot, A, payload, b"resource-bytes")
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([A])
    h.finish()
    assert h.peer.attempts == {A: 1}
    assert (
        hashlib.md5(h.peer.files[A]).hexdigest()
        == hashlib.md5(payload + b"resource-bytes").hexdigest()
    )
    assert report.shipped == [A]


def test_conflict_is_reported_remembered_and_not_logged(tmp_path: Path) -> None:
    def policy(name: str, attempt: int, data: bytes) -> tuple[str, str]:
        if name == B:
            return Verdict.CONFLICT, f"device root.sg1.d1 is owned by sender {OTHER_UUID}"
        if name == C:
            return Verdict.REFUSED, "not a valid data file: bad magic"
        return Verdict.VERIFIED, ""

    class Info:
        devices = ("root.sg1.d1", "root.sg1.d\t2,x")

    seen: list[Path] = []

    def inspect(path: Path) -> Info:
        seen.append(path)
        return Info()

    h = Harness(tmp_path, FakeReceiver(policy=policy), inspect=inspect)
    make_files(h.snapshot, [A, B, C])
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([A, B, C])
    h.finish()
    assert log_tsfiles(h.sync_log) == [A]
    assert report.refused == {
        B: f"conflict: device root.sg1.d1 is owned by sender {OTHER_UUID}",
        C: "refused: not a valid data file: bad magic",
    }
    assert seen == [h.snapshot / B]
    assert read_refusals(tmp_path / "refused.txt") == {
        B: Refusal(
            B,
            "conflict",
            f"device root.sg1.d1 is owned by sender {OTHER_UUID}",
            ("root.sg1.d1", "root.sg1.d\t2,x"),
        ),
        C: Refusal(C, "refused", "not a valid data file: bad magic", ()),
    }
    lines = read_lines(tmp_path / "refused.txt")
    assert [json.loads(line)["name"] for line in lines] == [B, C]
    assert not report.ok


def _remember_conflict(path: Path, name: str, devices: tuple[str, ...]) -> None:
    book = RefusalBook(path)
    book.record(Refusal(name, "conflict", "device owned by another sender", devices))
    book.save()


def test_remembered_conflict_is_skipped_while_another_sender_owns_a_device(
    tmp_path: Path,
) -> None:
    _remember_conflict(tmp_path / "refused.txt", B, ("root.sg1.d1", "root.sg1.d2"))
    peer = FakeReceiver(owners={"root.sg1.d1": SENDER_UUID, "root.sg1.d2": OTHER_UUID})
    h = Harness(tmp_path, peer)
    make_files(h.snapshot, [A, B])
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([A, B])
    h.finish()
    assert h.peer.frames[1:4] == [
        ("ROUND_START", 0),
        ("OWNERS_QUERY", ("root.sg1.d1", "root.sg1.d2")),
        ("FILE_BEGIN", A),
    ]
    assert [v for k, v in h.peer.frames if k == "FILE_BEGIN"] == [A]
    assert report.refused == {
        B: f"conflict: device root.sg1.d2 owned by sender {OTHER_UUID} on the receiver; "
        "not resent until released there (`sealsync owners release`)"
    }
    assert list(read_refusals(tmp_path / "refused.txt")) == [B]
    assert report.shipped == [A]


def test_remembered_conflict_is_resent_once_its_devices_are_released(tmp_path: Path) -> None:
    _remember_conflict(tmp_path / "refused.txt", B, ("root.sg1.d1", "root.sg1.d2"))
    h = Harness(tmp_path, FakeReceiver(owners={"root.sg1.d1": SENDER_UUID}))
    make_files(h.snapshot, [B])
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([B])
    h.finish()
    assert [v for k, v in h.peer.frames if k in ("OWNERS_QUERY", "FILE_BEGIN")] == [
        ("root.sg1.d1", "root.sg1.d2"),
        B,
    ]
    assert report.shipped == [B]
    assert report.refused == {}
    assert not (tmp_path / "refused.txt").exists()


def test_busy_round_is_a_note_not_a_crash(tmp_path: Path) -> None:
    h = Harness(tmp_path, FakeReceiver(busy={0}))
    make_files(h.snapshot, [A])
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([A], [GONE1])
    # the session goes on: the next data dir is served
    other = DirReport(1, "other")
    h.session.round(
        1,
        snapshot_dir=h.snapshot,
        new=placed(h.snapshot, [A]),
        deleted=[],
        sync_log=tmp_path / "sync1.log",
        refusals=h.refusals,
        report=other,
        own_uuid=SENDER_UUID,
    )
    h.finish()
    assert report.note is not None and "receiver busy (loading)" in report.note
    assert not report.complete and not report.ok
    assert not h.sync_log.exists()
    assert frame_kinds(h.peer.frames) == [
        "HELLO",
        "ROUND_START",
        "ROUND_START",
        "FILE_BEGIN",
        "CHUNK",
        "FILE_END",
        "ROUND_END",
        "BYE",
    ]
    assert other.shipped == [A] and other.ok


def test_file_missing_from_snapshot_fails_without_frames(tmp_path: Path) -> None:
    h = Harness(tmp_path, FakeReceiver())
    make_files(h.snapshot, [A])
    h.session.hello(SENDER_UUID, "edge")
    report = h.round([A, B])
    h.finish()
    assert [v for k, v in h.peer.frames if k == "FILE_BEGIN"] == [A]
    assert report.failed == {B: f"{B} missing from the snapshot"}
    assert report.shipped == [A]


def test_a_mods_the_snapshot_was_not_made_with_is_not_looked_for(tmp_path: Path) -> None:
    # The round opens only the pieces take_snapshot placed: a .mods the snapshot did
    # not get from it (here, put there behind its back) is not looked up, nor sent.
    write_data_file(tmp_path / "snapshot", A, b"D" * 100, b"res", b"mods")
    opened = open_snapshot_file(tmp_path / "snapshot", A, mods=False)
    opened.close()
    assert (opened.stream_size, opened.mods_size) == (103, -1)
    h = Harness(tmp_path, FakeReceiver())
    h.session.hello(SENDER_UUID, "edge")
    h.session.round(
        0,
        snapshot_dir=h.snapshot,
        new={A: Placed(100, 103, False)},
        deleted=[],
        sync_log=h.sync_log,
        refusals=h.refusals,
        report=h.report,
        own_uuid=SENDER_UUID,
    )
    h.finish()
    assert h.report.shipped == [A]
    assert h.peer.files[A] == b"D" * 100 + b"res"


def test_dropped_connection_keeps_what_was_verified(tmp_path: Path) -> None:
    """Depth 1 makes it exact: A's verdict is logged before B is sent; B's never comes."""
    h = Harness(tmp_path, FakeReceiver(drop_after_files=2), pipeline_depth=1)
    make_files(h.snapshot, [A, B, C])
    h.session.hello(SENDER_UUID, "edge")
    with pytest.raises(ConnectionLost):
        h.round([A, B, C])
    h.session.close()
    h.sock.close()
    assert log_tsfiles_open(h.sync_log) == [A]
    assert h.report.shipped == [A]


def log_tsfiles_open(path: Path) -> list[str]:
    lines = read_lines(path)
    return lines[lines.index("sync tsfile start") + 1 :]


def test_error_frame_from_receiver_is_a_clear_failure(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    session = SenderSession(ours, reply_timeout=5.0)
    session.send(Hello(1, SENDER_UUID, "e"))
    assert isinstance(receive(theirs), Hello)
    send(theirs, Error("auth", f"sender UUID {SENDER_UUID} is bound to another public key"))
    with pytest.raises(ProtocolError, match="bound to another public key") as info:
        session.receive(Welcome)
    assert info.value.code == "auth"
    session.close()
    ours.close()
    theirs.close()


def test_a_refusal_while_the_sender_streams_is_reported_with_the_receivers_reason(
    tmp_path: Path,
) -> None:
    """The receiver refuses at FILE_BEGIN (here: over quota) and closes while the sender
    is still streaming that file: its failed send reports the ERROR, not a lost link."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    theirs.settimeout(5)
    reason = "sender holds 10 bytes on the receiver; ... (sender_quota_bytes)"

    def receiver() -> None:
        assert isinstance(receive(theirs), Hello)
        send(theirs, Welcome(1, "r"))
        assert isinstance(receive(theirs), RoundStart)
        send(theirs, RoundReady("ready", ""))
        assert isinstance(receive(theirs), PartialsQuery)  # an 8 MiB file may resume
        send(theirs, Partials([]))
        assert isinstance(receive(theirs), FileBegin)
        send(theirs, Error("quota", reason))
        theirs.close()

    peer = threading.Thread(target=receiver, daemon=True)
    peer.start()
    snapshot = tmp_path / "snapshot"
    write_data_file(snapshot, A, b"x" * (8 << 20), b"res")  # still streaming at the ERROR
    session = SenderSession(ours, chunk_size=65536, reply_timeout=5.0)
    session.hello(SENDER_UUID, "e")
    report = DirReport(0, str(tmp_path))
    with pytest.raises(ProtocolError) as info:
        session.round(
            0,
            snapshot_dir=snapshot,
            new=placed(snapshot, [A]),
            deleted=[],
            sync_log=tmp_path / "sync.log",
            refusals=RefusalBook(tmp_path / "refused.txt"),
            report=report,
            own_uuid=SENDER_UUID,
        )
    assert (info.value.code, str(info.value)) == ("quota", f"receiver: {reason}")
    assert report.shipped == []
    peer.join(5)
    session.close()
    ours.close()


# --- schema log ------------------------------------------------------------------------


def test_schema_goes_in_pieces_and_then_only_the_increment(tmp_path: Path) -> None:
    log = tmp_path / "mlog.txt"
    pos = tmp_path / "sync" / "h_1" / "sync_schema_pos"
    first = bytes(range(256)) * (MAX_SCHEMA_PAYLOAD * 5 // 2 // 256)
    log.write_bytes(first)
    h = Harness(tmp_path, FakeReceiver())
    h.session.hello(SENDER_UUID, "edge")
    assert h.session.ship_schema(log, pos) == len(first)
    assert read_position(pos) == len(first)
    with log.open("ab") as f:
        f.write(b"create timeseries root.sg9.d1.s1\n")
    assert h.session.ship_schema(log, pos) == 33
    assert h.session.ship_schema(log, pos) == 0
    h.finish()
    size = MAX_SCHEMA_PAYLOAD
    assert [v for k, v in h.peer.frames if k == "SCHEMA"] == [
        (0, size),
        (size, size),
        (2 * size, len(first) - 2 * size),
        (len(first), 33),
    ]
    assert bytes(h.peer.schema) == log.read_bytes()
    assert read_position(pos) == len(first) + 33


def test_schema_resent_from_zero_is_harmless(tmp_path: Path) -> None:
    """A lost position file: the log goes again and the receiver skips what it holds."""
    log = tmp_path / "mlog.txt"
    log.write_bytes(b"abcdef")
    peer = FakeReceiver(schema=bytearray(b"abcdef"))
    h = Harness(tmp_path, peer)
    h.session.hello(SENDER_UUID, "edge")
    assert h.session.ship_schema(log, tmp_path / "pos") == 6
    h.finish()
    assert bytes(peer.schema) == b"abcdef"
    assert read_position(tmp_path / "pos") == 6


def test_schema_rewinds_when_the_receiver_holds_less(tmp_path: Path) -> None:
    log = tmp_path / "mlog.txt"
    log.write_bytes(b"0123456789")
    write_position(tmp_path / "pos", 4)
    h = Harness(tmp_path, FakeReceiver())  # holds nothing: the piece from 4 leaves a gap
    h.session.hello(SENDER_UUID, "edge")
    h.session.ship_schema(log, tmp_path / "pos")
    h.finish()
    assert [v for k, v in h.peer.frames if k == "SCHEMA"] == [(4, 6), (0, 10)]
    assert bytes(h.peer.schema) == b"0123456789"
    assert read_position(tmp_path / "pos") == 10


def test_schema_not_accepted_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / "mlog.txt"
    log.write_bytes(b"0123456789")
    peer = FakeReceiver(schema_ack_override=lambda offset, held: offset)
    h = Harness(tmp_path, peer)
    h.session.hello(SENDER_UUID, "edge")
    with pytest.raises(ProtocolError, match="did not accept the schema log at byte 0"):
        h.session.ship_schema(log, tmp_path / "pos")
    h.finish()
    assert not (tmp_path / "pos").exists()


def test_schema_missing_log_sends_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path, FakeReceiver())
    h.session.hello(SENDER_UUID, "edge")
    assert h.session.ship_schema(tmp_path / "mlog.txt", tmp_path / "pos") == 0
    h.finish()
    assert frame_kinds(h.peer.frames) == ["HELLO", "BYE"]


@pytest.mark.parametrize(
    ("content", "expected"), [(None, 0), (b"42\n", 42), (b"junk\n", 0), (b"", 0), (b"\xff", 0)]
)
def test_read_position(tmp_path: Path, content: bytes | None, expected: int) -> None:
    path = tmp_path / "sync_schema_pos"
    if content is not None:
        path.write_bytes(content)
    assert read_position(path) == expected


def test_backoff_follows_tenacity_wait() -> None:
    wait = tenacity.wait_exponential(multiplier=0.5, max=3)
    assert [backoff(wait, n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]


def test_refusal_book_ignores_damaged_lines(tmp_path: Path) -> None:
    path = tmp_path / "refused.txt"
    good = Refusal(A, "conflict", "r", ("d\n1",)).to_line()
    path.write_text(
        "\n".join(
            [
                good,
                "not json",
                json.dumps(
                    {"name": "../x.tsfile", "status": "conflict", "reason": "", "devices": []}
                ),
            ]
        )
        + "\n"
    )
    assert read_refusals(path) == {A: Refusal(A, "conflict", "r", ("d\n1",))}


@pytest.mark.parametrize(("largest_packet", "packets"), [(SSH_MAX_PACKET_SIZE, 1), (64 * 1024, 4)])
def test_a_large_file_streams_in_frames_that_fill_whole_ssh_packets(
    tmp_path: Path, largest_packet: int, packets: int
) -> None:
    # Each CHUNK frame of a large file is one write whose length is a whole number of
    # SSH packets of the size the receiver takes (this release's, or 64 KiB from an
    # earlier one): a 5-byte header written alone, or a short tail after full packets,
    # cost as much per-packet work as a full one.
    name = "sequence/root.sg/0/0/1-1-0.tsfile"
    data = os.urandom(3 * (1 << 20) + 12345)
    path = tmp_path / name
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    Path(f"{path}.resource").write_bytes(b"resource")
    writes: list[bytes] = []

    class Recorder:
        def sendall(self, chunk: bytes | memoryview) -> None:
            writes.append(bytes(chunk))

    opened = open_snapshot_file(tmp_path, name)
    payload = largest_packet - 64
    try:
        digest = send_file(
            Recorder(),  # type: ignore[arg-type]
            opened,
            7,
            file_buffer(1 << 18),
            packet_payload=payload,
        )
    finally:
        opened.close()
    frames = writes[1:-1]  # FILE_BEGIN first, FILE_END last, the CHUNKs between
    assert len(frames) > 3
    # all full but the data file's last and its sidecar's (a chunk never spans the two)
    assert [len(frame) for frame in frames[:-2]] == [packets * payload] * (len(frames) - 2)
    assert len(frames[-1]) == 5 + len(b"resource")
    wire = BytesIO(b"".join(writes))

    class Wire:
        def recv(self, n: int) -> bytes:
            return wire.read(n)

    stream = ReadBuffer(Wire())  # type: ignore[arg-type]
    begin, *chunks, end = [receive(stream) for _ in range(len(writes))]
    assert isinstance(begin, FileBegin) and isinstance(end, FileEnd)
    assert all(isinstance(c, Chunk) for c in chunks)
    assert b"".join(bytes(c.data) for c in chunks) == data + b"resource"  # type: ignore[union-attr]
    assert end.md5 == digest == hashlib.md5(data + b"resource").hexdigest()
