"""A scripted receiver speaking the wire protocol over a socket, for sender tests.

Not the real receiver: a peer whose answers a test chooses (verdict per file and
attempt, busy rounds, owners, a dropped connection) and which records every frame it
got, so tests can check the exact sequence the sender produced. Not a test module;
imported by name (pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.protocol import (
    Bye,
    Chunk,
    ConnectionClosed,
    Delete,
    DeleteAck,
    FileBegin,
    FileEnd,
    FileVerdict,
    Hello,
    Owners,
    OwnersQuery,
    Partials,
    PartialsQuery,
    RoundDone,
    RoundEnd,
    RoundReady,
    RoundStart,
    Schema,
    SchemaAck,
    Verdict,
    Welcome,
    receive,
    send,
)
from sender.attempt import sync_to_receiver
from sender.transfer.report import AttemptReport

SENDER_UUID_HEX = "0123456789abcdef0123456789abcdef"
SENDER_UUID = "01234567-89ab-cdef-0123-456789abcdef"
OTHER_UUID = "fedcba98-7654-3210-fedc-ba9876543210"

# (name, attempt number starting at 1, stream bytes) -> (status, reason)
Policy = Callable[[str, int, bytes], tuple[str, str]]


def always_verified(name: str, attempt: int, data: bytes) -> tuple[str, str]:
    return Verdict.VERIFIED, ""


@dataclass
class FakeReceiver:
    """Serves one connection on ``sock`` in a thread; ``frames`` records what arrived."""

    policy: Policy = always_verified
    busy: set[int] = field(default_factory=set)
    owners: dict[str, str] = field(default_factory=dict)
    hold: int = 0
    """Hold verdicts until this many files are complete (then answer each at once)."""
    window_probe: int = 0
    """If > 0: whenever this many verdicts are owed, check that the sender sends nothing
    more (it must wait for a verdict), then answer the oldest file only."""
    drop_after_files: int | None = None
    """Close the connection right after this many FILE_ENDs (verdicts sent so far stay)."""
    schema: bytearray = field(default_factory=bytearray)
    schema_ack_override: Callable[[int, int], int] | None = None
    on_frame: Callable[[object, socket.socket], None] | None = None
    """Called with each frame as it arrives, before it is answered."""

    frames: list[tuple[str, object]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    window_ok: list[bool] = field(default_factory=list)
    error: BaseException | None = None

    def serve(self, sock: socket.socket) -> threading.Thread:
        thread = threading.Thread(target=self._run, args=(sock,), daemon=True)
        thread.start()
        return thread

    def _run(self, sock: socket.socket) -> None:
        sock.settimeout(10)
        owed: list[FileVerdict] = []
        current: FileBegin | None = None
        data = bytearray()
        ends = 0
        try:
            while True:
                if self.window_probe and owed and _quiet(sock):
                    for v in owed:  # the sender waits for the last verdicts
                        send(sock, v)
                    owed.clear()
                msg = receive(sock)
                self.frames.append(_summary(msg))
                if self.on_frame is not None:
                    self.on_frame(msg, sock)
                if isinstance(msg, Hello):
                    send(sock, Welcome(1, "fake"))
                elif isinstance(msg, Schema):
                    position = len(self.schema)
                    if msg.offset <= position:
                        skip = position - msg.offset
                        self.schema += msg.data[skip:]
                    ack = len(self.schema)
                    if self.schema_ack_override is not None:
                        ack = self.schema_ack_override(msg.offset, ack)
                    send(sock, SchemaAck(ack))
                elif isinstance(msg, RoundStart):
                    status = "busy" if msg.data_dir in self.busy else "ready"
                    send(sock, RoundReady(status, "loading" if status == "busy" else ""))
                elif isinstance(msg, OwnersQuery):
                    send(sock, Owners({d: self.owners.get(d, "") for d in msg.devices}))
                elif isinstance(msg, PartialsQuery):
                    send(sock, Partials([]))
                elif isinstance(msg, Delete):
                    send(sock, DeleteAck(msg.name))
                elif isinstance(msg, FileBegin):
                    current, data = msg, bytearray()
                elif isinstance(msg, Chunk):
                    data += msg.data
                elif isinstance(msg, FileEnd):
                    assert current is not None and msg.file_id == current.file_id
                    ends += 1
                    stream = bytes(data)
                    attempt = self.attempts.get(current.name, 0) + 1
                    self.attempts[current.name] = attempt
                    if hashlib.md5(stream).hexdigest() != msg.md5 or len(stream) != (
                        current.stream_size
                    ):
                        status, reason = Verdict.MISMATCH, "md5 differs"
                    else:
                        status, reason = self.policy(current.name, attempt, stream)
                    if status == Verdict.VERIFIED:
                        self.files[current.name] = stream
                    owed.append(FileVerdict(current.file_id, current.name, status, reason))
                    current = None
                    if self.drop_after_files is not None and ends >= self.drop_after_files:
                        for v in owed[:-1]:
                            send(sock, v)
                        sock.shutdown(socket.SHUT_RDWR)
                        sock.close()
                        return
                    if self.window_probe:
                        if len(owed) >= self.window_probe:
                            self.window_ok.append(_quiet(sock))
                            send(sock, owed.pop(0))
                    elif ends >= self.hold:
                        for v in owed:
                            send(sock, v)
                        owed.clear()
                elif isinstance(msg, RoundEnd):
                    for v in owed:
                        send(sock, v)
                    owed.clear()
                    send(sock, RoundDone(True))
                elif isinstance(msg, Bye):
                    return
        except ConnectionClosed:
            pass
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            try:
                sock.close()
            except OSError:
                pass


def _quiet(sock: socket.socket) -> bool:
    """True if the sender sends nothing for a moment (it is waiting for verdicts)."""
    sock.settimeout(0.3)
    try:
        sock.recv(1, socket.MSG_PEEK)
        return False
    except TimeoutError:
        return True
    finally:
        sock.settimeout(10)


def _summary(msg: object) -> tuple[str, object]:
    kind = msg.kind.name  # type: ignore[attr-defined]
    if isinstance(msg, Hello):
        return kind, msg.uuid
    if isinstance(msg, Schema):
        return kind, (msg.offset, len(msg.data))
    if isinstance(msg, RoundStart):
        return kind, msg.data_dir
    if isinstance(msg, OwnersQuery):
        return kind, tuple(msg.devices)
    if isinstance(msg, Delete):
        return kind, msg.name
    if isinstance(msg, FileBegin):
        return kind, msg.name
    if isinstance(msg, Chunk):
        return kind, len(msg.data)
    if isinstance(msg, FileEnd):
        return kind, msg.file_id
    return kind, None


class SocketConnection:
    """What ``sync_to_receiver``'s connector returns, over one end of a socketpair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    @property
    def stream(self) -> socket.socket:
        return self.sock

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def connect_fake(peer: FakeReceiver) -> tuple[SocketConnection, threading.Thread]:
    ours, theirs = socket.socketpair()
    ours.settimeout(10)
    return SocketConnection(ours), peer.serve(theirs)


def frame_kinds(frames: list[tuple[str, object]]) -> list[str]:
    return [kind for kind, _ in frames]


FAKE_RECEIVER = ReceiverEndpoint("dc1", "127.0.0.1", 5555)


def fake_round_config(tmp_path: Path) -> SenderConfig:
    """A sender with one data dir whose rounds go to a scripted receiver (no keys)."""
    schema, data = tmp_path / "schema", tmp_path / "data"
    schema.mkdir()
    data.mkdir()
    return SenderConfig(
        schema_dir=schema,
        data_dirs=[data],
        identity=tmp_path / "unused",
        known_hosts=tmp_path / "unused",
        receivers=[FAKE_RECEIVER],
        chunk_size=4096,
    )


def round_with_fake(
    config: SenderConfig, peer: FakeReceiver | None = None
) -> tuple[AttemptReport, FakeReceiver]:
    """Run one real round against ``peer`` (a fresh scripted receiver if None)."""
    peer = peer or FakeReceiver()
    threads = []

    def connector(config: SenderConfig, receiver: ReceiverEndpoint) -> SocketConnection:
        conn, thread = connect_fake(peer)
        threads.append(thread)
        return conn

    report = sync_to_receiver(config, FAKE_RECEIVER, connector=connector)
    for t in threads:
        t.join(5)
    assert peer.error is None
    return report, peer
