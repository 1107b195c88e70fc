"""The protocol's versions (sealsync/protocol/spec.py, docs/protocol.md "Versions and
upgrades"): a receiver serves a sender one version older or newer, at the older of
the two, and refuses one further apart naming the end to upgrade; a sender takes a
WELCOME of its version or the one before; a frame a version lacks (HELD_QUERY in
version 1) is never sent in a session of that version, and refused if it is.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from receiver_load_helpers import UUID_A
from reliability.session_env import FP_A, PEER, SessionEnv

from sealsync.protocol import (
    OLDEST_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Error,
    Held,
    HeldQuery,
    Hello,
    Kind,
    ProtocolError,
    Welcome,
    decode,
    encode,
    held_digest,
    negotiate,
    receive,
    send,
    speaks,
)
from sender.transfer.session import SenderSession

NAME = "sequence/root.sg/0/0/1700000000000-1-0-0.tsfile"


def test_a_receiver_serves_one_version_older_and_newer_at_the_older() -> None:
    assert OLDEST_PROTOCOL_VERSION == PROTOCOL_VERSION - 1
    assert negotiate(PROTOCOL_VERSION) == PROTOCOL_VERSION
    assert negotiate(PROTOCOL_VERSION - 1) == PROTOCOL_VERSION - 1
    assert negotiate(PROTOCOL_VERSION + 1) == PROTOCOL_VERSION
    assert negotiate(PROTOCOL_VERSION + 2) is None
    assert negotiate(PROTOCOL_VERSION - 2) is None
    assert [speaks(v) for v in range(PROTOCOL_VERSION - 2, PROTOCOL_VERSION + 2)] == [
        False,
        True,
        True,
        False,
    ]


def test_held_frames_round_trip_and_are_validated() -> None:
    digest = held_digest([NAME, "unsequence/root.sg/0/0/1-1-0-0.tsfile"])
    for msg in (HeldQuery(), Held(2, digest)):
        frame = encode(msg)
        assert decode(Kind(frame[0]), frame[5:]) == msg
    with pytest.raises(ProtocolError, match="HELD.digest"):
        Held.from_payload(b'{"files": 1, "digest": "abc"}')
    with pytest.raises(ProtocolError, match="HELD.files"):
        Held.from_payload(json.dumps({"files": -1, "digest": digest}).encode())
    # the digest is over the set of names, in no particular order
    assert held_digest(["b", "a", "a"]) == held_digest(["a", "b"]) != held_digest(["a"])
    assert held_digest([]) == held_digest(set())


@pytest.fixture
def env(tmp_path: Path) -> Iterator[SessionEnv]:
    e = SessionEnv(tmp_path)
    yield e
    e.close()


def greet(env: SessionEnv, version: int) -> tuple[socket.socket, object]:
    sock, _thread = env.connect(FP_A, PEER)
    send(sock, Hello(version, UUID_A, "edge"))
    return sock, receive(sock)


def test_an_older_sender_is_welcomed_at_its_version_and_held_is_not_in_it(
    env: SessionEnv,
) -> None:
    sock, welcome = greet(env, PROTOCOL_VERSION - 1)
    assert isinstance(welcome, Welcome) and welcome.version == PROTOCOL_VERSION - 1
    send(sock, HeldQuery())
    error = receive(sock)
    assert isinstance(error, Error) and error.code == "unexpected", error
    assert error.message == "HELD_QUERY not expected outside a round"


def test_a_newer_sender_is_welcomed_at_the_receivers_version(env: SessionEnv) -> None:
    _sock, welcome = greet(env, PROTOCOL_VERSION + 1)
    assert isinstance(welcome, Welcome) and welcome.version == PROTOCOL_VERSION


def test_held_counts_the_senders_files_by_name(env: SessionEnv) -> None:
    sock, welcome = greet(env, PROTOCOL_VERSION)
    assert isinstance(welcome, Welcome) and welcome.version == PROTOCOL_VERSION
    send(sock, HeldQuery())
    assert receive(sock) == Held(0, held_digest([]))
    path = env.loaded_path(UUID_A, NAME)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"DEVICES:root.sg.d1\n")
    other = env.loaded_path("6f1c2d3e-0000-4000-8000-000000000001", NAME)
    other.parent.mkdir(parents=True)
    other.write_bytes(b"DEVICES:root.sg.d2\n")  # another sender's: not counted
    send(sock, HeldQuery())
    assert receive(sock) == Held(1, held_digest([NAME]))


def sender_against(welcome: Welcome) -> tuple[SenderSession, socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    theirs.settimeout(5)
    session = SenderSession(ours, reply_timeout=5.0)
    session.send(Hello(PROTOCOL_VERSION, UUID_A, "e"))
    assert receive(theirs) == Hello(PROTOCOL_VERSION, UUID_A, "e")
    send(theirs, welcome)
    return session, ours, theirs


def test_a_sender_speaks_the_version_before_its_own_and_asks_no_held() -> None:
    session, ours, theirs = sender_against(Welcome(PROTOCOL_VERSION - 1, "old"))
    try:
        assert session.hello(UUID_A, "e", sent=True).version == PROTOCOL_VERSION - 1
        assert session.version == PROTOCOL_VERSION - 1
        assert session.held() is None
        theirs.setblocking(False)
        with pytest.raises(BlockingIOError):
            theirs.recv(1)  # nothing was sent
    finally:
        session.close()
        ours.close()
        theirs.close()


def test_a_sender_refuses_a_receiver_newer_than_itself() -> None:
    session, ours, theirs = sender_against(Welcome(PROTOCOL_VERSION + 1, "new"))
    try:
        with pytest.raises(ProtocolError) as info:
            session.hello(UUID_A, "e", sent=True)
        assert str(info.value) == (
            f"receiver speaks protocol version {PROTOCOL_VERSION + 1}, this sender "
            f"{PROTOCOL_VERSION} and the one before: upgrade the sender"
        )
    finally:
        session.close()
        ours.close()
        theirs.close()
