"""Benchmark: two senders at once into one receiver, against one sender alone.

Issue 17's small-file target is reached by the least work on sealsync's parts only
when the files are spread over connections *and* over receiving processes
(``bench_small_ceiling.py --streams 2``): into one receiving process a second
connection buys little. This measures the same for sealsync itself: one ``sealsync
serve``, and rounds that alternate between one sender shipping ``--files`` small
TsFiles and two senders (their own keys, sender UUIDs and devices) shipping as many
each at the same time. If the receiver's process is the limit, the two together move
about what one moves alone.

With ``--receivers 2`` the second sender has a ``sealsync serve`` of its own: the two
pairs share only the machine. That is what a receiving process per sender could give
at most with sealsync's per-file CPU as it is, the receiving work spread over
processes at no cost.

    .venv/bin/python benchmarks/bench_two_senders.py [--files 3000] [--reps 5] [--receivers 1]

Each round's rate is every file loaded over the wall time from the first ``sealsync
send`` started to the last one ended; the round is checked (each sender's report, and
the files in the receiver's storage).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (  # noqa: E402
    GROUP,
    SEALSYNC,
    KiB,
    at_least_one,
    compile_bytecode,
    exit_status,
    populate,
    set_aside,
    settle,
    templates,
)
from benchprocs import Sealsync  # noqa: E402

from sealsync.keys import generate_keypair  # noqa: E402


def second_sender(ss: Sealsync) -> tuple[Path, Path]:
    """A second edge instance beside ``ss``'s, with a key of its own that the receiver
    trusts (a key acts as one sender UUID only): its config and its data dir."""
    keys = ss.root / "keys"
    generate_keypair(keys / "edge2", comment="bench-edge2")
    with open(keys / "authorized_keys", "a") as f:
        f.write((keys / "edge2.pub").read_text())
    data, schema = ss.root / "edge2" / "data", ss.root / "edge2" / "schema"
    data.mkdir(parents=True)
    schema.mkdir(parents=True)
    config = ss.root / "sender2.toml"
    config.write_text(ss.sender_toml(data, schema, "edge2"))
    return config, data


def rounds(
    files: int, reps: int, work: Path, receivers: int = 1
) -> tuple[list[float], list[float]]:
    """files/s of one sender alone and of two at once, ``reps`` rounds each, alternating."""
    root = work / "two-senders"
    shutil.rmtree(root, ignore_errors=True)
    try:
        return _measure(root, work, files, reps, receivers)
    finally:  # a Ctrl-C too
        shutil.rmtree(root, ignore_errors=True)


def _measure(
    root: Path, work: Path, files: int, reps: int, receivers: int
) -> tuple[list[float], list[float]]:
    alone: list[float] = []
    together: list[float] = []
    with contextlib.ExitStack() as stack:
        ss = stack.enter_context(Sealsync(root))
        if receivers == 1:
            config2, data2 = second_sender(ss)
            pairs = [ss]  # the receivers
        else:  # the second sender's own receiver
            ss2 = stack.enter_context(Sealsync(root / "second"))
            config2, data2 = ss2.sender_config, ss2.edge_data
            pairs = [ss, ss2]
        populate(ss.edge_data, templates(work / "templates", 64 * KiB, 25), files)
        # other devices: a device's data comes from one sender only
        populate(data2, templates(work / "templates", 64 * KiB, 25, f"{GROUP}.e0"), files)
        configs = [ss.sender_config, config2]

        def round_of(senders: list[Path]) -> float:
            for receiver in pairs:
                receiver.forget_sent(root / "trash")
            set_aside(data2 / "sync-sender", root / "trash")
            settle()
            started = time.perf_counter()
            procs = [
                subprocess.Popen(
                    [*SEALSYNC, "-q", "send", "--config", str(c)], stdout=subprocess.DEVNULL
                )
                for c in senders
            ]
            try:
                codes = [p.wait() for p in procs]
            finally:  # a Ctrl-C here: the senders stop (as they would at the terminal) first
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGINT)
                        p.wait()
            took = time.perf_counter() - started
            loaded = sum(receiver.loaded_count() for receiver in pairs)
            if codes != [0] * len(senders) or loaded != files * len(senders):
                raise RuntimeError(f"senders exited {codes}, {loaded} files loaded")
            return files * len(senders) / took

        round_of(configs)  # warms the receiver up, unmeasured
        for rep in range(reps):
            pair = [
                lambda: alone.append(round_of(configs[:1])),
                lambda: together.append(round_of(configs)),
            ]
            for measure in pair if rep % 2 == 0 else pair[::-1]:
                measure()
            print(
                f"rep {rep + 1}: one sender {alone[-1]:,.0f} files/s, two at once "
                f"{together[-1]:,.0f} files/s together",
                flush=True,
            )
    return alone, together


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--files", type=at_least_one, default=3000, help="per sender (default 3000)"
    )
    parser.add_argument("--reps", type=at_least_one, default=5)
    parser.add_argument(
        "--receivers",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: both senders into one sealsync serve (default); 2: a serve each",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sealsync-bench"))
    args = parser.parse_args()
    compile_bytecode()
    return exit_status("bench_two_senders", lambda: report(args))


def report(args: argparse.Namespace) -> int:
    alone, together = rounds(args.files, args.reps, args.workdir.resolve(), args.receivers)
    ratios = [t / a for a, t in zip(alone, together, strict=True)]
    into = "one receiver" if args.receivers == 1 else "a receiver each"
    one, two = statistics.median(alone), statistics.median(together)
    print(
        f"{args.files} TsFiles of ~64 KiB per sender, {into}, {args.reps} reps, medians: "
        f"one sender {one:,.0f} files/s, two at once {two:,.0f} files/s together: "
        f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
        f"on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
