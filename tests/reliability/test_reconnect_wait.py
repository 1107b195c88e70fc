"""A sender reconnecting right after a dropped connection is not told *busy* (regression).

Found by the network fault tests: a connection dropped mid-round leaves the
receiver's session winding down and its loader still loading the files verified
so far. The sender reconnects within a fraction of a second; the receiver answered
its ROUND_START with *busy* ("still loading N files of the last round", or "another
session is in a round"), so the data dir was given up for that run and
``sealsync send`` exited 1 although nothing was wrong. A round start now waits up to
the session's ``load_wait`` for the last round on that folder to end first.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from reliability.session_env import UUID_A, SessionEnv, data_file, hello, offer

from sealsync.protocol import (
    Bye,
    FileVerdict,
    RoundDone,
    RoundEnd,
    RoundReady,
    RoundStart,
    receive,
    send,
)

NAME = "sequence/sg/0/a.tsfile"


def drop_mid_round(env: SessionEnv) -> threading.Thread:
    """A round whose one file is verified, its load held at the gate, then the link dies."""
    sock, thread = env.connect()
    hello(sock)
    send(sock, RoundStart(0))
    assert receive(sock) == RoundReady("ready", "")
    offer(sock, 0, NAME, data_file("root.sg.d1"))
    verdict = receive(sock)
    assert isinstance(verdict, FileVerdict) and verdict.status == "verified"
    offer(sock, 1, "sequence/sg/0/b.tsfile", data_file("root.sg.d1"))
    sock.close()
    return thread


def test_round_start_waits_for_the_dropped_rounds_loads(tmp_path: Path) -> None:
    env = SessionEnv(tmp_path, load_wait=5.0)
    try:
        env.storage.gate.clear()
        drop_mid_round(env)
        sock, _ = env.connect()
        hello(sock)
        threading.Timer(0.5, env.storage.gate.set).start()
        started = time.monotonic()
        send(sock, RoundStart(0))
        assert receive(sock) == RoundReady("ready", "")
        assert 0.3 < time.monotonic() - started < 5.0
        assert env.loaded_path(UUID_A, NAME).read_bytes() == data_file("root.sg.d1")
        send(sock, RoundEnd())
        assert receive(sock) == RoundDone(True)
        send(sock, Bye())
        assert sock.recv(1) == b""
        folder = env.folder()
        assert [p for p in (folder.sync_log, folder.load_log, folder.sync_end) if p.exists()] == []
    finally:
        env.close()


def test_round_start_still_says_busy_after_load_wait(tmp_path: Path) -> None:
    env = SessionEnv(tmp_path, load_wait=0.5)
    try:
        env.storage.gate.clear()
        drop_mid_round(env)
        sock, _ = env.connect()
        hello(sock)
        started = time.monotonic()
        send(sock, RoundStart(0))
        ready = receive(sock)
        waited = time.monotonic() - started
        assert isinstance(ready, RoundReady) and ready.status == "busy"
        assert ready.message in (
            "still loading 1 files of the last round",
            "another session is in a round for this sender and data dir",
        )
        assert 0.4 < waited < 3.0
        env.storage.gate.set()
        sock.close()  # else the session waits out its read timeout before it ends
    finally:
        env.close()
