"""Benchmark: the tree-model TsFile reader, column-wise against the row-wise path it replaced.

Writes ``--files`` tree-model TsFiles of ``--rows`` rows each (the rows of
``bench_loader.py``: 10 devices, a double, an int64, a float and a boolean
measurement), pins itself to one CPU, then reads every file to Arrow both ways,
``--repeat`` times, alternating which goes first:

* column-wise: ``formats.tsfile.to_arrow`` (prepared series -> Arrow, merged on time);
* row-wise: ``query_timeseries`` -> ``read_data_frame`` -> pandas -> Arrow, the
  reference the tests compare against.

It checks once that both give the same table, then prints rows/s of each (median and
range of the repetitions), the ratio, and the load average before and after, since a
shared machine moves these figures.

    .venv/bin/python benchmarks/bench_tsfile_read.py [--files 20] [--rows 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_loader import make_table  # noqa: E402

from sealsync.formats import tsfile as tsfile_format  # noqa: E402


def rowwise(path: Path) -> pa.Table:
    """``to_arrow`` as it was: every device through ``query_timeseries``."""
    return tsfile_format._native(
        path,
        "reading data",
        lambda r: tsfile_format._assemble(list(tsfile_format._tree_batches_rowwise(r)), False),
    )


def columnwise(path: Path) -> pa.Table:
    return tsfile_format.to_arrow(path)


def generate(folder: Path, files: int, rows: int) -> list[Path]:
    rng = np.random.default_rng(7)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = folder / f"{1_700_000_000_000 + i}-{i}-0.tsfile"
        tsfile_format.write_arrow(path, make_table(rng, i, rows))
        paths.append(path)
    return paths


def read_all(read: Callable[[Path], pa.Table], paths: list[Path]) -> tuple[float, int]:
    t = time.perf_counter()
    rows = sum(read(p).num_rows for p in paths)
    return time.perf_counter() - t, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per file")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the last)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    work = args.workdir or Path(tempfile.mkdtemp(prefix="sealsync-bench-read-"))
    t0 = time.monotonic()
    paths = generate(work / "tree", args.files, args.rows)
    size_mb = sum(p.stat().st_size for p in paths) / 1e6
    print(
        f"generated {len(paths)} tree-model TsFiles x {args.rows} rows, {size_mb:.0f} MB, "
        f"in {time.monotonic() - t0:.1f}s; reading on CPU {cpu}"
    )
    if not columnwise(paths[0]).equals(rowwise(paths[0])):
        raise SystemExit("the two readers disagree on " + str(paths[0]))

    load_before = os.getloadavg()
    rates: dict[str, list[float]] = {"column-wise": [], "row-wise": []}
    readers = {"column-wise": columnwise, "row-wise": rowwise}
    for i in range(args.repeat):
        order = list(readers) if i % 2 == 0 else list(reversed(readers))
        line = []
        for name in order:
            took, rows = read_all(readers[name], paths)
            rates[name].append(rows / took)
            line.append(f"{name} {took:.2f}s")
        print(f"run {i + 1}: " + ", ".join(line) + f" ({rows} rows)")
    load_after = os.getloadavg()

    for name, got in rates.items():
        print(
            f"{name + ':':13} {statistics.median(got):>12,.0f} rows/s "
            f"(median of {len(got)}; {min(got):,.0f}-{max(got):,.0f})"
        )
    ratio = statistics.median(rates["column-wise"]) / statistics.median(rates["row-wise"])
    print(f"ratio column-wise/row-wise: {ratio:.1f}")
    print(
        "load average (1/5/15 min): before "
        + "/".join(f"{x:.1f}" for x in load_before)
        + ", after "
        + "/".join(f"{x:.1f}" for x in load_after)
        + f", on {os.cpu_count()} CPUs"
    )
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
