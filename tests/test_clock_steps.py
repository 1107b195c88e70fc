"""A wall-clock step ends no timeout: the receiver's and the sender's waits, and
paramiko's under them, run on the monotonic clock (sealsync.monoclock).

The wall clock is injected: ``time.time`` is replaced by one that jumps an hour
forward at every reading, far worse than any NTP step, while ``time.monotonic`` runs
as usual. A wait measured on the wall clock then times out at once.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import paramiko
import pytest
from paramiko.buffered_pipe import BufferedPipe

from receiver.chunk_pipe import ChunkPipe
from sealsync.config import ReceiverConfig, ReceiverEndpoint, SenderConfig
from sealsync.monoclock import use_monotonic_clock

STEP = 3600.0


def runaway_clock() -> Callable[[], float]:
    """A wall clock that steps an hour forward at every reading."""
    real = time.time
    steps = itertools.count(1)
    return lambda: real() + next(steps) * STEP


@pytest.fixture
def stepping_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", runaway_clock())


def feed_later(pipe: BufferedPipe[bytes], data: bytes, delay: float = 0.2) -> threading.Thread:
    def feed() -> None:
        time.sleep(delay)
        pipe.feed(data)

    thread = threading.Thread(target=feed)
    thread.start()
    return thread


def test_the_injected_clock_steps(stepping_clock: None) -> None:
    first = time.time()
    assert time.time() - first >= STEP  # what every wall-clock timeout below would see


def test_the_receivers_channel_buffer_waits_out_a_clock_step(stepping_clock: None) -> None:
    pipe = ChunkPipe()
    feeder = feed_later(pipe, b"frame")
    assert pipe.read(5, timeout=10.0) == b"frame"
    feeder.join()


def test_the_buffer_still_times_out_on_the_monotonic_clock(stepping_clock: None) -> None:
    pipe = ChunkPipe()
    started = time.monotonic()
    with pytest.raises(paramiko.buffered_pipe.PipeTimeout):
        pipe.read(5, timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 5.0


def test_paramikos_waits_are_put_on_the_monotonic_clock(stepping_clock: None) -> None:
    use_monotonic_clock()
    pipe: BufferedPipe[bytes] = BufferedPipe()  # what the sender's channel reads from
    feeder = feed_later(pipe, b"answer")
    assert pipe.read(6, timeout=10.0) == b"answer"
    feeder.join()
    clock = vars(paramiko.channel)["time"]  # the channel module's own ``time``
    assert clock.time() - time.monotonic() < 1.0
    assert vars(paramiko.transport)["time"].sleep is time.sleep


# --- a whole round over SSH while the wall clock steps ------------------------------------


class Site:
    """A real receiver service on loopback and an edge whose sender trusts it."""

    def __init__(self, tmp_path: Path) -> None:
        from receiver.service import ReceiverService
        from sealsync.formats import inspect
        from sealsync.keys import generate_keypair

        keys = tmp_path / "keys"
        generate_keypair(keys / "host", comment="host")
        generate_keypair(keys / "edge", comment="edge")
        (keys / "authorized_keys").write_text((keys / "edge.pub").read_text())
        self.data_dir = tmp_path / "dc" / "data"
        for folder in (self.data_dir, tmp_path / "dc" / "schema"):
            folder.mkdir(parents=True)
        config = ReceiverConfig.from_mapping(
            {
                "listen": "127.0.0.1:1",
                "host_key": str(keys / "host"),
                "authorized_keys": str(keys / "authorized_keys"),
                "schema_dir": str(tmp_path / "dc" / "schema"),
                "data_dirs": [str(self.data_dir)],
                "idle_timeout": 30,
            },
            tmp_path,
        )
        config = dataclasses.replace(config, listen_port=0)
        self.service = ReceiverService(config, inspect=inspect, load_wait=10.0).start()
        port = self.service.address[1]
        key_type, blob = (keys / "host.pub").read_text().split()[:2]
        (keys / "known_hosts").write_text(f"[127.0.0.1]:{port} {key_type} {blob}\n")
        self.endpoint = ReceiverEndpoint("dc", "127.0.0.1", port)
        self.keys = keys

    def sender(self, schema_dir: Path, data_dirs: list[Path]) -> SenderConfig:
        return SenderConfig(
            schema_dir=schema_dir,
            data_dirs=data_dirs,
            identity=self.keys / "edge",
            known_hosts=self.keys / "known_hosts",
            receivers=[self.endpoint],
            chunk_size=4096,  # many frames: many waits on both ends
            pipeline_depth=2,
            stall_timeout=30.0,
        )


@pytest.mark.slow
def test_a_round_over_ssh_goes_on_while_the_wall_clock_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sealsync.simulator import EdgeInstance
    from sender.attempt import sync_to_receiver

    site = Site(tmp_path)
    try:
        edge = EdgeInstance(tmp_path / "edge")
        names = [
            edge.write_file("root.sg1", 0, devices=[f"root.sg1.d{i}"], rows_per_device=2000)
            for i in range(6)
        ]
        config = site.sender(edge.schema_dir, list(edge.data_dirs))
        monkeypatch.setattr(time, "time", runaway_clock())
        report = sync_to_receiver(config, site.endpoint)
        monkeypatch.undo()
        assert report.ok, report.to_dict()
        assert report.attempts == 1  # one connection: no timeout cut it
        assert report.shipped_files == len(names)
    finally:
        site.service.stop()


def test_an_attempts_duration_is_measured_on_the_monotonic_clock(
    tmp_path: Path, stepping_clock: None
) -> None:
    """The history's and the metrics' duration of an attempt: end minus start."""
    from sealsync.errors import ConfigError
    from sender.send import run_attempt

    endpoint = ReceiverEndpoint("dc", "127.0.0.1", 5555)
    config = SenderConfig(
        schema_dir=tmp_path,
        data_dirs=[tmp_path],
        identity=tmp_path / "unused",
        known_hosts=tmp_path / "unused",
        receivers=[endpoint],
    )
    result = run_attempt(config, endpoint, preflight=ConfigError("stopped before any round"))
    assert result.attempt.kind == "config"
    assert 0.0 <= result.attempt.seconds < 5.0
