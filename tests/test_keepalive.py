"""Keepalives on a stand-in transport: a silent peer is declared dead after
``interval × (count_max + 1)`` and not before; a peer that answers never is; any byte
from the peer counts as an answer. The same watch over real SSH, both ends, is in
``tests/reliability/test_dead_link.py``."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from sealsync.config import ReceiverConfig, SenderConfig
from sealsync.keepalive import READ_AHEAD, REQUEST, ActivitySocket, Keepalive
from sender.transfer.errors import ConnectionLost
from sender.transfer.session import SenderSession

INTERVAL = 0.2
COUNT = 2
LIMIT = INTERVAL * (COUNT + 1)
log = logging.getLogger("sealsync.test.keepalive")


class FakeTransport:
    """What Keepalive uses of paramiko's Transport; ``answer`` is what the peer does."""

    def __init__(self, sock: ActivitySocket, answer: bool) -> None:
        self.sock = sock
        self.answer = answer
        self.active = True
        self.requests: list[tuple[str, bool]] = []
        self.closed_at: float | None = None

    def is_active(self) -> bool:
        return self.active

    def global_request(self, kind: str, wait: bool = True) -> None:
        self.requests.append((kind, wait))
        if self.answer:
            self.sock.last_received = time.monotonic()  # the reply's bytes arrive
            return
        while self.active:  # paramiko waits for a reply until the transport closes
            time.sleep(0.01)

    def close(self) -> None:
        self.active = False
        self.closed_at = time.monotonic()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def watch(transport: FakeTransport, sock: ActivitySocket) -> Keepalive:
    return Keepalive(
        transport,  # type: ignore[arg-type]
        sock,
        INTERVAL,
        COUNT,
        label="peer 10.0.0.1",
        keys=("server_alive_interval", "server_alive_count_max"),
        log=log,
    )


def test_activity_socket_notes_the_peers_bytes(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    sock = ActivitySocket(a)
    before = sock.last_received
    time.sleep(0.02)
    b.sendall(b"hello")
    assert sock.recv(10) == b"hello"
    assert sock.last_received > before
    sock.settimeout(0.01)  # everything else is the socket's own
    with pytest.raises(TimeoutError):
        sock.recv(10)
    assert sock.gettimeout() == 0.01 and sock.fileno() == a.fileno()


def test_activity_socket_reads_into_a_buffer_after_what_it_read_ahead(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    # the packet reader takes a length with recv, then the body with recv_into: the
    # body's first bytes are in the read-ahead, the rest come from the socket
    a, b = pair
    sock = ActivitySocket(a)
    small, large = os.urandom(1000), os.urandom(READ_AHEAD)
    b.sendall(small)
    assert sock.recv(4) == small[:4]
    before = sock.last_received
    body = bytearray(len(small) - 4 + len(large))
    view = memoryview(body)
    got = sock.recv_into(view)
    assert got == len(small) - 4  # what was read ahead, and no more
    time.sleep(0.02)
    writer = threading.Thread(target=b.sendall, args=(large,))  # more than the socket holds
    writer.start()
    while got < len(body):
        got += sock.recv_into(view[got:])
    writer.join(10)
    assert bytes(body) == small[4:] + large
    assert sock.last_received > before


def test_silent_peer_is_declared_dead_after_the_count(
    pair: tuple[socket.socket, socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    sock = ActivitySocket(pair[0])
    transport = FakeTransport(sock, answer=False)
    started = time.monotonic()
    sock.last_received = started
    keepalive = watch(transport, sock).start()
    caplog.set_level(logging.WARNING, logger=log.name)

    deadline = started + LIMIT + 2.0
    while transport.active and time.monotonic() < deadline:
        time.sleep(0.01)

    assert transport.closed_at is not None
    assert LIMIT <= transport.closed_at - started < LIMIT + 1.0
    assert transport.requests[0] == (REQUEST, True)  # asks for a reply
    assert keepalive.dead is not None and keepalive.dead.startswith("peer 10.0.0.1: link dead")
    assert "(server_alive_interval 0.2 s, server_alive_count_max 2)" in keepalive.dead
    assert [r.getMessage() for r in caplog.records] == [f"{keepalive.dead}; closing the connection"]


def test_answering_peer_stays_alive_and_is_asked_once_per_silent_interval(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sock = ActivitySocket(pair[0])
    transport = FakeTransport(sock, answer=True)
    keepalive = watch(transport, sock).start()
    time.sleep(LIMIT * 4)
    keepalive.stop()
    assert transport.active and keepalive.dead is None
    # one probe per silent interval (each answered at once), give or take the ticks
    assert 4 * (COUNT + 1) // 2 <= keepalive.probes <= 4 * (COUNT + 1) + 1
    assert len(transport.requests) == keepalive.probes


def test_a_busy_link_needs_no_probe(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    sock = ActivitySocket(a)
    transport = FakeTransport(sock, answer=False)  # would never answer a probe
    keepalive = watch(transport, sock).start()
    stop = threading.Event()

    def chatter() -> None:
        while not stop.is_set():
            b.sendall(b"x")
            sock.recv(1)
            time.sleep(INTERVAL / 4)

    t = threading.Thread(target=chatter, daemon=True)
    t.start()
    time.sleep(LIMIT * 3)
    stop.set()
    t.join()
    keepalive.stop()
    assert transport.active and keepalive.dead is None and keepalive.probes == 0


class _Stalled:
    """A channel whose window never opens: sendall times out, as paramiko's does."""

    def recv(self, n: int) -> bytes:
        time.sleep(0.05)
        raise TimeoutError

    def sendall(self, data: bytes | memoryview) -> None:
        raise TimeoutError

    def gettimeout(self) -> float:
        return 7.0


def test_a_send_that_finds_no_window_is_a_stalled_transfer() -> None:
    session = SenderSession(_Stalled())
    try:
        with pytest.raises(ConnectionLost) as e:
            session.stream.sendall(b"frame")
    finally:
        session.close()
    assert str(e.value) == "transfer stalled: the receiver took no data for 7 s"


def test_defaults_declare_a_silent_link_dead_within_about_a_minute() -> None:
    """OpenSSH's ServerAliveInterval 15 / ServerAliveCountMax 3, on both ends."""
    sender = {f.name: f.default for f in dataclasses.fields(SenderConfig)}
    receiver = {f.name: f.default for f in dataclasses.fields(ReceiverConfig)}
    assert (sender["server_alive_interval"], sender["server_alive_count_max"]) == (15.0, 3)
    assert (receiver["client_alive_interval"], receiver["client_alive_count_max"]) == (15.0, 3)
    assert sender["server_alive_interval"] * (sender["server_alive_count_max"] + 1) == 60.0
    assert sender["connect_timeout"] == 10.0 and sender["stall_timeout"] == 120.0


class CountingSocket:
    """A socket whose ``recv`` calls are counted (the kernel reads paramiko causes)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.calls: list[int] = []

    def recv(self, n: int, *flags: int) -> bytes:
        self.calls.append(n)
        return self.sock.recv(n, *flags)

    def recv_into(self, buffer: bytearray) -> int:
        self.calls.append(len(buffer))
        return self.sock.recv_into(buffer)


def test_activity_socket_reads_ahead_yet_never_hands_out_more_than_asked(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    # paramiko reads a packet's header, then its body; what has already arrived of
    # several packets is taken from the kernel in one read and handed out in the
    # pieces asked for, every byte once and in order.
    a, b = pair
    counting = CountingSocket(a)
    sock = ActivitySocket(counting)  # type: ignore[arg-type]
    payload = bytes(range(256)) * 256  # 64 KiB: all of it fits in the kernel's buffer
    b.sendall(payload)
    got = bytearray()
    asks = [16, 16_368, 16, 7, 100_000, 5]
    while len(got) < len(payload):
        n = asks[len(got) % len(asks)]
        piece = sock.recv(n)
        assert 0 < len(piece) <= n
        got += piece
    assert bytes(got) == payload
    assert len(counting.calls) == 1  # without read-ahead: one per piece, a dozen here
    b.sendall(b"tail")
    assert sock.recv(2) == b"ta" and sock.recv(10) == b"il"
    b.close()
    assert sock.recv(10) == b""  # the peer's end of stream, as the socket says it


def test_activity_socket_passes_recv_flags_through(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    sock = ActivitySocket(a)
    b.sendall(b"peek")
    assert sock.recv(10, socket.MSG_PEEK) == b"peek"
    assert sock.recv(10) == b"peek"  # the peek took nothing
