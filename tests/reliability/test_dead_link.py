"""Dead links over real SSH: keepalives on both ends, the connect and stall timeouts.

A :class:`~reliability.faultproxy.FaultProxy` between the sender and ``sealsync serve``
*freezes* a connection — from some byte on, nothing more is forwarded either way and
nothing is closed, as when a route or a NAT mapping dies. Neither TCP nor the
protocol notices that; keepalives do. Both ends here use short intervals (1 s, count
2: dead after 3 s of silence) so the cases take seconds; with the defaults (15 s, 3)
the same happens after a minute.

Each case checks the three outcomes the issue asks for: the sender declares the link
dead and the round retries within its retry budget (finishing on a good link, or
failing with one line when the link stays dead); and the receiver frees the session
on its own, said in its log and seen in its session count.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import Deployment, Sender, make_deployment, populate
from receiver_load_helpers import UUID_A, UUID_B
from receiver_service_helpers import Client, make_keys, receiver_mapping
from reliability.faultproxy import FREEZE, UP, Fault, FaultProxy

from receiver.service import ReceiverService
from sealsync.config import (
    ReceiverConfig,
    SenderConfig,
    load_receiver_config,
    load_sender_config,
)
from sealsync.formats import inspect as real_inspect
from sealsync.formats.common import FileInfo
from sealsync.protocol import Welcome
from sender.attempt import AttemptReport, sync_to_receiver
from sender.manage.layout import SenderPaths
from sender.manage.state import read_file_set

pytestmark = pytest.mark.slow

INTERVAL = 1.0
COUNT = 2
DEAD_AFTER = INTERVAL * (COUNT + 1)
CONNECT_TIMEOUT = 3.0
AFTER_HANDSHAKE = 2600
"""Upwards, the first byte after the SSH handshake and HELLO, give or take a packet."""
BIG_ROWS = 20000


@dataclass
class Site:
    dep: Deployment
    proxy: FaultProxy
    sender: Sender
    config: SenderConfig


def through_proxy(dep: Deployment, proxy: FaultProxy, sender: Sender, extra: str) -> Sender:
    """The sender's config, pointed at the proxy (host key pinned there), plus ``extra``."""
    keys = dep.root / "keys"
    kind, b64 = (keys / "host.pub").read_text().split()[:2]
    known = keys / f"known_hosts_{proxy.port}"
    known.write_text(f"[127.0.0.1]:{proxy.port} {kind} {b64}\n")
    text = sender.config.read_text()
    text = text.replace(f"port = {dep.port}", f"port = {proxy.port}")
    text = text.replace(str(keys / "known_hosts"), str(known))
    text = text.replace("max_retries = 3\n", f"max_retries = 3\n{extra}")
    config = sender.config.with_name(f"{sender.name}-{proxy.port}.toml")
    config.write_text(text)
    return Sender(sender.name, sender.edge, config)


SENDER_KEYS = (
    f"connect_timeout = {CONNECT_TIMEOUT}\nserver_alive_interval = {INTERVAL}\n"
    f"server_alive_count_max = {COUNT}\nstall_timeout = 30.0\n"
    # reconnects that time out stop once a second of them has gone by: each takes
    # CONNECT_TIMEOUT, so a link that stays dead costs exactly max_retries connections
    "reconnect_time = 1.0\n"
)
RECEIVER_KEYS = (
    f"client_alive_interval = {INTERVAL}\nclient_alive_count_max = {COUNT}\nidle_timeout = 60.0\n"
)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    dep = make_deployment(tmp_path / "site", senders=1)
    with open(dep.receiver_config, "a", encoding="utf-8") as f:
        f.write(RECEIVER_KEYS)
    dep.start_receiver()
    proxy = FaultProxy(dep.port).start()
    try:
        sender = through_proxy(dep, proxy, dep.senders[0], SENDER_KEYS)
        dep.senders[0] = sender
        yield Site(dep, proxy, sender, load_sender_config(sender.config))
    finally:
        proxy.stop()
        dep.stop_receiver()


def new_files(site: Site, big: int = 2, small: int = 6) -> list[str]:
    edge = site.sender.edge
    names = [
        edge.write_file(
            "root.dl.a", 0, devices=["root.dl.a.d0"], rows_per_device=BIG_ROWS, start_ms=i * 10**9
        )
        for i in range(big)
    ]
    return names + populate(edge, groups=2, files=small // 2 - 1, prefix="root.dl.g", rows=20)


def assert_converged(site: Site) -> None:
    assert site.dep.loaded_hashes(site.sender) == site.sender.sealed_hashes()
    assert site.dep.round_state_left() == []
    paths = SenderPaths(site.sender.edge.data_dirs[0], "127.0.0.1", site.proxy.port)
    assert read_file_set(paths.last_local_files) == set(site.sender.sealed_hashes())


def wait_for(predicate: Any, timeout: float) -> float:
    """Seconds until ``predicate()`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.05)
    return time.monotonic() - started


class Retries:
    def __init__(self) -> None:
        self.reasons: list[tuple[float, str]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        if event == "retry":
            self.reasons.append((time.monotonic(), str(fields["reason"])))


def test_link_going_silent_mid_file_is_declared_dead_and_the_round_retries(site: Site) -> None:
    names = new_files(site)
    site.proxy.plan(Fault(UP, AFTER_HANDSHAKE + BIG_ROWS * 10, FREEZE))  # the next is clean
    retries = Retries()

    started = time.monotonic()
    report = sync_to_receiver(site.config, site.config.receivers[0], progress=retries)

    assert report.ok and report.attempts == 2, json.dumps(report.to_dict(), indent=1)
    assert sorted(report.dirs[0].shipped) == sorted(names)
    [(at, reason)] = retries.reasons
    address = f"127.0.0.1:{site.proxy.port}"
    assert reason.startswith(f"receiver {address}: link dead, nothing received for ")
    assert reason.endswith("(server_alive_interval 1 s, server_alive_count_max 2)")
    assert DEAD_AFTER <= at - started < DEAD_AFTER + 10  # a few seconds of streaming first
    # the receiver gave the frozen session up by itself: its log says so
    wait_for(lambda: "link dead" in site.dep.log(), DEAD_AFTER + 5)
    assert "(client_alive_interval 1 s, client_alive_count_max 2); closing" in site.dep.log()
    assert "in the middle of a round" in site.dep.log()
    assert_converged(site)


def test_link_that_stays_dead_is_a_clean_failure_then_converges(site: Site) -> None:
    names = new_files(site)
    site.proxy.plan(Fault(UP, AFTER_HANDSHAKE + BIG_ROWS * 10, FREEZE))
    for _ in range(site.config.max_retries - 1):  # every reconnect meets a dead link too
        site.proxy.plan(Fault(UP, 0, FREEZE))

    started = time.monotonic()
    result = site.sender.send("--json")
    seconds = time.monotonic() - started

    assert result.returncode == 1
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    address = f"127.0.0.1:{site.proxy.port}"
    assert result.stderr.startswith(f"sealsync: dc: {site.sender.edge.data_dirs[0]}: ")
    assert (
        "connection lost, gave up after 3 connections: SSH handshake with receiver "
        f"{address} failed: timed out after 3 s"
    ) in result.stderr
    doc = json.loads(result.stdout)
    assert doc["receivers"][0]["attempts"] == 3 and site.proxy.pending_plans == 0
    # dead link found once, then two connects that time out: well inside the defaults' minute
    assert DEAD_AFTER + 2 * CONNECT_TIMEOUT <= seconds < 45
    assert not set(names) & set(site.dep.loaded_hashes(site.sender))

    result = site.sender.send()
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert_converged(site)


# --- in process: the receiver's session count, and a receiver that stops reading ------------


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    return make_keys(tmp_path)


def receiver_config(tmp_path: Path, keys: dict[str, Path], **extra: Any) -> ReceiverConfig:
    table = receiver_mapping(tmp_path, keys, **extra)
    config = ReceiverConfig.from_mapping(table, tmp_path)
    return dataclasses.replace(config, listen_port=0)


def test_receiver_frees_the_session_of_a_silent_sender(
    tmp_path: Path, keys: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="sealsync.receiver.service")
    config = receiver_config(
        tmp_path, keys, client_alive_interval=INTERVAL, client_alive_count_max=COUNT
    )
    with ReceiverService(config, inspect=real_inspect) as svc, FaultProxy(svc.address[1]) as proxy:
        idle = Client(svc.address, keys["edge_b"])  # direct: idle but alive
        quiet = Client(("127.0.0.1", proxy.port), keys["edge_a"])
        try:
            assert isinstance(idle.hello(UUID_B), Welcome)
            assert isinstance(quiet.hello(UUID_A), Welcome)
            assert svc.sessions == 2
            proxy.freeze()  # nothing crosses either way from now on
            frozen_at = time.monotonic()
            freed = wait_for(lambda: svc.sessions == 1, DEAD_AFTER + 5)
            assert freed >= DEAD_AFTER - 0.5  # not before the silence reached the limit
            dead = [r.getMessage() for r in caplog.records if "link dead" in r.getMessage()]
            assert len(dead) == 1 and dead[0].startswith("127.0.0.1: link dead, nothing ")
            # the idle session answered every keepalive and is still open, well past the limit
            time.sleep(max(0.0, DEAD_AFTER * 2 - (time.monotonic() - frozen_at)))
            assert svc.sessions == 1 and idle.transport.is_active()
        finally:
            idle.close()
            quiet.close()


def test_receiver_that_stops_answering_is_a_stall_not_a_dead_link(tmp_path: Path) -> None:
    """The receiver's SSH layer answers keepalives, but its session is stuck (a hung
    disk): the link is alive, and the stall timeout ends the wait."""
    dep = make_deployment(tmp_path / "site", senders=1)
    release = threading.Event()

    def stuck_inspect(path: Path) -> FileInfo:
        release.wait(30)
        return real_inspect(path)

    sender = dep.senders[0]
    text = sender.config.read_text().replace("max_retries = 3\n", "max_retries = 1\n")
    sender.config.write_text(
        text.replace("[[receiver]]", f"{SENDER_KEYS.replace('30.0', '4.0')}\n[[receiver]]")
    )
    config = load_sender_config(sender.config)
    names = populate(sender.edge, groups=1, files=2)
    service = ReceiverService(load_receiver_config(dep.receiver_config), inspect=stuck_inspect)
    with service:
        try:
            started = time.monotonic()
            report: AttemptReport = sync_to_receiver(config, config.receivers[0])
            seconds = time.monotonic() - started
        finally:
            release.set()
    note = report.dirs[0].note or ""
    assert not report.ok and report.attempts == 1
    assert (
        note == "connection lost, gave up after 1 connection: no answer from the receiver for 4 s"
    )
    assert 4.0 <= seconds < 15 and seconds > DEAD_AFTER  # keepalives kept the link alive
    assert not set(names) & read_file_set(
        SenderPaths(sender.edge.data_dirs[0], "127.0.0.1", dep.port).last_local_files
    )
