"""sealsync vs ``rsync -a`` over OpenSSH, side by side on this machine.

    .venv/bin/python benchmarks/bench_vs_rsync.py all            # the issue's sizes
    .venv/bin/python benchmarks/bench_vs_rsync.py all --scale 0.1 --reps 3   # a quick run
    .venv/bin/python benchmarks/bench_vs_rsync.py bulk small idle memory startup

Measures (the tools on the same files in the same run, rotating which goes first,
``--reps`` times; medians, the ratio sealsync/rsync and the spread of that ratio over the
repetitions — min–max of the ratios of the runs of one repetition — are printed). bulk
and small run a third tool, ``rsync -a --fsync``, which gives what a sealsync verdict
gives (every file on disk before it counts): the comparison on equal durability. small
runs a fourth, the least work on sealsync's own parts (``bench_small_ceiling.py``:
paramiko, MD5 on both ends, every file and sidecar fsynced, nothing else), to show
how much of the small-file time is sealsync's own per-file work, a fifth, the same
with the two guarantees it leaves out (every format verified in worker processes,
every file logged): the least work that gives a verdict's guarantees; and that on
two connections at once (files in flight on parallel channels), served by one
receiving process as by one receiver plugin, and by a receiving process each. The
fifth's CPU per file (every process on the machine, /proc/stat) says how many files/s
these parts could carry with every CPU busy.

* bulk     16 TsFiles of 64 MiB (1 GiB), MiB/s;
* small    5,000 TsFiles of ~64 KiB, files/s;
* idle     100,000 sealed files already synced, nothing new: seconds per round;
* memory   peak RSS of the sender while it sends one 4 GiB file (and a 1/16 one, to
           show it is flat in file size);
* startup  ``sealsync send`` with nothing to do (empty data dir): wall seconds.

``--scale`` multiplies file counts (bulk, small, idle) and the memory file's size.
sealsync's time is the whole ``sealsync send`` process (start-up, SSH handshake, the
round, and the receiver loading every file into its storage: the round ends when it
has); rsync's is the whole ``rsync`` process, ssh included. rsync writes without
fsync; sealsync fsyncs every file before answering. ``os.sync()`` runs between runs,
outside the timed part.

In bulk and small every baseline runs as a user runs it by hand: ``rsync -a -e ssh``
with OpenSSH's own cipher (and again with sealsync's, ``aes128-gcm``: the cipher
alone moves rsync's rate), into a fresh folder, with no sealsync process on the
machine (``sealsync serve`` is started before each sealsync run and stopped after it).
Each run's output is set aside with its pages dropped from the page cache
(:func:`benchlib.set_aside`): kept pages slow the next run of a tool that writes
without fsync. ``tests/test_bench_rsync.py`` checks the rsync path against a plain
``rsync`` call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_small_ceiling  # noqa: E402
from benchlib import (  # noqa: E402
    CIPHER,
    RECEIVE_CPU,
    SEND_CPU,
    GiB,
    KiB,
    MiB,
    await_freed_inodes,
    disk_free,
    log,
    md5_seconds,
    median,
    populate,
    remove_tree,
    set_aside,
    settle,
    templates,
    timed,
)
from benchprocs import OpenSsh, Sealsync  # noqa: E402

MEASURES = ("bulk", "small", "idle", "memory", "startup")
TWO_SHARED = "least work, every check, 2 streams, one receiver"
TWO = "least work, every check, 2 streams, a receiver each"
RSYNC_GCM = f"rsync -c {CIPHER}"
RSYNC_FSYNC_GCM = f"rsync --fsync -c {CIPHER}"
TARGETS: dict[str, list[tuple[str, str, float]]] = {
    "bulk": [("ratio", ">=", 1.2), ("ratio_fsync", ">=", 1.3)],
    "small": [("ratio", ">=", 1.0), ("ratio_fsync", ">=", 1.5)],
    "idle": [("ratio", "<=", 0.2)],
    "memory": [("sealsync", "<=", 150.0)],
    "startup": [("sealsync", "<", 1.0)],
}
"""Issue 17's targets: bulk and small against plain rsync and, on equal durability,
against ``rsync --fsync``."""
TARGETS_PINNED: dict[str, list[tuple[str, str, float]]] = {
    **TARGETS,
    "bulk": [("ratio", ">=", 1.0)],
    "small": [("ratio", ">=", 1.0), ("receive_cpu_ratio", "<=", 1.0)],
}
"""With each end on a CPU of its own (``--pin``): bulk and small at least rsync's rate,
and the receiving end's CPU per small file at most rsync's receiving end's."""


def scaled(n: float, scale: float, least: int = 1) -> int:
    return max(least, round(n * scale))


def count_files(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.tsfile"))


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir).resolve()
        self.cache = self.work / "templates"
        self.results: dict[str, dict] = {}
        self.ssh: OpenSsh | None = None

    # ------------------------------------------------------------------ helpers

    def fresh(self, name: str) -> Path:
        folder = self.work / name
        remove_tree(folder, self.work)
        folder.mkdir(parents=True)
        return folder

    def alternate(self, reps: int, runs: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
        """Run every tool ``reps`` times, rotating which goes first; seconds of each."""
        times: dict[str, list[float]] = {name: [] for name in runs}
        names = list(runs)
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                settle()
                seconds = runs[name]()
                times[name].append(seconds)
                log(f"  rep {rep + 1}/{reps} {name}: {seconds:.3f} s")
        return times

    def record(
        self,
        measure: str,
        unit: str,
        sealsync: float,
        rsync: float | None,
        higher_is_better: bool = True,
        times: dict[str, list[float]] | None = None,
        **extra: object,
    ) -> None:
        """One measure's medians; with ``times`` (seconds per repetition and tool) also
        each ratio's spread: the min and max of the ratios of the runs of one repetition,
        so a noisy machine shows as a wide range rather than as a confident median."""
        ratio = sealsync / rsync if rsync else None
        row: dict[str, object] = {
            "unit": unit,
            "sealsync": sealsync,
            "rsync": rsync,
            "ratio": ratio,
            **extra,
        }
        if times is not None:
            for tool in times:
                if tool == "sealsync":
                    continue
                # seconds: a rate ratio is the other tool's time over sealsync's
                pairs = [
                    (o / s) if higher_is_better else (s / o)
                    for s, o in zip(times["sealsync"], times[tool], strict=True)
                ]
                row[f"spread_{_key(tool)}"] = [min(pairs), max(pairs)]
        self.results[measure] = row

    def transfer(self, measure: str, count: int, size: int, per_template: int) -> None:
        """bulk and small: ``count`` files of ``size`` bytes, both tools, alternating."""
        root = self.fresh(measure)
        sources = templates(self.cache, size, max(1, min(count, per_template)))
        ss = Sealsync(root / "sealsync").setup()
        try:
            names = populate(ss.edge_data, sources, count)
            total = sum((ss.edge_data / n).stat().st_size for n in names)
            src = ss.edge_data / "sequence"
            dst = root / "rsync-dst" / "sequence"

            trash = root / "trash"

            # CPU seconds of the machine during each run, per tool (warm-ups included),
            # and of each end: (sending, receiving)
            cpu: dict[str, list[float]] = {}
            ends: dict[str, list[tuple[float, float]]] = {}
            pin = self.args.pin
            ssh = self.ssh
            assert ssh is not None

            def run_sealsync() -> float:
                # The receiver runs only for sealsync's own runs: nothing of sealsync
                # is on the machine while another tool is timed.
                ss.forget_sent(trash)
                ss.pin = (SEND_CPU, RECEIVE_CPU) if pin else None
                ss.start()
                try:
                    settle()
                    run = ss.send(expect_files=count)
                finally:
                    ss.stop()
                loaded = ss.loaded_count()
                if loaded != count:
                    raise RuntimeError(f"receiver loaded {loaded} files, expected {count}")
                cpu.setdefault("sealsync", []).append(run.busy)
                ends.setdefault("sealsync", []).append((run.cpu, run.far_cpu))
                return run.seconds

            def rsync_run(name: str, cmd: list[str]) -> Callable[[], float]:
                return rsync_timer(
                    cmd,
                    dst,
                    trash,
                    count,
                    cpu.setdefault(name, []),
                    ends.setdefault(name, []),
                    pin=SEND_CPU if pin else None,
                    far=ssh.cpu,
                )

            def with_fsync(cmd: list[str]) -> list[str]:
                return [cmd[0], "--fsync", *cmd[1:]]

            plain, gcm = ssh.rsync_cmd(src, dst), ssh.rsync_cmd(src, dst, CIPHER)
            runs = {
                "sealsync": run_sealsync,
                # as a user runs it: OpenSSH's own cipher
                "rsync": rsync_run("rsync", plain),
                # the same guarantee as a verdict: every file on disk before it counts
                "rsync --fsync": rsync_run("rsync --fsync", with_fsync(plain)),
                # like for like: sealsync's cipher
                RSYNC_GCM: rsync_run(RSYNC_GCM, gcm),
                RSYNC_FSYNC_GCM: rsync_run(RSYNC_FSYNC_GCM, with_fsync(gcm)),
            }
            if measure == "small":
                files = [ss.edge_data / n for n in names]

                def run_least(
                    name: str, checks: bool, streams: int = 1, shared: bool = False
                ) -> Callable[[], float]:
                    def run() -> float:
                        into = trash / f"least-{time.monotonic_ns()}"
                        trash.mkdir(parents=True, exist_ok=True)
                        transfer = bench_small_ceiling.run(
                            files, into, checks, streams, shared, pin
                        )
                        cpu.setdefault(name, []).append(transfer.busy)
                        ends.setdefault(name, []).append((transfer.send_cpu, transfer.receive_cpu))
                        return transfer.seconds

                    return run

                # the least work on sealsync's own parts (bench_small_ceiling.py): the
                # most any receiver built on them reaches here; with every check, the
                # least work that gives a verdict's every guarantee
                runs["least work"] = run_least("least work", False)
                runs["least work, every check"] = run_least("least work, every check", True)
                # the same on two connections: files in flight on parallel channels,
                # served by one receiving process as by one receiver plugin, and by a
                # process each (no interpreter lock shared)
                for tool, shared in ((TWO_SHARED, True), (TWO, False)):
                    runs[tool] = run_least(tool, True, streams=2, shared=shared)
            await_freed_inodes(self.work)
            log(f"{measure}: {count} files, {total / MiB:.1f} MiB; warm-up")
            for _ in range(self.args.warmup):
                for run in runs.values():
                    run()
            times = self.alternate(self.args.reps, runs)
            # MD5 of the same bytes on each end's CPU, the stream each file's MD5 covers
            streams = [[ss.edge_data / n, ss.edge_data / f"{n}.resource"] for n in names]
            md5 = [
                median([md5_seconds(streams, end) for _ in range(self.args.reps)])
                for end in (SEND_CPU, RECEIVE_CPU)
            ]
        finally:
            ss.stop()
        remove_tree(root, self.work)
        s, r, f = (median(times[t]) for t in ("sealsync", "rsync", "rsync --fsync"))
        g, gf = median(times[RSYNC_GCM]), median(times[RSYNC_FSYNC_GCM])
        amount, unit = (total / MiB, "MiB/s") if measure == "bulk" else (count, "files/s")
        # CPU seconds per file (small) or per MiB (bulk), the measured repetitions only
        per = {t: median(cpu[t][-self.args.reps :]) / amount for t in runs}
        per_end = {
            t: [median([e[i] for e in ends[t][-self.args.reps :]]) / amount for i in (0, 1)]
            for t in runs
        }
        least: dict[str, float] = {}
        if "least work" in times:
            lw, lc = median(times["least work"]), median(times["least work, every check"])
            l2, l2s = median(times[TWO]), median(times[TWO_SHARED])
            cap = (os.cpu_count() or 1) / per["least work, every check"]
            least = {
                "least_work": amount / lw,
                "least_work_vs_fsync": f / lw,
                "least_checked": amount / lc,
                "least_checked_vs_fsync": f / lc,
                "least_checked_2": amount / l2,
                "least_checked_2_vs_fsync": f / l2,
                "least_checked_2_shared": amount / l2s,
                "least_checked_2_shared_vs_fsync": f / l2s,
                # every CPU busy with nothing but the checked least work, per file
                "least_checked_cpu_cap": cap,
                "least_checked_cpu_cap_vs_fsync": cap / (amount / f),
            }
        self.record(
            measure,
            unit,
            amount / s,
            amount / r,
            times=times,
            rsync_fsync=amount / f,
            ratio_fsync=f / s,
            rsync_gcm=amount / g,
            ratio_gcm=g / s,
            rsync_fsync_gcm=amount / gf,
            ratio_fsync_gcm=gf / s,
            **least,
            cpu_per_unit={_key(t): v for t, v in per.items()},
            cpu_per_end={_key(t): v for t, v in per_end.items()},
            md5_per_end=[m / amount for m in md5],
            receive_cpu_ratio=per_end["sealsync"][1] / per_end["rsync"][1],
            pinned=pin,
            files=count,
            mib=total / MiB,
            seconds={t: times[t] for t in runs},
        )

    # ------------------------------------------------------------------ measures

    def bulk(self) -> None:
        self.transfer("bulk", scaled(16, self.args.scale), 64 * MiB, per_template=4)

    def small(self) -> None:
        self.transfer("small", scaled(5000, self.args.scale), 64 * KiB, per_template=25)

    def idle(self) -> None:
        count = scaled(100_000, self.args.scale)
        root = self.fresh("idle")
        sources = templates(self.cache, 4 * KiB, 25)
        with Sealsync(root / "sealsync") as ss:
            log(f"idle: creating {count} sealed files (hard links) and their synced state")
            names = populate(ss.edge_data, sources, count, link=True)
            ss.mark_synced(names)
            src = ss.edge_data / "sequence"
            dst = root / "rsync-dst" / "sequence"
            dst.parent.mkdir(parents=True)
            # A finished ``rsync -a``: same names, sizes, modes and times.
            subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
            rsync_cmd = self.ssh.rsync_cmd(src, dst)

            def run_sealsync() -> float:
                run = ss.send(expect_files=0)
                return run.seconds

            def run_rsync() -> float:
                return timed(rsync_cmd).seconds

            for _ in range(self.args.warmup):
                run_sealsync()
                run_rsync()
            times = self.alternate(self.args.reps, {"sealsync": run_sealsync, "rsync": run_rsync})
        shutil.rmtree(root, ignore_errors=True)
        self.record(
            "idle",
            "s/round",
            median(times["sealsync"]),
            median(times["rsync"]),
            higher_is_better=False,
            times=times,
            files=count,
            seconds=times,
        )

    def memory(self) -> None:
        size = int(4 * GiB * self.args.scale)
        sizes = [max(size // 16, 16 * MiB), size]
        need = 3 * size + 2 * GiB
        if disk_free(self.work) < need:
            sys.exit(f"bench: memory needs {need / GiB:.1f} GiB free in {self.work}")
        root = self.fresh("memory")
        rows = []
        with Sealsync(root / "sealsync") as ss:
            for n in sizes:
                ss.forget_sent()
                shutil.rmtree(ss.edge_data / "sequence", ignore_errors=True)
                src_file = self.cache / f"big-{n}.tsfile"
                if not src_file.exists():
                    started = time.monotonic()
                    log(f"memory: writing a {n / MiB:.0f} MiB TsFile")
                    # In a child process: this one stays small (see benchlib.timed).
                    subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            (
                                "import sys; sys.path.insert(0, sys.argv[1]); "
                                "from pathlib import Path; from benchlib import write_tsfile; "
                                "write_tsfile(Path(sys.argv[2]), int(sys.argv[3]), "
                                "seed=7, text=True)"
                            ),
                            str(Path(__file__).resolve().parent),
                            str(src_file),
                            str(n),
                        ],
                        check=True,
                    )
                    log(f"  written in {time.monotonic() - started:.1f} s")
                populate(ss.edge_data, [src_file], 1, link=True)
                src = ss.edge_data / "sequence"
                dst = root / "rsync-dst" / "sequence"
                settle()
                s_run = ss.send(expect_files=1, poll_rss=True)
                shutil.rmtree(dst.parent, ignore_errors=True)
                dst.parent.mkdir(parents=True)
                settle()
                r_run = timed(self.ssh.rsync_cmd(src, dst), poll_rss=True)
                real = src_file.stat().st_size
                rows.append(
                    {
                        "bytes": real,
                        "sealsync_rss_mb": s_run.max_rss_kib * 1024 / 1e6,
                        "rsync_rss_mb": r_run.max_rss_kib * 1024 / 1e6,
                        "sealsync_s": s_run.seconds,
                        "rsync_s": r_run.seconds,
                    }
                )
                log(
                    f"  {real / MiB:.0f} MiB: sealsync {rows[-1]['sealsync_rss_mb']:.1f} MB "
                    f"in {s_run.seconds:.1f} s, rsync {rows[-1]['rsync_rss_mb']:.1f} MB "
                    f"in {r_run.seconds:.1f} s"
                )
                ss.forget_sent()
                shutil.rmtree(dst.parent, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        if not self.args.keep_data:
            for n in sizes:
                (self.cache / f"big-{n}.tsfile").unlink(missing_ok=True)
        big = rows[-1]
        self.record(
            "memory", "MB peak RSS", big["sealsync_rss_mb"], big["rsync_rss_mb"], sizes=rows
        )

    def startup(self) -> None:
        root = self.fresh("startup")
        with Sealsync(root / "sealsync") as ss:
            ss.send(expect_files=0)  # warm the page cache of the interpreter and libraries
            times = [ss.send(expect_files=0).seconds for _ in range(max(self.args.reps, 5))]
        shutil.rmtree(root, ignore_errors=True)
        self.record("startup", "s", median(times), None, sealsync_s=times)

    # ------------------------------------------------------------------ report

    def table(self) -> str:
        """The results; ``ratio`` is sealsync/rsync (higher is better for rates, lower
        for seconds and memory), with the per-repetition spread beside the median."""
        lines = [
            f"{'measure':<9} {'unit':<12} {'sealsync':>9} {'rsync':>9} {'rsync -f':>9} "
            f"{'vs rsync (spread)':>20} {'vs rsync -f':>20}  {'targets':<28} met",
        ]
        targets = TARGETS_PINNED if self.args.pin else TARGETS
        for measure in MEASURES:
            if measure not in self.results:
                continue
            r = self.results[measure]
            met = all(_meets(r.get(which), op, bound) for which, op, bound in targets[measure])
            target = ", ".join(
                f"{_TARGET_NAMES[which]} {op} {bound:g}" for which, op, bound in targets[measure]
            )
            rsync = f"{r['rsync']:.3g}" if r["rsync"] is not None else "-"
            fsync = f"{r['rsync_fsync']:.3g}" if r.get("rsync_fsync") else "-"
            lines.append(
                f"{measure:<9} {r['unit']:<12} {r['sealsync']:>9.3g} {rsync:>9} {fsync:>9} "
                f"{_ratio(r.get('ratio'), r.get('spread_rsync')):>20} "
                f"{_ratio(r.get('ratio_fsync'), r.get('spread_rsync_fsync')):>20}  "
                f"{target:<28} {'yes' if met else 'NO'}"
            )
            r["met"] = met
        lines.append(
            "rsync -f is rsync -a --fsync: every file fsynced, the guarantee a sealsync "
            "verdict gives (equal durability); plain rsync fsyncs nothing."
        )
        for measure in ("bulk", "small"):
            r = self.results.get(measure, {})
            if "rsync_gcm" in r:
                lines.append(
                    f"{measure}, rsync with sealsync's cipher ({CIPHER}): "
                    f"{r['rsync_gcm']:.3g} {r['unit']}, sealsync at "
                    f"{_ratio(r['ratio_gcm'], r.get(f'spread_{_key(RSYNC_GCM)}'))} of it; "
                    f"with --fsync {r['rsync_fsync_gcm']:.3g}, sealsync at "
                    f"{_ratio(r['ratio_fsync_gcm'], r.get(f'spread_{_key(RSYNC_FSYNC_GCM)}'))}"
                )
        for measure, per_what in (("bulk", "MiB"), ("small", "file")):
            r = self.results.get(measure, {})
            cpu = r.get("cpu_per_unit")
            if isinstance(cpu, dict):
                lines.append(
                    f"{measure}, CPU ms per {per_what}, every process on the machine: "
                    + ", ".join(f"{tool} {v * 1e3:.2f}" for tool, v in cpu.items())
                )
            per_end = r.get("cpu_per_end")
            if isinstance(per_end, dict):
                send, receive = r["md5_per_end"]
                lines.append(
                    f"{measure}, CPU ms per {per_what} at each end, sending / receiving: "
                    + ", ".join(
                        f"{tool} {a * 1e3:.2f} / {b * 1e3:.2f}" for tool, (a, b) in per_end.items()
                    )
                    + f"; MD5 alone {send * 1e3:.2f} / {receive * 1e3:.2f}, sealsync above it "
                    f"{(per_end['sealsync'][0] - send) * 1e3:.2f} / "
                    f"{(per_end['sealsync'][1] - receive) * 1e3:.2f}"
                )
        r = self.results.get("small", {})
        if "least_work" in r:
            for key, tool, what in (
                ("least_work", "least work", "least work on sealsync's parts"),
                ("least_checked", "least work, every check", "the same, format checked, logged"),
                ("least_checked_2_shared", TWO_SHARED, "that on two connections, one receiver"),
                ("least_checked_2", TWO, "that on two connections, a receiver each"),
            ):
                spread = r.get(f"spread_{_key(tool)}")
                lines.append(
                    f"small, {what}: {r[key]:.3g} files/s, {r[f'{key}_vs_fsync']:.2f}x "
                    f"rsync -f; sealsync at {_ratio(r['sealsync'] / r[key], spread)} of it"
                )
            lines.append(
                f"small, the checked least work's CPU per file, every CPU busy: at most "
                f"{r['least_checked_cpu_cap']:.3g} files/s, "
                f"{r['least_checked_cpu_cap_vs_fsync']:.2f}x rsync -f"
            )
        return "\n".join(lines)


_TARGET_NAMES = {
    "ratio": "ratio",
    "ratio_fsync": "ratio_f",
    "sealsync": "sealsync",
    "receive_cpu_ratio": "recv cpu",
}


def _meets(value: object, op: str, bound: float) -> bool:
    if not isinstance(value, float | int):
        return False
    return value >= bound if op == ">=" else value <= bound if op == "<=" else value < bound


def _key(tool: str) -> str:
    """A tool's name as a key: "rsync --fsync" -> "rsync_fsync"."""
    return re.sub(r"\W+", "_", tool.replace("--", ""))


def _ratio(median_ratio: object, spread: object) -> str:
    if not isinstance(median_ratio, float):
        return "-"
    if isinstance(spread, list):
        return f"{median_ratio:.2f} ({spread[0]:.2f}-{spread[1]:.2f})"
    return f"{median_ratio:.2f}"


def rsync_timer(
    cmd: list[str],
    dst: Path,
    trash: Path,
    count: int,
    busy: list[float] | None = None,
    ends: list[tuple[float, float]] | None = None,
    pin: int | None = None,
    far: Callable[[], float] | None = None,
) -> Callable[[], float]:
    """One timed rsync run per call, as a user runs it: into a fresh ``dst`` (the last
    run's output set aside, its pages dropped), dirty pages written back first; the
    machine's CPU seconds of each run are appended to ``busy``, and those of each end
    to ``ends``: rsync and its ``ssh`` (on CPU ``pin``, if given), and what ``far``
    counts (``OpenSsh.cpu``: ``sshd`` and the rsync it runs).

    ``tests/test_bench_rsync.py`` checks this path's rate against a plain ``rsync``
    call's, so that the baseline every ratio rests on cannot drift from what a user
    measures by hand.
    """

    def run() -> float:
        set_aside(dst.parent, trash)
        dst.parent.mkdir(parents=True)
        settle()
        done = timed(cmd, check=False, pin=pin, far=far)
        if done.returncode != 0 or count_files(dst) != count:
            raise RuntimeError(f"rsync did not copy every file: {done.stderr[-500:]}")
        if busy is not None:
            busy.append(done.busy)
        if ends is not None:
            ends.append((done.cpu, done.far_cpu))
        return done.seconds

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "measures",
        nargs="*",
        default=["all"],
        choices=[*MEASURES, "all"],
        metavar="MEASURE",
        help=f"any of {', '.join(MEASURES)}, or all (default)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply file counts and the memory file size (default 1)",
    )
    parser.add_argument("--reps", type=int, default=5, help="repetitions per tool (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (default 1)")
    parser.add_argument(
        "--workdir",
        default="/tmp/sealsync-bench",
        help="scratch folder, same file system for both tools",
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the generated template files for the next run",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help=(
            f"run each end of each tool on a CPU of its own: the sending end on CPU {SEND_CPU}, "
            f"the receiving end on CPU {RECEIVE_CPU}"
        ),
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    measures = (
        MEASURES if "all" in args.measures else tuple(m for m in MEASURES if m in args.measures)
    )

    from benchlib import compile_bytecode, ensure_tools

    ensure_tools()
    compile_bytecode()
    bench = Bench(args)
    bench.work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    started = time.monotonic()
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        parser.error("--pin needs two CPUs, one for each end")
    with OpenSsh(bench.work / "sshd", pin=RECEIVE_CPU if args.pin else None) as ssh:
        bench.ssh = ssh
        try:
            for measure in measures:
                t0 = time.monotonic()
                getattr(bench, measure)()
                log(f"{measure} done in {time.monotonic() - t0:.0f} s")
        finally:
            if not args.keep_data:
                shutil.rmtree(bench.cache, ignore_errors=True)
    elapsed = time.monotonic() - started
    load_after = os.getloadavg()
    print(
        "\nsealsync vs rsync -a over OpenSSH (its default cipher), "
        f"scale {args.scale:g}, {args.reps} reps, medians; {os.cpu_count()} CPUs"
        f"{', each end on a CPU of its own' if args.pin else ''}; "
        f"run took {elapsed / 60:.1f} min; load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after (other processes share these CPUs)"
    )
    print(bench.table())
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "seconds": elapsed,
                    "load": [load_before, load_after],
                    "results": bench.results,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
