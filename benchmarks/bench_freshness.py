"""How fresh the table is: from the end of a sender's round to its rows being readable
in the Delta table, with a warm following loader (``sealsync load --follow``), against
the one-shot ``sealsync load`` a timer would run after the same round.

Real parts: ``sealsync serve``, ``sealsync send`` rounds of a few new TsFiles each (the
simulator's, as IoTDB 2.0 writes them), a real ``sealsync load --follow`` process with
its own Spark session, and a reader that polls the table through its Delta log
(``spark_loader.read_arrow``, what every Delta reader sees) until the round's rows are
there. Each measurement starts when ``send`` returns (the round is loaded on the
receiver) and ends when a read of the table's latest version holds all of that
round's rows.

    .venv/bin/python benchmarks/bench_freshness.py [--rounds 20] [--files 2] [--window 1]

Prints each round's freshness, the median and p95, the follower's own recorded lag,
and the one-shot baseline: the time of a ``sealsync load`` process started right after
a round (its JVM, Spark and jars from the cache, as cron or a timer would start it),
where its time went step by step, and the floor under it: Spark's own start (a new
process starting a session with the same jars, one trivial job, its stop).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import SEALSYNC, log  # noqa: E402
from benchprocs import Sealsync  # noqa: E402

from sealsync.simulator import DEFAULT_STEP_MS, EdgeInstance  # noqa: E402
from spark_loader import read_arrow  # noqa: E402

TARGET_P95 = 10.0
TARGET_ONESHOT = 15.0


def _table_count(table: Path) -> collections.Counter[str]:
    if not (table / "_delta_log").is_dir():
        return collections.Counter()
    data = read_arrow(table)
    if "device" not in data.column_names:  # a version with no data file yet
        return collections.Counter()
    return collections.Counter(data.column("device").to_pylist())


def _round(edge: EdgeInstance, n: int, files: int) -> collections.Counter[str]:
    """Write ``files`` new sealed TsFiles of a device of their own, apart in time (files
    that overlap would be resolved to fewer rows); their rows by device."""
    device, rows = f"root.fresh.r{n}", 100
    for f in range(files):
        start = f * rows * DEFAULT_STEP_MS
        edge.write_file("root.fresh", 0, devices=[device], rows_per_device=rows, start_ms=start)
    return collections.Counter({device: rows * files})


def _wait_for(table: Path, want: collections.Counter[str], timeout: float) -> float:
    start = time.monotonic()
    while True:
        have = _table_count(table)
        if all(have[d] >= c for d, c in want.items()):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"rows not in the table after {timeout} s")
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--oneshot", type=int, default=3, help="one-shot loads to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fresh-") as tmp, Sealsync(Path(tmp)) as ss:
        edge = EdgeInstance(ss.edge_data.parent)
        table, state = Path(tmp) / "table", Path(tmp) / "state"
        loader = Path(tmp) / "loader.toml"
        loader.write_text(
            f'[loader]\nreceiver_data_dirs = ["{ss.recv_data}"]\ntable_path = "{table}"\n'
            f'state_dir = "{state}"\nmaster = "local[2]"\n'
        )
        loader.chmod(0o600)
        err = open(Path(tmp) / "follow.err", "w")  # noqa: SIM115 - lives with the process
        follower = subprocess.Popen(
            [*SEALSYNC, "load", "--follow", "--window", str(args.window), "--config", str(loader)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        try:
            _round(edge, -1, 1)  # warm it: the first run starts the Python workers
            ss.send()
            _wait_for(table, collections.Counter({"root.fresh.r-1": 100}), 300)
            fresh, lags = [], []
            for n in range(args.rounds):
                want = _round(edge, n, args.files)
                ss.send()
                fresh.append(_wait_for(table, want, 120))
                lag = json.loads((state / "last_run.json").read_text()).get("lag_seconds")
                if isinstance(lag, int | float):
                    lags.append(lag)
                log(f"round {n}: rows readable {fresh[-1]:.2f} s after the round")
                time.sleep(0.5)
        finally:
            follower.send_signal(signal.SIGTERM)
            follower.wait(300)
            err.close()
        oneshot: list[float] = []
        steps: list[str] = []
        for n in range(args.oneshot):
            want = _round(edge, 1000 + n, args.files)
            ss.send()
            took, steps = _one_shot(loader)
            oneshot.append(took)
            _wait_for(table, want, 5)
        spark_start = [_spark_start() for _ in range(args.oneshot)]
    p95 = statistics.quantiles(fresh, n=20)[-1] if len(fresh) >= 2 else fresh[0]
    load = os.getloadavg()
    print(f"machine load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (2 CPUs)")
    print(
        f"following loader, window {args.window:g} s, {args.rounds} rounds of {args.files} "
        f"files: freshness median {statistics.median(fresh):.2f} s, p95 {p95:.2f} s "
        f"(target <= {TARGET_P95:g} s: {'met' if p95 <= TARGET_P95 else 'NOT met'})"
    )
    if lags:
        median_lag = statistics.median(lags)
        print(f"  its recorded lag (receiver's load to commit): median {median_lag:.2f} s")
    print(
        f"one-shot sealsync load after a round (a timer's run): median "
        f"{statistics.median(oneshot):.2f} s, range {min(oneshot):.2f}-{max(oneshot):.2f} s; "
        f"follower/one-shot {statistics.median(fresh) / statistics.median(oneshot):.2f}"
    )
    print(
        f"Spark's own start (a session with the loader's jars, one trivial job, its stop): "
        f"median {statistics.median(spark_start):.2f} s; the one-shot load's rest "
        f"{statistics.median(oneshot) - statistics.median(spark_start):.2f} s "
        f"(target for the whole load <= {TARGET_ONESHOT:g} s: "
        f"{'met' if statistics.median(oneshot) <= TARGET_ONESHOT else 'NOT met'})"
    )
    print("where the last one-shot load went (from each of its steps to the next):")
    print("\n".join(steps))
    return 0 if p95 <= TARGET_P95 else 1


def _one_shot(loader: Path) -> tuple[float, list[str]]:
    """A ``sealsync load`` process, as a timer starts it: its time, and the time from
    each of its progress lines (``-v``) to the next."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [*SEALSYNC, "load", "-v", "--config", str(loader)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    marks = [(start, "process start")]
    for line in proc.stderr:
        if line.startswith("load: ") and ": stage " not in line:
            marks.append((time.monotonic(), line.strip()))
    if proc.wait(600) != 0:
        raise RuntimeError(f"sealsync load exited {proc.returncode}")
    end = time.monotonic()
    marks.append((end, "exit"))
    pairs = zip(marks, marks[1:], strict=False)
    steps = [f"  {b - a:6.2f}s  {what}" for (a, what), (b, _) in pairs]
    return end - start, steps


SPARK_START = """
import sys, time
from pathlib import Path
from spark_loader.spark_session import create_session
start = time.monotonic()
spark = create_session("local[2]", Path(sys.argv[1]))
spark.range(10).count()
spark.stop()
print(time.monotonic() - start)
"""


def _spark_start() -> float:
    """Spark's own start, the floor of a one-shot load: a new process starting a
    session as the loader does (its jars from the same cache), one trivial job, stop."""
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as logs:
        start = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", SPARK_START, logs],
            check=True,
            capture_output=True,
            cwd=ROOT,
            timeout=600,
        )
        return time.monotonic() - start


if __name__ == "__main__":
    raise SystemExit(main())
