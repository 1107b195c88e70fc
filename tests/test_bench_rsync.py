"""The rsync baseline of ``benchmarks/bench_vs_rsync.py`` runs as fast as a plain
``rsync -a -e ssh`` call on the same files: every ratio the benchmark prints rests on
that baseline, so the instrument must not make it slower than a user sees by hand.

The check is one-sided on purpose. A baseline slowed by the instrument would flatter
every ratio; one that runs faster than by hand (each of its runs copies every file, which
the benchmark checks) only makes the ratios harder to reach. Two copies of the same
rsync call on a shared disk differ by more than the tolerance from run to run, in both
directions, so a two-sided check would test the machine's noise, not the instrument."""

from __future__ import annotations

import os
import pwd
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # OpenSSH's sshd and rsync as processes

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_vs_rsync  # noqa: E402
from benchlib import RECEIVE_CPU, SEND_CPU, MiB, ensure_tools, populate, templates  # noqa: E402
from benchprocs import OpenSsh  # noqa: E402

FILES = 16
SIZE = 16 * MiB
REPS = 7
TOLERANCE = 0.15


@pytest.mark.parametrize("pin", [False, True], ids=["as-is", "ends-pinned"])
def test_the_benchmarks_rsync_rate_agrees_with_a_plain_rsync_call(
    tmp_path: Path, pin: bool
) -> None:
    # pinned (``--pin``): by hand, ``sshd`` started with ``taskset -c 1`` and rsync run
    # with ``taskset -c 0``; the benchmark also reads each end's CPU around its runs
    ensure_tools()
    populate(tmp_path / "edge", templates(tmp_path / "templates", SIZE, 4), FILES)
    src = tmp_path / "edge" / "sequence"
    user = pwd.getpwuid(os.getuid()).pw_name
    with OpenSsh(tmp_path / "sshd", pin=RECEIVE_CPU if pin else None) as ssh:
        dst = tmp_path / "bench-dst" / "sequence"
        ends: list[tuple[float, float]] = []
        bench = bench_vs_rsync.rsync_timer(
            ssh.rsync_cmd(src, dst),
            dst,
            tmp_path / "trash",
            FILES,
            ends=ends,
            pin=SEND_CPU if pin else None,
            far=ssh.cpu,
        )

        def plain() -> float:
            # by hand: remove the last copy, sync, time one rsync into a fresh folder
            out = tmp_path / "plain-dst"
            shutil.rmtree(out, ignore_errors=True)
            os.sync()
            started = time.perf_counter()
            subprocess.run(
                [
                    *(["taskset", "-c", str(SEND_CPU)] if pin else []),
                    "rsync",
                    "-a",
                    "-e",
                    ssh.ssh_command(),
                    f"{src}/",
                    f"{user}@127.0.0.1:{out}/",
                ],
                check=True,
                capture_output=True,
            )
            seconds = time.perf_counter() - started
            assert len(list(out.rglob("*.tsfile"))) == FILES
            return seconds

        times: dict[str, list[float]] = {"benchmark": [], "plain": []}
        runs: dict[str, Callable[[], float]] = {"benchmark": bench, "plain": plain}
        for run in runs.values():  # one unmeasured run each
            run()
        for rep in range(REPS):
            for name in list(runs)[rep % 2 :] + list(runs)[: rep % 2]:
                times[name].append(runs[name]())

    bench_rate, plain_rate = (FILES * SIZE / MiB / statistics.median(times[n]) for n in runs)
    assert bench_rate >= plain_rate * (1 - TOLERANCE), (
        f"the benchmark's rsync runs at {bench_rate:.0f} MiB/s, slower than a plain rsync call at "
        f"{plain_rate:.0f} MiB/s on the same files (seconds: {times})"
    )
    # each end's CPU was counted: rsync and its ssh, sshd and the rsync it ran
    assert all(sending > 0 and receiving > 0 for sending, receiving in ends)
