"""``sealsync load --follow`` as an operator runs it: real ``serve``, real ``send``
rounds, a real following loader process with one Spark session, and the Delta table
read as its readers read it.

One scenario, in order: rows of a round appear without any ``load`` command; a
``--full`` run by hand while it follows; a receiver restart; the follower killed
with -9 as it commits, then restarted; a sender whose folder is troubled held alone
while the other's rows keep arriving; SIGTERM, which ends it cleanly. After every
step each row of the edges is in the table exactly once."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

import pytest
from config_helpers import loader_doc, write_config
from deploy_helpers import SEALSYNC, Deployment, make_deployment, populate

from sealsync.formats import format_for
from spark_loader import read_arrow
from spark_loader.follow import FOLLOW_FILE

pytestmark = pytest.mark.slow  # serve, send, Spark

FRESH = 300.0  # seconds for a round's rows to show up: a bound, bench_freshness.py times it


class Follower:
    def __init__(self, config: Path, root: Path) -> None:
        self.config, self.root = config, root
        self.proc: subprocess.Popen[str] | None = None
        self.err: IO[str] | None = None

    def start(self) -> None:
        self.err = open(self.root / "follow.err", "a")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [*SEALSYNC, "load", "--follow", "--window", "0.5", "--config", str(self.config)],
            stdout=self.err,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )

    def said(self) -> str:
        return (self.root / "follow.err").read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        assert self.err is not None
        self.err.close()
        return code


def _edge_rows(dep: Deployment) -> collections.Counter[tuple[str, int]]:
    """(device, time) of every point each edge holds in its sealed files."""
    rows: collections.Counter[tuple[str, int]] = collections.Counter()
    for sender in dep.senders:
        for path in sorted(sender.edge.data_dirs[0].rglob("*.tsfile")):
            if not Path(f"{path}.resource").exists():
                continue
            table = format_for(path).to_arrow(path)
            devices, times = table.column("device").to_pylist(), table.column("time").to_pylist()
            rows.update(zip(devices, times, strict=True))
    return rows


def _table_rows(table: Path) -> collections.Counter[tuple[str, int]]:
    if not (table / "_delta_log").is_dir():
        return collections.Counter()
    data = read_arrow(table)
    if "device" not in data.column_names:  # a version with no data file yet
        return collections.Counter()
    return collections.Counter(
        zip(data.column("device").to_pylist(), data.column("time").to_pylist(), strict=True)
    )


def _until_table_holds(dep: Deployment, table: Path, follower: Follower) -> float:
    """Seconds until the table holds exactly the edges' rows (the follower loads them)."""
    want, start = _edge_rows(dep), time.monotonic()
    while _table_rows(table) != want:
        assert follower.proc is not None and follower.proc.poll() is None, follower.said()
        assert time.monotonic() - start < FRESH, (follower.said(), _table_rows(table) - want)
        time.sleep(0.5)
    return time.monotonic() - start


def test_a_following_loader_keeps_the_table_up_to_date_through_a_fleet_s_bad_days(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path / "site", senders=2)
    doc = loader_doc()
    doc["loader"]["master"] = "local[2]"
    config = write_config(dep.root / "loader.toml", doc)
    table = dep.root / "warehouse" / "points"
    state = dep.root / "warehouse" / "_state"
    edge_a, edge_b = (s.edge for s in dep.senders)
    dep.start_receiver()
    follower = Follower(config, dep.root)
    try:
        follower.start()
        deadline = time.monotonic() + FRESH * 2  # its session, then its catch-up run
        while not (state / "last_run.json").exists():
            assert follower.proc is not None and follower.proc.poll() is None, follower.said()
            assert time.monotonic() < deadline, follower.said()
            time.sleep(0.2)
        populate(edge_a, groups=1, files=2, prefix="root.a", unsequence=0)
        assert dep.senders[0].send().returncode == 0
        _until_table_holds(dep, table, follower)
        deadline = time.monotonic() + 30  # the run records itself just after its commit
        while json.loads((state / "last_run.json").read_text())["ingested"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        status = subprocess.run(
            [*SEALSYNC, "status", "--json", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        following = json.loads(status.stdout)["following"]
        assert following["pid"] == follower.proc.pid and following["window"] == 0.5
        last = json.loads((state / "last_run.json").read_text())
        assert last["outcome"] == "ok" and 0 <= last["lag_seconds"] < FRESH

        # --full by hand while it follows: one of them waits for the other's lock
        for _ in range(60):
            full = subprocess.run(
                [*SEALSYNC, "load", "--full", "-q", "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if full.returncode != 75:
                break
            time.sleep(1)
        assert full.returncode == 0, full.stderr
        populate(edge_b, groups=1, files=1, prefix="root.b", unsequence=0)
        assert dep.senders[1].send().returncode == 0
        _until_table_holds(dep, table, follower)

        # the receiver restarts; the follower goes on
        dep.stop_receiver()
        dep.start_receiver()
        populate(edge_a, groups=1, files=1, prefix="root.a2", unsequence=0)
        assert dep.senders[0].send().returncode == 0
        _until_table_holds(dep, table, follower)

        # killed with -9 while it commits, then started again: nothing lost, nothing twice
        populate(edge_b, groups=1, files=1, prefix="root.b2", unsequence=0)
        mark = len(follower.said())
        assert dep.senders[1].send().returncode == 0
        deadline = time.monotonic() + FRESH
        while "committing the run" not in follower.said()[mark:]:
            assert time.monotonic() < deadline, follower.said()
            time.sleep(0.05)
        assert follower.stop(signal.SIGKILL) == -signal.SIGKILL
        assert (state / FOLLOW_FILE).exists()  # killed: its file stays, naming a dead pid
        gone = subprocess.run(
            [*SEALSYNC, "status", "--json", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert json.loads(gone.stdout)["following"] is None
        follower.start()
        _until_table_holds(dep, table, follower)

        # a troubled sender (a folder squatting its file's .mods) is held alone
        squatted = next((dep.receiver_data / "sequence").rglob(f"{dep.senders[1].uuid}/*.tsfile"))
        os.mkdir(f"{squatted}.mods")
        populate(edge_a, groups=1, files=1, prefix="root.a3", unsequence=0)
        assert dep.senders[0].send().returncode == 0
        want = _edge_rows(dep)
        start = time.monotonic()
        while _table_rows(table) != want:
            assert time.monotonic() - start < FRESH, follower.said()
            time.sleep(0.5)
        while not json.loads((state / "last_run.json").read_text())["held"]:
            assert time.monotonic() - start < FRESH, follower.said()  # recorded after its commit
            time.sleep(0.2)
        last = json.loads((state / "last_run.json").read_text())
        assert list(last["held"]) == [dep.senders[1].uuid]

        # SIGTERM: the run in progress finishes, then it exits 0 and says so
        assert follower.stop(signal.SIGTERM) == 0
        assert not (state / FOLLOW_FILE).exists()
        assert "stopped after" in follower.said()
    finally:
        if follower.proc is not None and follower.proc.poll() is None:
            follower.proc.kill()
            follower.proc.wait()
        dep.stop_receiver()
