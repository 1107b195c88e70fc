"""Rounds to several receivers side by side (``sender.fleet``): outcomes in config order,
failures kept to their receiver, an interrupt that cancels every round, one shared
progress line, and a cancelled ``sync_to_receiver``. Real receivers, one of them dead, are in
``tests/reliability/test_several_receivers.py``."""

from __future__ import annotations

import io
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from sender_transfer_helpers import FAKE_RECEIVER, SocketConnection, fake_round_config

from sealsync.app.output import TerminalProgress
from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.errors import SealsyncError
from sealsync.protocol import HEADER, Kind
from sender.attempt import sync_to_receiver
from sender.fleet import Cancel, Lane, SharedLine, run_fleet

DC = [ReceiverEndpoint(f"dc{i}", "127.0.0.1", 5555 + i) for i in range(3)]


def test_rounds_run_side_by_side_and_come_back_in_config_order() -> None:
    started: dict[str, float] = {}
    threads: dict[str, str] = {}

    def run_one(lane: Lane) -> str:
        name = lane.receiver.name
        started[name] = time.monotonic()
        threads[name] = threading.current_thread().name
        time.sleep({"dc0": 0.6, "dc1": 0.1, "dc2": 0.3}[name])  # dc0 is the slow one
        return name.upper()

    began = time.monotonic()
    outcomes = run_fleet(DC, run_one, stream=io.StringIO())
    took = time.monotonic() - began

    assert [(o.receiver.name, o.result, o.error) for o in outcomes] == [
        ("dc0", "DC0", None),
        ("dc1", "DC1", None),
        ("dc2", "DC2", None),
    ]
    assert max(started.values()) - min(started.values()) < 0.2  # none waited for another
    assert took < 0.6 + 0.4  # the slowest, not the sum (1.0 s)
    assert len(set(threads.values())) == 3 and "MainThread" not in threads.values()


def test_a_failure_stays_with_its_receiver() -> None:
    def run_one(lane: Lane) -> str:
        if lane.receiver.name == "dc1":
            raise SealsyncError("receiver dc1 unreachable", 75)
        return "ok"

    outcomes = run_fleet(DC, run_one, stream=io.StringIO())
    assert [o.result for o in outcomes] == ["ok", None, "ok"]
    assert outcomes[1].error is not None and outcomes[1].error.exit_code == 75


def test_a_bug_in_one_round_is_raised_once_all_have_ended() -> None:
    finished: list[str] = []

    def run_one(lane: Lane) -> str:
        if lane.receiver.name == "dc0":
            raise ZeroDivisionError("bug")
        time.sleep(0.2)
        finished.append(lane.receiver.name)
        return "ok"

    with pytest.raises(ZeroDivisionError):
        run_fleet(DC, run_one, stream=io.StringIO())
    assert sorted(finished) == ["dc1", "dc2"]


def test_one_receiver_runs_on_the_calling_thread() -> None:
    seen: list[threading.Thread] = []

    def run_one(lane: Lane) -> str:
        seen.append(threading.current_thread())
        assert lane.progress is None  # stderr, as a lone round always had
        raise SealsyncError("no")

    [outcome] = run_fleet(DC[:1], run_one)
    assert seen == [threading.current_thread()]
    assert outcome.error is not None and str(outcome.error) == "no"


def test_an_interrupt_cancels_every_round_and_waits_for_them() -> None:
    """SIGINT reaches the main thread only: the fleet must pass it on to the rounds."""
    unwound: list[str] = []

    def run_one(lane: Lane) -> str:
        lane.cancel.event.wait(30)  # a round blocked on its link
        time.sleep(0.1)  # its clean-up
        unwound.append(lane.receiver.name)
        return "interrupted"

    main = threading.get_ident()
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    began = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_fleet(DC, run_one, stream=io.StringIO())
    finally:
        timer.cancel()
    assert time.monotonic() - began < 3.0
    assert sorted(unwound) == ["dc0", "dc1", "dc2"]  # each ran its clean-up first


def test_progress_of_several_rounds_shares_one_line() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    line = SharedLine(tty)
    a = TerminalProgress("dc0", stream=line.slot(0))
    b = TerminalProgress("dc1", stream=line.slot(1))
    assert a.enabled and b.enabled  # a terminal under the slots: bars are drawn
    b("dir_start", bytes=2048)
    b("bytes", sent=1024, total=2048)
    a("dir_start", bytes=4096)
    a("bytes", sent=1024, total=4096)
    shown = tty.getvalue().rsplit("\r", 1)[-1]
    assert shown.startswith("dc0: 1.0 KiB / 4.0 KiB (25%)")
    assert "  |  dc1: 1.0 KiB / 2.0 KiB (50%)" in shown
    a.clear()
    shown = tty.getvalue().rsplit("\r", 1)[-1].rstrip()
    assert shown.startswith("dc1: 1.0 KiB / 2.0 KiB (50%)") and "dc0" not in shown
    line.clear()
    assert tty.getvalue().endswith("\r") and tty.getvalue().rsplit("\r", 2)[-2].strip() == ""


def test_cancel_closes_the_open_connection_and_stops_the_retries(tmp_path: Path) -> None:
    """A round waiting on a receiver that says nothing ends as soon as it is cancelled."""
    config: SenderConfig = fake_round_config(tmp_path)
    (config.data_dirs[0] / "sequence/g/0").mkdir(parents=True)
    peers: list[socket.socket] = []
    cancel = Cancel()

    def silent(config: SenderConfig, receiver: ReceiverEndpoint) -> SocketConnection:
        ours, theirs = socket.socketpair()
        peers.append(theirs)  # never answers the HELLO
        return SocketConnection(ours)

    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    began = time.monotonic()
    report = sync_to_receiver(config, FAKE_RECEIVER, connector=silent, cancel=cancel)
    took = time.monotonic() - began

    assert took < 3.0  # not the 120 s stall timeout, not max_retries more attempts
    assert report.attempts == 1 and len(peers) == 1
    assert [d.note for d in report.dirs] == ["interrupted"]
    peer = peers[0]
    peer.settimeout(2)
    received = b""
    while chunk := peer.recv(65536):  # the HELLO, then EOF: our end was closed
        received += chunk
    peer.close()
    kind, _ = HEADER.unpack(received[: HEADER.size])
    assert kind == Kind.HELLO
