"""Reconnects that outlast a receiver restart (sender.attempt): backoff with jitter,
``max_retries`` lost connections, reconnect failures bounded by ``reconnect_time``;
a receiver stopping mid-session (ERROR busy) is a dropped connection; one that turns a
connection away for its load (busy) is retried within ``reconnect_time``. The last test
restarts a real ``sealsync serve`` in the middle of a real ``sealsync send``."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import tenacity
from deploy_helpers import SEALSYNC, make_deployment, populate
from sender_transfer_helpers import FakeReceiver, connect_fake
from state_helpers import write_data_file

from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.protocol import Error, ErrorCode, FileBegin, Hello, send
from sender import attempt as attempt_mod
from sender.attempt import sync_to_receiver
from sender.transfer.errors import Busy, Unreachable

RECEIVER = ReceiverEndpoint("dc1", "127.0.0.1", 5555)
NAMES = [f"sequence/root.sg1/0/0/{i}-{i}-0.tsfile" for i in range(1, 4)]
REFUSED = "cannot connect to receiver 127.0.0.1:5555: Connection refused"
BACKOFF = attempt_mod.ROUND_WAIT  # the real one (the tests below wait less)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attempt_mod, "ROUND_WAIT", tenacity.wait_fixed(0.05))


def make_config(tmp_path: Path, **extra: Any) -> SenderConfig:
    schema, data = tmp_path / "edge" / "schema", tmp_path / "edge" / "data"
    schema.mkdir(parents=True)
    data.mkdir(parents=True)
    for name in NAMES:
        write_data_file(data, name, (name.encode() + b"|") * 50, b"resource")
    args: dict[str, Any] = {
        "schema_dir": schema,
        "data_dirs": [data],
        "identity": tmp_path / "unused",
        "known_hosts": tmp_path / "unused",
        "receivers": [RECEIVER],
        "chunk_size": 4096,
        "pipeline_depth": 1,
    }
    args.update(extra)
    return SenderConfig(**args)


class Script:
    """A connector: each connection is the next entry, a scripted receiver or a failure."""

    def __init__(self, *steps: FakeReceiver | Exception) -> None:
        self.steps = list(steps)
        self.at: list[float] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, config: SenderConfig, receiver: ReceiverEndpoint) -> Any:
        self.at.append(time.monotonic())
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            raise step
        conn, thread = connect_fake(step)
        self.threads.append(thread)
        return conn

    def join(self) -> None:
        for t in self.threads:
            t.join(5)


def test_a_receiver_away_for_a_while_is_waited_for(tmp_path: Path) -> None:
    """Connection lost, then refused many more times than max_retries (a restart), then
    back: the round completes."""
    config = make_config(tmp_path, max_retries=2, reconnect_time=30.0)
    refused = [Unreachable(REFUSED) for _ in range(8)]
    script = Script(FakeReceiver(drop_after_files=1), *refused, FakeReceiver())
    report = sync_to_receiver(config, RECEIVER, connector=script)
    script.join()
    assert report.ok, report.to_dict()
    assert report.attempts == 10
    assert sorted(report.dirs[0].shipped) == NAMES


def test_reconnect_time_bounds_the_wait_for_a_receiver_that_stays_away(tmp_path: Path) -> None:
    config = make_config(tmp_path, max_retries=2, reconnect_time=0.6)
    script = Script(FakeReceiver(drop_after_files=1), Unreachable(REFUSED))
    started = time.monotonic()
    report = sync_to_receiver(config, RECEIVER, connector=script)
    seconds = time.monotonic() - started
    script.join()
    assert not report.ok
    assert 0.6 <= script.at[-1] - script.at[1] < 0.6 + 1.0  # one try at the very end
    assert seconds < 5.0
    assert report.attempts > 2  # reconnect failures are bounded by time, not by count
    note = report.dirs[0].note
    assert note is not None
    assert note.startswith(f"connection lost, gave up after {report.attempts} connections: ")
    assert note.endswith(REFUSED)


def test_reconnect_time_zero_gives_up_at_the_first_failed_reconnect(tmp_path: Path) -> None:
    config = make_config(tmp_path, max_retries=5, reconnect_time=0.0)
    script = Script(FakeReceiver(drop_after_files=1), Unreachable(REFUSED))
    report = sync_to_receiver(config, RECEIVER, connector=script)
    script.join()
    assert report.attempts == 2 and not report.ok


def test_lost_connections_are_still_bounded_by_max_retries(tmp_path: Path) -> None:
    config = make_config(tmp_path, max_retries=3, reconnect_time=60.0)
    script = Script(*(FakeReceiver(drop_after_files=1) for _ in range(3)), FakeReceiver())
    report = sync_to_receiver(config, RECEIVER, connector=script)
    script.join()
    assert report.attempts == 3 and not report.ok


def test_the_backoff_has_jitter_and_a_ceiling() -> None:
    """Senders of a fleet that lost one receiver do not all come back at one instant."""
    waits: list[float] = []
    for attempt in (1, 2, 3, 4, 8, 20):
        state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
        state.attempt_number = attempt
        waits.extend(BACKOFF(state) for _ in range(50))
    assert all(0.0 <= w <= 10.0 for w in waits)
    assert len({round(w, 6) for w in waits}) > 100  # spread, not one value per attempt


def test_a_receiver_stopping_mid_session_is_a_dropped_connection(tmp_path: Path) -> None:
    """ERROR busy once the session is under way: the receiver is stopping ("retry
    later"); the round reconnects and finishes instead of failing."""
    config = make_config(tmp_path)

    def stop_at_first_file(msg: object, sock: socket.socket) -> None:
        if isinstance(msg, FileBegin):
            send(sock, Error(ErrorCode.BUSY, "receiver stopping, retry later"))
            sock.shutdown(socket.SHUT_RDWR)

    script = Script(FakeReceiver(on_frame=stop_at_first_file), FakeReceiver())
    report = sync_to_receiver(config, RECEIVER, connector=script)
    script.join()
    assert report.ok, report.to_dict()
    assert report.attempts == 2


BUSY_LINE = (
    "receiver 127.0.0.1:5555 refused the connection: receiver busy: 60 unauthenticated "
    "connections open (max_startups), retry later"
)


def _busy_at_hello(message: str) -> FakeReceiver:
    def full(msg: object, sock: socket.socket) -> None:
        if isinstance(msg, Hello):
            send(sock, Error(ErrorCode.BUSY, message))
            sock.shutdown(socket.SHUT_RDWR)

    return FakeReceiver(on_frame=full)


def test_a_receiver_busy_from_the_first_connection_is_retried(tmp_path: Path) -> None:
    """Turned away for its load, before its banner or at HELLO (a session cap), from the
    first connection on: the attempt tries again within reconnect_time and finishes."""
    config = make_config(tmp_path, reconnect_time=30.0)
    script = Script(Busy(BUSY_LINE), _busy_at_hello("too many sessions"), FakeReceiver())
    report = sync_to_receiver(config, RECEIVER, connector=script)
    script.join()
    assert report.ok, report.to_dict()
    assert report.attempts == 3
    assert sorted(report.dirs[0].shipped) == NAMES


def test_a_receiver_that_stays_busy_is_given_up_at_reconnect_time(tmp_path: Path) -> None:
    """The last try falls at reconnect_time; the attempt then ends with the busy line
    itself (no connection was ever taken: nothing was lost)."""
    config = make_config(tmp_path, max_retries=2, reconnect_time=0.6)
    script = Script(Busy(BUSY_LINE))
    started = time.monotonic()
    with pytest.raises(Busy, match="unauthenticated connections open"):
        sync_to_receiver(config, RECEIVER, connector=script)
    assert 0.6 <= script.at[-1] - script.at[0] < 0.6 + 1.0
    assert len(script.at) > 2  # bounded by time, not by max_retries
    assert time.monotonic() - started < 5.0


def test_busy_at_hello_without_reconnect_time_is_not_retried(tmp_path: Path) -> None:
    """reconnect_time = 0: give up at once, as before any retry, with the receiver's line."""
    config = make_config(tmp_path, reconnect_time=0.0)
    script = Script(_busy_at_hello("too many sessions"), FakeReceiver())
    with pytest.raises(Busy, match="too many sessions"):
        sync_to_receiver(config, RECEIVER, connector=script)
    script.join()
    assert len(script.at) == 1


# --- a real receiver restarted during a real send -------------------------------------


def staged_files(root: Path) -> list[Path]:
    """Files the receiver holds of the round in flight (its sender folders' data/)."""
    return [p for p in (root / "sync-receiver").glob("*/data/**/*") if p.is_file()]


@pytest.mark.slow
def test_a_send_survives_a_receiver_restart(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    sender = dep.senders[0]
    populate(sender.edge, groups=2, files=4, rows=20000)
    text = sender.config.read_text()
    sender.config.write_text(
        text.replace("max_retries = 3\n", 'max_retries = 3\nbwlimit = "256K"\n')
    )
    dep.start_receiver()
    send = subprocess.Popen(
        [*SEALSYNC, "send", "--json", "--config", str(sender.config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not staged_files(dep.receiver_data):  # mid-round: files arrived, more to come
            assert send.poll() is None and time.monotonic() < deadline, send.communicate()
            time.sleep(0.05)
        assert dep.stop_receiver(signal.SIGTERM) == 0
        time.sleep(5.0)  # systemd's RestartSec=5: refused connections meanwhile
        dep.start_receiver()
        out, err = send.communicate(timeout=180)
    finally:
        if send.poll() is None:
            send.kill()
            send.communicate()
        dep.stop_receiver()
    assert send.returncode == 0, (out, err, dep.log())
    assert dep.loaded_hashes(sender) == sender.sealed_hashes()
    doc = json.loads(out)
    assert doc["receivers"][0]["attempts"] >= 3  # cut, refused at least once, done
    log = dep.log()
    assert "received SIGTERM, stopping" in log
    assert log.index("in the middle of a round") < log.rindex("round done in")
