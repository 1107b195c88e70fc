"""Benchmark: what per-file durability costs on this machine's file system.

sealsync answers *verified* only once a file and its folder are fsynced; rsync does
not fsync at all. This script writes the same ``--files`` files of ``--size`` bytes
in one run, alternating, several repetitions, three ways:

* ``none``:   create, write, close (rsync's default);
* ``fsync``:  the same plus ``fsync`` of every file and of the folder every 32 files
  (what the receiver does for each data file, before its verdict);
* ``fsync8``: the same fsyncs as ``fsync``, but each batch of 32 issued together
  from 8 threads, as the receiver's commit pipeline issues them (``incoming.stage_all``);
* ``syncfs``: the same files, then one ``syncfs`` per 32 (a group commit of the
  whole batch: the same data reaches the disk, in one call).

and prints files/s (median) and the ratio of each to ``none``. The ``fsync8`` rate is
an upper bound on how many files per second any tool that makes each file durable
before answering can accept here, whatever its language (``fsync``, one at a time,
is what ``rsync --fsync`` does).

    .venv/bin/python benchmarks/bench_fsync.py [--files 3000] [--size 65536] [--reps 5]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sealsync import durable  # noqa: E402

BATCH = 32
THREADS = 8
_LIBC = ctypes.CDLL(None, use_errno=True)


def write_files(folder: Path, files: int, data: bytes, mode: str) -> float:
    """Seconds to write ``files`` files into ``folder`` (new) the ``mode`` way."""
    folder.mkdir()
    batch: list[int] = []
    pool = ThreadPoolExecutor(THREADS) if mode == "fsync8" else None
    started = time.perf_counter()
    for i in range(files):
        fd = os.open(folder / f"f{i:06d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        if mode == "fsync":
            os.fsync(fd)
        batch.append(fd)
        if len(batch) == BATCH or i == files - 1:
            if mode == "syncfs" and _LIBC.syncfs(batch[0]) != 0:
                raise OSError(ctypes.get_errno(), "syncfs failed")
            if pool is not None:
                list(pool.map(os.fsync, batch))
            for f in batch:
                os.close(f)
            batch.clear()
            if mode in ("fsync", "fsync8"):
                durable.fsync_dir(folder)
    took = time.perf_counter() - started
    if pool is not None:
        pool.shutdown()
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--size", type=int, default=64 * 1024)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="a folder on the file system to measure (default: a temp dir)",
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="sealsync-fsync-", dir=args.workdir))
    trash = root / "trash"  # moved aside, deleted at the end: deleting between runs
    trash.mkdir()  # makes the next file creations pay for freed inodes
    data = os.urandom(args.size)
    modes = ["none", "fsync", "fsync8", "syncfs"]
    times: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for rep in range(args.reps + 1):  # the first round warms up, unmeasured
            order = modes if rep % 2 == 0 else modes[::-1]
            for mode in order:
                os.sync()
                folder = root / f"{mode}-{rep}"
                took = write_files(folder, args.files, data, mode)
                os.rename(folder, trash / folder.name)
                if rep:
                    times[mode].append(took)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    base = args.files / statistics.median(times["none"])
    print(f"{args.files} files of {args.size} bytes, {args.reps} reps, medians")
    for mode in modes:
        rate = args.files / statistics.median(times[mode])
        print(f"{mode:7s} {rate:9,.0f} files/s   ratio to none {rate / base:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
