"""What receiver.connections adds to a connection's admission: a connection refused for
the receiver's load is told why before the SSH version line (Farewells), and the sender
prints that reason (sender.transfer.client.handshake_failure) instead of guessing at the
allow list; a key whose connections keep opening no session is penalised
(receiver.limits.KeyPenalties)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import paramiko
import pytest

from receiver.connections import Farewells
from receiver.limits import KeyPenalties, Outcome
from sender.transfer.client import _FirstBytes, handshake_failure, refusal_line

LINE = "receiver busy: at its connection limit (24 connections open), retry later"


def _pair(listener: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(listener.getsockname()[:2], timeout=5)
    server, _ = listener.accept()
    return client, server


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


def test_a_refused_connection_reads_the_line_then_eof_and_is_closed_once_it_leaves(
    listener: socket.socket,
) -> None:
    farewells = Farewells(linger=5.0)
    client, server = _pair(listener)
    client.sendall(b"SSH-2.0-client\r\n")  # unread by the receiver: drained, no reset
    farewells.say(server, LINE)
    got = b""
    while chunk := client.recv(1024):
        got += chunk
    assert got == f"sealsync: {LINE}\r\n".encode()
    assert len(farewells) == 1
    client.close()
    deadline = time.monotonic() + 3
    while len(farewells) and time.monotonic() < deadline:
        farewells.tick()
        time.sleep(0.02)
    assert len(farewells) == 0  # closed as soon as the peer left, not at the linger's end
    assert server.fileno() == -1


def test_lingering_is_bounded_in_count_and_time(listener: socket.socket) -> None:
    farewells = Farewells(linger=0.2, limit=2)
    pairs = [_pair(listener) for _ in range(3)]
    try:
        for _, server in pairs:
            farewells.say(server, LINE)
        assert len(farewells) == 2
        assert pairs[2][1].fileno() == -1  # past the limit: closed unanswered
        assert pairs[2][0].recv(1024) == b""
        time.sleep(0.3)
        farewells.tick()  # the peers never closed: the linger ran out
        assert len(farewells) == 0
    finally:
        for client, server in pairs:
            client.close()
            server.close()


@pytest.mark.slow
def test_the_sender_names_the_receivers_reason(listener: socket.socket) -> None:
    client, server = _pair(listener)
    farewells = Farewells()
    farewells.say(server, LINE)
    watched = _FirstBytes(client)
    transport = paramiko.Transport(watched)  # type: ignore[arg-type]
    with pytest.raises(paramiko.SSHException) as e:
        transport.start_client(timeout=5)
    transport.close()
    client.close()
    farewells.close()
    assert handshake_failure("dc:22", e.value, watched.said) == (
        f"receiver dc:22 refused the connection: {LINE}"
    )


def test_a_reason_is_shown_escaped_and_anything_else_is_not_one() -> None:
    said = b"sealsync: busy \x1b[2J\xc2\x9b \xe2\x80\xae\r\nSSH-2.0-x\r\n"
    assert refusal_line(said) == "busy \\x1b[2J\\x9b \\u202e"
    assert refusal_line(b"SSH-2.0-sealsync\r\n") is None
    assert refusal_line(b"") is None
    assert handshake_failure("h:1", EOFError(), b"Hello\r\n").startswith(
        "SSH handshake with receiver h:1 failed"
    )


def test_a_keys_idle_connections_add_up_to_a_penalty_of_its_own() -> None:
    now = [100.0]
    keys = KeyPenalties(600, clock=lambda: now[0])
    assert [keys.failed("SHA256:k", Outcome.IDLE_AFTER_AUTH) for _ in range(3)] == [0, 0, 0]
    assert keys.refused_for("SHA256:k") == 0  # 15 s: not past the threshold yet
    assert keys.failed("SHA256:k", Outcome.IDLE_AFTER_AUTH) == 20.0  # reported once
    assert keys.failed("SHA256:k", Outcome.IDLE_AFTER_AUTH) == 0
    assert keys.refused_for("SHA256:k") == 25.0 and keys.refused_for("SHA256:other") == 0
    now[0] += 25.0
    assert keys.refused_for("SHA256:k") == 0
    off = KeyPenalties(0, clock=lambda: now[0])  # per_source_penalty_max = 0
    assert [off.failed("k", Outcome.IDLE_AFTER_AUTH) for _ in range(10)] == [0] * 10
    assert off.refused_for("k") == 0
