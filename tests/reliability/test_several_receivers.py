"""A round to several receivers at once, one of them behind a dead link.

Two ``sealsync serve`` processes; the sender's config lists ``dead`` first, reached
through a :class:`~reliability.faultproxy.FaultProxy` that freezes the link in the
middle of the first file and every reconnect from its first byte, then ``good``,
reached directly. Run one after the other, ``good`` would start only once ``dead`` had
given up; run side by side, ``good`` is shipped and its state recorded while
``dead`` still waits out its keepalives and connect timeouts, and the exit code and
the output cover both.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploy_helpers import (
    SEALSYNC,
    Deployment,
    Sender,
    free_port,
    make_deployment,
    mark_storage,
    populate,
)
from reliability.faultproxy import FREEZE, UP, Fault, FaultProxy

from sender.manage.history import last_attempt, read_round_record
from sender.manage.layout import SchemaPaths, SenderPaths
from sender.manage.state import read_file_set

pytestmark = pytest.mark.slow

INTERVAL, COUNT, CONNECT_TIMEOUT, RETRIES = 1.0, 2, 3.0, 3
AFTER_HANDSHAKE = 2600
BIG_ROWS = 20000


@dataclass
class Pair:
    dead: Deployment
    good: Deployment
    proxy: FaultProxy
    sender: Sender


def second_receiver(dep: Deployment) -> Deployment:
    """Another receiver process with the same host key and authorized keys."""
    root = dep.root / "dc2"
    root.mkdir()
    port = free_port()
    config = root / "receiver.toml"
    text = dep.receiver_config.read_text().replace(f"127.0.0.1:{dep.port}", f"127.0.0.1:{port}")
    text = text.replace(str(dep.receiver_data), str(root / "data"))
    text = text.replace(str(dep.receiver_schema), str(root / "schema"))
    config.write_text(text)
    (root / "data").mkdir()
    (root / "schema").mkdir()
    mark_storage(config)
    return Deployment(root, port, config, root / "data", root / "schema", list(dep.senders))


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    dead = make_deployment(tmp_path / "site", senders=1)
    with open(dead.receiver_config, "a", encoding="utf-8") as f:
        f.write(f"client_alive_interval = {INTERVAL}\nclient_alive_count_max = {COUNT}\n")
    good = second_receiver(dead)
    proxy = FaultProxy(dead.port).start()
    keys = dead.root / "keys"
    kind, b64 = (keys / "host.pub").read_text().split()[:2]
    with open(keys / "known_hosts", "a", encoding="utf-8") as f:
        f.write(f"[127.0.0.1]:{proxy.port} {kind} {b64}\n[127.0.0.1]:{good.port} {kind} {b64}\n")
    sender = dead.senders[0]
    text = sender.config.read_text()
    text = text.replace(
        f'name = "dc"\nhost = "127.0.0.1"\nport = {dead.port}\n',
        f'name = "dead"\nhost = "127.0.0.1"\nport = {proxy.port}\n\n'
        f'[[receiver]]\nname = "good"\nhost = "127.0.0.1"\nport = {good.port}\n',
    )
    text = text.replace(
        "max_retries = 3\n",
        f"max_retries = {RETRIES}\nconnect_timeout = {CONNECT_TIMEOUT}\n"
        f"server_alive_interval = {INTERVAL}\nserver_alive_count_max = {COUNT}\n"
        # reconnects stop once one timed out and a second has gone by: RETRIES in all
        "reconnect_time = 1.0\n",
    )
    sender.config.write_text(text)
    dead.start_receiver()
    good.start_receiver()
    try:
        yield Pair(dead, good, proxy, sender)
    finally:
        proxy.stop()
        dead.stop_receiver()
        good.stop_receiver()


def test_a_dead_receiver_does_not_hold_up_the_others(pair: Pair) -> None:
    sender = pair.sender
    edge = sender.edge
    names = [
        edge.write_file("root.f.a", 0, devices=["root.f.a.d0"], rows_per_device=BIG_ROWS)
    ] + populate(edge, groups=2, files=3, prefix="root.f.g", rows=20)
    pair.proxy.plan(Fault(UP, AFTER_HANDSHAKE + BIG_ROWS * 10, FREEZE))  # mid-file
    for _ in range(RETRIES - 1):
        pair.proxy.plan(Fault(UP, 0, FREEZE))  # and it stays dead
    good_state = SenderPaths(edge.data_dirs[0], "127.0.0.1", pair.good.port)

    def good_done() -> bool:
        return (
            read_file_set(good_state.last_local_files) == set(names)
            and (read_round_record(good_state) or {}).get("ok") is True
        )

    started = time.monotonic()
    proc = subprocess.Popen(
        [*SEALSYNC, "send", "--config", str(sender.config), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        while not good_done():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - started < 60
            time.sleep(0.05)
        good_at = time.monotonic() - started
        running_then = proc.poll() is None
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended_at = time.monotonic() - started

    # good: shipped and recorded while dead was still being waited for
    assert running_then
    dead_at_least = INTERVAL * (COUNT + 1) + (RETRIES - 1) * CONNECT_TIMEOUT
    assert ended_at - good_at > dead_at_least / 2, (good_at, ended_at)
    assert pair.good.loaded_hashes(sender) == sender.sealed_hashes()

    # the exit code, the JSON and stderr cover both, in config order
    assert proc.returncode == 1
    doc = json.loads(out)
    assert [r["receiver"] for r in doc["receivers"]] == ["dead", "good"]
    dead_report, good_report = doc["receivers"]
    assert good_report["ok"] is True and sorted(good_report["dirs"][0]["shipped"]) == sorted(names)
    assert dead_report["ok"] is False and dead_report["attempts"] == RETRIES
    assert doc["ok"] is False and doc["errors"] == []
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"sealsync: dead: {edge.data_dirs[0]}: connection lost, gave up")

    # the link comes back: the next run finishes dead's round, good has nothing to do
    # (once dead's receiver has given the frozen session up, or it answers busy)
    deadline = time.monotonic() + 30
    while "link dead" not in pair.dead.log():
        assert time.monotonic() < deadline, pair.dead.log()
        time.sleep(0.1)
    result = sender.send("--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["ok"] for r in doc["receivers"]] == [True, True]
    assert doc["receivers"][1]["shipped_files"] == 0
    assert pair.dead.loaded_hashes(sender) == sender.sealed_hashes()
    assert pair.dead.round_state_left() == [] and pair.good.round_state_left() == []


def test_sigterm_stops_every_round_and_each_records_it(pair: Pair) -> None:
    """SIGTERM reaches the main thread only; both rounds, each on its own thread and
    held mid-file by a bandwidth cap, must stop, clean up and say so in their history,
    and the next run finishes both."""
    sender = pair.sender
    edge = sender.edge
    edge.write_file("root.f.a", 0, devices=["root.f.a.d0"], rows_per_device=BIG_ROWS)
    proc = subprocess.Popen(
        [*SEALSYNC, "send", "--config", str(sender.config), "--bwlimit", "16K"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    schema = [
        SchemaPaths(edge.schema_dir, "127.0.0.1", p) for p in (pair.proxy.port, pair.good.port)
    ]
    try:
        deadline = time.monotonic() + 30
        while not all(staged_bytes(d) > 0 for d in (pair.dead, pair.good)):  # both mid-file
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "Traceback" not in err and out == "", (out, err)
    outcomes = [last_attempt(s) for s in schema]
    assert [(a or {}).get("outcome") for a in outcomes] == ["interrupted", "interrupted"]
    assert all("SIGTERM" in (a or {}).get("error", "") for a in outcomes)

    result = sender.send("--json")
    assert result.returncode == 0, result.stderr
    assert pair.dead.loaded_hashes(sender) == sender.sealed_hashes()
    assert pair.good.loaded_hashes(sender) == sender.sealed_hashes()


def staged_bytes(dep: Deployment) -> int:
    """Bytes of unfinished uploads in a receiver's staging folder (its lock file aside)."""
    staging = dep.receiver_data / "sync-receiver"
    return sum(
        p.stat().st_size
        for p in staging.rglob("*")
        if p.is_file() and p.parent != staging and p.stat().st_size > 0
    )
