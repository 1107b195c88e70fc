"""Benchmark: the loader's TsFile readers, Apache TsFile's Java reader against the C++ package.

Reads, on one pinned CPU, three sets of tree-model TsFiles:

* ``v4 package``: ``--files`` files of ``--rows`` rows written by the ``tsfile`` package
  (the rows of ``bench_loader.py``: 10 devices, a double, an int64, a float and a
  boolean measurement), the set this benchmark has always measured;
* ``v4 TsFile 2.x`` and ``v3 IoTDB 1.3``: one file each of ``--files`` x ``--rows`` rows
  and the same shape (4 devices of INT64, DOUBLE, FLOAT, INT32 and BOOLEAN series, the
  writer's default encodings), written by IoTDB's own Java writers
  (``tests/tsfile_corpus.py --bench``): format 4 and format 3 of the same data.

Two ways, each ``--repeat`` times after one unmeasured round, alternating the order:

* **reader alone**: the C++ package's ``formats.tsfile.to_arrow`` (v4 only: it cannot
  read v3) and the Java reader (``TsFileRows.count``: every point decoded and merged
  into rows, without Spark), in the same pinned process and its JVM;
* **Spark** (``local[1]``): the loader's read path, the files DataFrame through the
  C++ reader's ``mapInArrow`` or the Java reader's Dataset, into Spark's no-op writer.

It checks once that the two readers give the same rows of a package file, then prints
rows/s of each (median and range), the ratios the loader's targets are about, and the
load average before and after, since a shared machine moves these figures.

    .venv/bin/python benchmarks/bench_tsfile_read.py [--files 20] [--rows 100000]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import tsfile_corpus  # noqa: E402
from bench_loader import make_table  # noqa: E402

from sealsync.formats import tsfile as tsfile_format  # noqa: E402
from spark_loader import schema as schemas  # noqa: E402
from spark_loader.spark_session import create_session  # noqa: E402
from spark_loader.tsfile_read import (  # noqa: E402
    FILES_DDL,
    data_batches,
    java_data,
    java_schema,
    series_of,
)

SETS = ("v4 package", "v4 TsFile 2.x", "v3 IoTDB 1.3")


def generate(folder: Path, files: int, rows: int) -> list[Path]:
    rng = np.random.default_rng(7)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = folder / f"{1_700_000_000_000 + i}-{i}-0.tsfile"
        tsfile_format.write_arrow(path, make_table(rng, i, rows))
        paths.append(path)
    return paths


def timed(read: Callable[[], int]) -> tuple[float, int]:
    t = time.perf_counter()
    rows = read()
    return time.perf_counter() - t, rows


def _files(spark: Any, paths: list[Path]) -> Any:
    rows = [(str(p), f"f{i}", i, None) for i, p in enumerate(paths)]
    return spark.createDataFrame(rows, FILES_DDL).coalesce(1)


def _target(spark: Any, paths: list[Path]) -> Any:
    """The write schema the loader would build for these files (Java schema pass)."""
    series: dict[tuple[str, str], Any] = {}
    for fid, found in series_of(java_schema(spark, _files(spark, paths)).collect()).items():
        if isinstance(found, str):
            raise SystemExit(f"cannot read {fid}: {found}")
        for name, t in found:
            series[(name, t.json())] = t
    return schemas.new_table_target([(name, t) for (name, _), t in series.items()])[0]


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per file")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the last)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # the JVM started below inherits it
    work = args.workdir or Path(tempfile.mkdtemp(prefix="sealsync-bench-read-"))
    t0 = time.monotonic()
    package = generate(work / "tree", args.files, args.rows)
    total: int = args.files * args.rows
    v3, v4 = tsfile_corpus.bench(total, work / "iotdb")
    sets = {SETS[0]: package, SETS[1]: [v4], SETS[2]: [v3]}
    for name, paths in sets.items():
        size_mb = sum(p.stat().st_size for p in paths) / 1e6
        print(f"{name}: {len(paths)} TsFiles, {size_mb:.0f} MB")
    print(
        f"generated {len(package)} tree-model TsFiles x {args.rows} rows and the IoTDB "
        f"writers' pair in {time.monotonic() - t0:.1f}s; reading on CPU {cpu}"
    )

    spark = create_session("local[1]", work / "logs", conf={"spark.driver.memory": "2g"})
    counter = spark.sparkContext._jvm.io.sealsync.spark.TsFileRows
    targets = {name: _target(spark, paths) for name, paths in sets.items()}
    frames = {name: _files(spark, paths) for name, paths in sets.items()}
    probe = package[0]
    if tsfile_format.to_arrow(probe).num_rows != counter.count(str(probe)):
        raise SystemExit("the two readers disagree on " + str(probe))

    def cpp_alone(paths: list[Path]) -> int:
        return sum(tsfile_format.to_arrow(p).num_rows for p in paths)

    def java_alone(paths: list[Path]) -> int:
        return sum(int(counter.count(str(p))) for p in paths)

    def cpp_spark(name: str) -> int:
        body = functools.partial(data_batches, schema=schemas.arrow_schema(targets[name]))
        _noop(frames[name].mapInArrow(body, targets[name]))
        return total

    def java_spark(name: str) -> int:
        _noop(java_data(spark, frames[name], targets[name]))
        return total

    cases: dict[str, Callable[[], int]] = {
        f"C++ alone, {SETS[0]}": lambda: cpp_alone(package),
        f"Java alone, {SETS[0]}": lambda: java_alone(package),
        f"C++ alone, {SETS[1]}": lambda: cpp_alone([v4]),
        f"Java alone, {SETS[1]}": lambda: java_alone([v4]),
        f"Java alone, {SETS[2]}": lambda: java_alone([v3]),
        f"C++ Spark, {SETS[0]}": lambda: cpp_spark(SETS[0]),
        f"Java Spark, {SETS[0]}": lambda: java_spark(SETS[0]),
        f"Java Spark, {SETS[2]}": lambda: java_spark(SETS[2]),
    }
    for name, read in list(cases.items()):  # warm-up: the JIT, the page cache, the workers
        try:
            read()
        except Exception as exc:  # the C++ package cannot read every file: say so, go on
            print(f"{name}: cannot read: {str(exc).splitlines()[0][-200:]}")
            del cases[name]
    load_before = os.getloadavg()
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(args.repeat):
        order = list(cases) if i % 2 == 0 else list(reversed(cases))
        line = []
        for name in order:
            took, rows = timed(cases[name])
            if rows != total:
                raise SystemExit(f"{name} read {rows} rows, the files hold {total}")
            rates[name].append(rows / took)
            line.append(f"{took:.2f}s")
        way = "as listed below" if i % 2 == 0 else "in reverse"
        print(f"run {i + 1} ({way}): " + ", ".join(line) + f" ({total} rows each)")
    load_after = os.getloadavg()
    spark.stop()

    for name, got in rates.items():
        print(
            f"{name + ':':32} {statistics.median(got):>12,.0f} rows/s "
            f"(median of {len(got)}; {min(got):,.0f}-{max(got):,.0f})"
        )

    def ratio(label: str, a: str, b: str, note: str = "") -> None:
        if a in rates and b in rates:
            value = statistics.median(rates[a]) / statistics.median(rates[b])
            print(f"ratio {label}: {value:.2f}{note}")

    alone, spark_path = "alone, " + SETS[0], "Spark, " + SETS[0]
    ratio(f"Java/C++ {alone}", f"Java {alone}", f"C++ {alone}", " (target >= 1.00)")
    ratio(f"Java/C++ {spark_path}", f"Java {spark_path}", f"C++ {spark_path}")
    ratio(
        f"Java alone {SETS[2]} / C++ alone {SETS[0]}",
        f"Java alone, {SETS[2]}",
        f"C++ alone, {SETS[0]}",
        " (target >= 0.50)",
    )
    ratio(f"Java alone {SETS[2]} / {SETS[1]}", f"Java alone, {SETS[2]}", f"Java alone, {SETS[1]}")
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
