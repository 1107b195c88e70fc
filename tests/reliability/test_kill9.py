"""Real ``kill -9`` at random moments of real rounds (issue 7 item 1).

``sealsync serve`` and ``sealsync send`` run as processes. Sender A has a few hundred
small sealed files (Parquet and TsFile) over two data dirs; before each round some
are deleted and new ones written. While the round runs, after a random delay, the
sender or the receiver is SIGKILLed; the receiver is restarted, ``send`` rerun (a
bounded number of times) until it exits 0, and then:

* the receiver holds exactly A's sealed set, by content hash (nothing missing,
  nothing duplicated or left over from a deleted file);
* sender B's files, shipped once at the start, are untouched;
* no round state is left on either side;
* at the end, no process the killed receivers started (inspect workers, fork server,
  resource tracker) is still alive.

The RNG is seeded; the seed is printed and attached to any failure, and
``SEALSYNC_KILL9_SEED`` replays a run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, Sender, make_deployment
from proc_helpers import alive, stat_fields, state
from reliability.crash_site import RERUNS, clean_env
from reliability.figures import record

from sealsync.crashpoints import ENV_STOP, ENV_TRACE
from sealsync.simulator import EdgeInstance

pytestmark = pytest.mark.slow  # sealsync serve and send as processes

FILES = 300
KILLS = 10
MAX_ATTEMPTS = 16
TIME_BUDGET = 75.0
"""Seconds after which no new kill round starts (each round takes a few seconds)."""
MIN_KILLS = 6
MIN_MID_ROUND = 2
"""Kills that must land between the snapshot and ``sync end`` (the rest land before
connecting, in recovery, or after the transfer, which count as well)."""
DELAY = (0.05, 1.6)
"""Seconds from starting ``send`` to the kill: before, during and after connecting."""
FROZEN_EVERY = 2
"""Every second round is killed while the sender is frozen (``SEALSYNC_STOP_AT``) at a
random new file, so that enough kills land mid-round however fast rounds are today."""
FREEZE_POINTS = ("sender.snapshot.linked", "sender.file.sent")
"""Points reached once per new file, at which a round may be frozen."""
GROUPS = 6


class Edge:
    """Sender A's data: new files and deletions drawn from the seeded RNG."""

    def __init__(self, edge: EdgeInstance, rng: random.Random) -> None:
        self.edge = edge
        self.rng = rng
        self.clock = 0

    def add(self, count: int) -> None:
        rng = self.rng
        for _ in range(count):
            self.clock += 1
            group = f"root.k{rng.randrange(GROUPS)}"
            self.edge.write_file(
                group,
                rng.randrange(2),
                devices=[f"{group}.d{d}" for d in range(rng.randrange(1, 3))],
                rows_per_device=rng.randrange(5, 40),
                start_ms=self.clock * 60_000,
                unsequence=rng.random() < 0.2,
                fmt="tsfile" if rng.random() < 0.15 else "parquet",
                data_dir=rng.randrange(len(self.edge.data_dirs)),
            )

    def delete(self, count: int) -> None:
        sealed = [
            (i, rel) for i in range(len(self.edge.data_dirs)) for rel in self.edge.sealed_files(i)
        ]
        for i, rel in self.rng.sample(sealed, min(count, len(sealed))):
            self.edge.delete(rel, i)


def _wait_frozen(proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Until the process has stopped itself at its freeze point, or exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if state(proc.pid) == "T":
            return
        time.sleep(0.005)


def _phase(trace: Path) -> str:
    """Where the sender was when the kill came: its latest round's crash-point trace
    (one ``send`` may run a round per data dir)."""
    phase = "before the transfer"
    for point in trace.read_text().split() if trace.exists() else ():
        if point in ("sender.snapshot.linked", "sender.synclog.start"):
            phase = "mid-round"
        elif point == "sender.synclog.end":
            phase = "after the transfer"
    return phase


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc), deepest last."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        fields = stat_fields(int(entry.name)) if entry.name.isdigit() else None
        if fields:
            parents[int(entry.name)] = int(fields[1])
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        kids = [p for p, parent in parents.items() if parent == here]
        found.extend(kids)
        todo.extend(kids)
    return found


def _converge(sender: Sender) -> int:
    for run in range(1, RERUNS + 1):
        result = sender.send(env=clean_env())
        if result.returncode == 0:
            return run
        assert result.returncode == 1, (result.returncode, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        time.sleep(0.3)
    raise AssertionError(f"no convergence after {RERUNS} runs: {result.stderr}")


def _check(dep: Deployment, a: Sender, b: Sender, b_hashes: dict[str, str]) -> int:
    """Assert the end-to-end equalities; returns how many of A's files were lost."""
    loaded, sealed = dep.loaded_hashes(a), a.sealed_hashes()
    lost = len([n for n in sealed if loaded.get(n) != sealed[n]])
    missing = sorted(set(sealed) - set(loaded))
    extra = sorted(set(loaded) - set(sealed))
    assert loaded == sealed, f"missing {missing[:5]}, extra {extra[:5]}, lost {lost}"
    assert dep.loaded_hashes(b) == b.sealed_hashes() == b_hashes
    left = dep.round_state_left()
    assert left == [], left
    return lost


def test_kill9_at_random_moments_converges(tmp_path: Path) -> None:
    seed = int(os.environ.get("SEALSYNC_KILL9_SEED") or random.randrange(2**32))
    print(f"kill -9 seed: {seed} (replay with SEALSYNC_KILL9_SEED={seed})")
    try:
        _run(tmp_path, seed)
    except AssertionError as exc:
        exc.add_note(f"kill -9 seed: {seed} (replay with SEALSYNC_KILL9_SEED={seed})")
        raise


def _run(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    dep = make_deployment(tmp_path / "site", senders=2, data_dirs=2)
    a, b = dep.senders
    edge = Edge(a.edge, rng)
    edge.add(FILES)
    for i in range(12):  # B: its own devices, some in A's group folders
        b.edge.write_file(
            f"root.k{i % GROUPS}",
            0,
            devices=[f"root.b.d{i}"],
            rows_per_device=9,
            start_ms=i * 60_000,
            data_dir=i % 2,
        )
    dep.start_receiver(env=clean_env())
    orphans: list[int] = []
    started = time.monotonic()
    try:
        assert b.send(env=clean_env()).returncode == 0
        b_hashes = b.sealed_hashes()
        kills = attempts = mid_round = 0
        while (
            kills < KILLS and attempts < MAX_ATTEMPTS and time.monotonic() - started < TIME_BUDGET
        ):
            attempts += 1
            if attempts > 1:  # the first round ships all FILES
                edge.delete(rng.randrange(10, 40))
                edge.add(rng.randrange(20, 60))
            side = rng.choice(("sender", "receiver"))
            trace = tmp_path / f"send-{attempts}.trace"
            env = clean_env() | {ENV_TRACE: str(trace)}
            frozen = attempts % FROZEN_EVERY == 0
            if frozen:  # at the nth new file of this round: 20 or more (FILES at first)
                point = f"{rng.choice(FREEZE_POINTS)}:{rng.randint(1, 20)}"
                env[ENV_STOP] = point
                moment = f"frozen at {point}"
            else:
                delay = rng.uniform(*DELAY)
                moment = f"after {delay:.2f} s"
            proc = subprocess.Popen(
                [*SEALSYNC, "send", "--config", str(a.config)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=env,
                text=True,
            )
            if frozen:
                _wait_frozen(proc)
            else:
                time.sleep(delay)
            phase = _phase(trace)
            if side == "sender":
                proc.send_signal(signal.SIGKILL)
                _, stderr = proc.communicate(timeout=60)
                killed = proc.returncode == -9  # else the round was over before the kill
                assert killed or proc.returncode == 0, (proc.returncode, stderr)
            else:
                assert dep.proc is not None
                orphans.extend(_children(dep.proc.pid))
                assert dep.stop_receiver(signal.SIGKILL) == -9
                killed = True
                dep.start_receiver(env=clean_env())
                proc.send_signal(signal.SIGCONT)  # no-op unless frozen
                _, stderr = proc.communicate(timeout=120)  # may ride through the restart
                assert proc.returncode in (0, 1), (proc.returncode, stderr)
                assert "Traceback" not in stderr, stderr
            runs = _converge(a)
            lost = _check(dep, a, b, b_hashes)
            if killed:
                kills += 1
                mid_round += phase == "mid-round"
                print(f"kill {kills}: {side} {moment}, {phase}, {runs} rerun(s)")
                record(
                    "kill -9",
                    kills=1,
                    converged=1,
                    lost=lost,
                    reruns=runs,
                    side=side,
                    mid_round=int(phase == "mid-round"),
                    moment=moment,
                    files=len(a.sealed_hashes()),
                )
        assert kills >= MIN_KILLS, f"only {kills} kills landed in {attempts} rounds"
        assert mid_round >= MIN_MID_ROUND, f"only {mid_round} of {kills} kills were mid-round"
    finally:
        dep.stop_receiver()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in orphans):
        time.sleep(0.1)
    left = [p for p in orphans if alive(p)]
    for pid in left:  # do not leak them into the rest of the run
        os.kill(pid, signal.SIGKILL)
    assert left == [], "processes of killed receivers still alive"
