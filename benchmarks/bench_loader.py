"""Benchmark: the Delta loader against the plain Parquet loader and a plain Spark Parquet copy.

Generates ``--rows`` rows in ``--files`` Parquet files (and ``--tsfiles`` TsFiles,
0 by default) in a receiver's storage layout, starts the loader's Spark session and a
plain one, then times, alternating:

* plain:  ``spark.read.parquet(files).write.parquet(out)`` as a user runs it: in a
  plain ``SparkSession`` of its own (Spark's defaults, the same master and driver
  memory, none of the loader's settings, jars or extensions), in a child process
  that stays up so that its JVM is as warm as the loader's; timed there.
* plain+fsync: the same copy, then an fsync of every file it wrote and of its folder:
  what the loader does before it records a load, so the ratio against it compares
  equal durability (the plain copy leaves its output in the page cache).
* loader: ``run_load`` into a fresh Delta table (discovery, links, footers, the
  Spark job copying each file into its own folder, row checks, moves into the table,
  fsync, the Delta commit, state), as ``sealsync load`` runs it.
* tree (with ``--tree``): ``run_load`` on a second receiver folder holding the
  very rows of the Parquet files, each file written as a tree-model TsFile.
* v3 (with ``--v3``): ``run_load`` on a third receiver folder holding ``--files``
  format 3 TsFiles written by IoTDB 1.3's Java writer (``tests/tsfile_corpus.py
  --bench``: 4 devices of INT64, DOUBLE, FLOAT, INT32 and BOOLEAN series), as many
  rows in all as the Parquet files hold: copies of one file, each under its own name.

after one unmeasured run of each, rotating which goes first, and prints rows/s
of each (median of ``--repeat``) and the ratios, each with its spread (the min–max
of the ratios of one repetition's runs): loader/plain (issue 17's target: >= 1.0 on
Parquet input), loader/plain+fsync, loader/parquet loader and, with ``--tree``,
loader on TsFiles/loader on Parquet (target >= 0.5), with ``--v3`` loader on v3
TsFiles/loader on Parquet (and on tree TsFiles). Only Parquet rows count for the
plain copy; with ``--tsfiles`` the loader's rate is reported for its whole input.

With ``--store hdfs`` or ``--store s3`` the table (and the plain copy's output) is on a
real HDFS (Hadoop's MiniDFSCluster) or S3 server (s3proxy), started here from the
tests' launchers (``tests/lake_servers.py``: jars from Maven Central, cached): the
loader copies the received files to the store and loads them there, the plain copy
reads them here and writes its Parquet folder there. Neither fsyncs (a store's file
is durable once closed), so ``plain+fsync`` and the plain Parquet loader are left out.
The machine's load average is printed at the start and the end: a busy machine's
figures are only comparable within one run.

    .venv/bin/python benchmarks/bench_loader.py [--rows 10000000] [--files 200]
    .venv/bin/python benchmarks/bench_loader.py --rows 2000000 --files 20 --tree --v3
    .venv/bin/python benchmarks/bench_loader.py --store s3 --rows 2000000 --files 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sealsync.config import LoaderConfig  # noqa: E402
from sealsync.formats import tsfile as tsfile_format  # noqa: E402
from spark_loader import run_load  # noqa: E402
from spark_loader.spark_session import create_session  # noqa: E402

SENDERS = [str(uuid.UUID(int=i + 1)) for i in range(4)]
PLAIN_COPY = """
import json, shutil, sys, time
from pathlib import Path
from pyspark.sql import SparkSession
from bench_loader import fsync_tree
master, memory, listing, conf = sys.argv[1:5]
paths = Path(listing).read_text().splitlines()
builder = SparkSession.builder.master(master).config("spark.driver.memory", memory)
for key, value in json.loads(conf).items():  # a store's endpoint and connector
    builder = builder.config(key, value)
spark = builder.getOrCreate()
print("ready", flush=True)
for line in sys.stdin:
    out, durable = line.rstrip("\\n").split("\\t")
    t = time.monotonic()
    spark.read.parquet(*paths).write.mode("overwrite").parquet(out)
    if durable == "1":
        fsync_tree(Path(out))
    took = time.monotonic() - t
    if "://" in out:
        jvm = spark.sparkContext._jvm
        where = jvm.org.apache.hadoop.fs.Path(out)
        where.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(where, True)
    else:
        shutil.rmtree(out, ignore_errors=True)
    print(took, flush=True)
spark.stop()
"""


class PlainSpark:
    """The plain Spark copy in a child process with a plain session (see the module
    text): the baseline as a user's own PySpark job runs it, not inside the loader's
    session with its settings, jars and extensions."""

    def __init__(
        self, paths: list[str], work: Path, master: str, memory: str, conf: dict[str, str]
    ) -> None:
        import subprocess

        listing = work / "plain-inputs.txt"
        listing.write_text("\n".join(paths))
        self.log = open(work / "plain-spark.log", "wb")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PLAIN_COPY, master, memory, str(listing), json.dumps(conf)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)},
        )
        if self._line() != "ready":
            raise SystemExit(f"the plain Spark session did not start (see {self.log.name})")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the plain Spark copy failed (see {self.log.name})")
        return line.strip()

    def copy(self, out: str, durable: bool) -> float:
        """Seconds of one copy into ``out`` (then removed), with ``durable`` fsynced."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{out}\t{int(durable)}\n")
        self.proc.stdin.flush()
        return float(self._line())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(120)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


def fsync_tree(folder: Path) -> None:
    """fsync every file below ``folder``, then each folder: the loader's durability."""
    dirs = [folder]
    for path in folder.rglob("*"):
        if path.is_dir():
            dirs.append(path)
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for d in dirs:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def spread(base_times: list[float], times: list[float], rows_ratio: float) -> str:
    """The min–max of the per-repetition rate ratios; ``rows_ratio`` is rows over base rows."""
    ratios = [rows_ratio * b / t for b, t in zip(base_times, times, strict=True)]
    return f"spread {min(ratios):.2f}-{max(ratios):.2f}"


def make_table(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    """One file's rows: 10 devices, a double, an int64, a float and a boolean.

    Each file's times follow the previous file's, as a sequence file's do: no file holds
    another's (device, time), so no point is overwritten and every row stays.
    """
    devices = np.array([f"root.sg{index % 5}.d{j}" for j in range(10)])
    first = index * rows + np.arange(rows, dtype=np.int64)
    return pa.table(
        {
            "time": pa.array(1_700_000_000_000 + first // 10 * 1000),
            "device": pa.array(devices[np.arange(rows) % 10]),
            "s1": pa.array(np.cumsum(rng.normal(size=rows))),
            "s2": pa.array(rng.integers(0, 1000, rows)),
            "s3": pa.array(rng.random(rows).astype(np.float32)),
            "s4": pa.array(rng.random(rows) > 0.5),
        }
    )


def _folder(data_dir: Path, i: int) -> Path:
    folder = data_dir / "sequence" / f"root.sg{i % 5}" / str(i % 7) / SENDERS[i % len(SENDERS)]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def generate(
    data_dir: Path, rows: int, files: int, tsfiles: int, tree_dir: Path | None = None
) -> list[Path]:
    """Write the files where the receiver keeps them; returns the Parquet paths.

    With ``tree_dir``, each Parquet file's table is also written there, in the same
    place, as a tree-model TsFile.
    """
    rng = np.random.default_rng(7)
    per_file = rows // files
    parquet_paths = []
    for i in range(files + tsfiles):
        is_ts = i >= files
        folder = _folder(data_dir, i)
        table = make_table(rng, i, per_file if not is_ts else max(per_file // 10, 10))
        stem = f"{1_700_000_000_000 + i}-{i}-0"
        if is_ts:
            tsfile_format.write_arrow(folder / f"{stem}.tsfile", table)
        else:
            path = folder / f"{stem}.parquet"
            pq.write_table(table, path)
            parquet_paths.append(path)
            if tree_dir is not None:
                tsfile_format.write_arrow(_folder(tree_dir, i) / f"{stem}.tsfile", table)
    return parquet_paths


def generate_v3(v3_dir: Path, rows: int, files: int, scratch: Path) -> int:
    """``files`` format 3 TsFiles of ``rows // files`` rows each, by IoTDB 1.3's writer
    (copies of one, each under its own name); returns the rows they hold in all."""
    import tsfile_corpus

    per_file = max(rows // files, 1)
    v3 = tsfile_corpus.bench(per_file, scratch)[0]
    for i in range(files):
        stem = f"{1_700_000_000_000 + i}-{i}-0-0"
        shutil.copyfile(v3, _folder(v3_dir, i) / f"{stem}.tsfile")
    return per_file * files


@contextlib.contextmanager
def lake_store(store: str, work: Path) -> Iterator[tuple[str | None, dict[str, str]]]:
    """The store's server started for the run (none for ``local``): the folder URI the
    tables go under, and the Spark settings a session needs to reach it."""
    if store == "local":
        yield None, {}
        return
    from lake_servers import Hdfs, S3Server

    if store == "hdfs":
        with Hdfs(work / "hdfs").running() as hdfs:
            print(
                f"HDFS {hdfs.uri} (Hadoop MiniDFSCluster, one DataNode), {hdfs.start_seconds:.0f}s"
            )
            yield f"{hdfs.uri}/bench", hdfs.spark_conf()
    else:
        with S3Server(work / "s3").running() as s3:
            print(f"S3 {s3.endpoint} (s3proxy, filesystem backend), {s3.start_seconds:.0f}s")
            yield "s3a://lake/bench", s3.spark_conf()


def remove_table(spark: object, where: str) -> None:
    """Remove a table (a local folder, or a folder on the store through the session)."""
    if "://" not in where:
        shutil.rmtree(where, ignore_errors=True)
        return
    from spark_loader.store import HadoopStore

    HadoopStore(spark, where).delete(where, recursive=True)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f}, {five:.1f}, {fifteen:.1f} on {os.cpu_count()} cores"


class Phases:
    """The loader's progress lines with their times: where the last run went."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, str]] = []

    def __call__(self, text: str) -> None:
        if ": stage " not in text:  # Spark's stage counts say nothing of the phase
            self.marks.append((time.monotonic(), text))

    def start(self) -> None:
        self.marks = [(time.monotonic(), "start")]

    def report(self, end: float) -> list[str]:
        marks = [*self.marks, (end, "end")]
        return [
            f"  {b - a:6.2f}s  {text}" for (a, text), (b, _) in zip(marks, marks[1:], strict=False)
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--tsfiles", type=int, default=0)
    parser.add_argument(
        "--tree",
        action="store_true",
        help="also load the Parquet files' rows written as tree-model TsFiles",
    )
    parser.add_argument(
        "--v3",
        action="store_true",
        help="also load as many rows as format 3 TsFiles written by IoTDB 1.3's writer",
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="unmeasured runs of each first (a JVM's copy keeps speeding up for a few)",
    )
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--store",
        choices=("local", "hdfs", "s3"),
        default="local",
        help="where the table and the plain copy's output are (a server started here)",
    )
    args = parser.parse_args()
    if args.tree and args.tsfiles:
        parser.error("--tree compares TsFiles with the same rows as Parquet: use --tsfiles 0")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="sealsync-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        with lake_store(args.store, work) as (root, conf):
            return run(args, work, root, conf)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path, root: str | None, conf: dict[str, str]) -> int:
    """The benchmark, tables under ``root`` (a store's folder URI; None: ``work``)."""
    print(f"machine: {load_average()} (a shared machine: figures compare within a run)")

    data_dir = work / "receiver"
    tree_dir = work / "receiver-tree" if args.tree else None
    v3_dir = work / "receiver-v3" if args.v3 else None
    for folder in (data_dir, tree_dir, v3_dir):
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    t0 = time.monotonic()
    files = generate(data_dir, args.rows, args.files, args.tsfiles, tree_dir)
    parquet_rows = sum(pq.read_metadata(p).num_rows for p in files)
    size_mb = sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file()) / 1e6
    print(
        f"generated {parquet_rows} Parquet rows in {len(files)} files "
        f"(+{args.tsfiles} TsFiles), {size_mb:.0f} MB, in {time.monotonic() - t0:.1f}s"
    )
    if tree_dir is not None:
        tree_mb = sum(p.stat().st_size for p in tree_dir.rglob("*") if p.is_file()) / 1e6
        print(f"the same rows as {len(files)} tree-model TsFiles, {tree_mb:.0f} MB")
    v3_rows = 0
    if v3_dir is not None:
        v3_rows = generate_v3(v3_dir, parquet_rows, len(files), work / "iotdb")
        v3_mb = sum(p.stat().st_size for p in v3_dir.rglob("*.tsfile")) / 1e6
        print(f"{v3_rows} rows as {len(files)} format 3 TsFiles (IoTDB 1.3), {v3_mb:.0f} MB")

    spark = create_session(
        args.master, work / "logs", conf={"spark.driver.memory": args.driver_memory, **conf}
    )
    plain_spark = PlainSpark([str(p) for p in files], work, args.master, args.driver_memory, conf)
    base = root or str(work)
    phases = Phases()

    def plain(i: int) -> float:
        return plain_spark.copy(f"{base}/plain-{i}", durable=False)

    def plain_durable(i: int) -> float:
        return plain_spark.copy(f"{base}/plain-fsync-{i}", durable=True)

    def loader(i: int, source: Path = data_dir) -> tuple[float, int]:
        config = LoaderConfig([source], f"{base}/table-{i}", work / f"state-{i}")
        phases.start()
        t = time.monotonic()
        report = run_load(config, spark=spark, progress=phases)
        took = time.monotonic() - t
        remove_table(spark, f"{base}/table-{i}")
        shutil.rmtree(config.state_dir, ignore_errors=True)
        if not report.ok:
            raise SystemExit(f"loader run failed: {report.to_dict()}")
        phases.report(t + took)
        return took, report.rows_written

    # Warm-up: unmeasured runs of each, so all measure a JIT-compiled JVM. A store
    # makes files durable as it closes them: no fsync variant, no plain Parquet loader.
    variants = ["plain"] + (["plain+fsync"] if root is None else []) + ["loader"]
    variants += ["tree"] if tree_dir is not None else []
    variants += ["v3"] if v3_dir is not None else []
    for w in range(-args.warmup, 0):
        plain(w)
        if root is None:
            plain_durable(w)
        loader(w)
        if tree_dir is not None:
            loader(w, tree_dir)
        if v3_dir is not None:
            loader(w, v3_dir)
    plain_times: list[float] = []
    durable_times: list[float] = []
    loader_times: list[float] = []
    tree_times: list[float] = []
    v3_times: list[float] = []
    loader_rows = tree_rows = v3_loaded = 0
    for i in range(args.repeat):
        for which in variants[i % len(variants) :] + variants[: i % len(variants)]:
            if which == "plain":
                plain_times.append(plain(i))
            elif which == "plain+fsync":
                durable_times.append(plain_durable(i))
            elif which == "loader":
                took, loader_rows = loader(i)
                loader_times.append(took)
            elif which == "tree":
                assert tree_dir is not None
                took, tree_rows = loader(i, tree_dir)
                tree_times.append(took)
            else:
                assert v3_dir is not None
                took, v3_loaded = loader(i, v3_dir)
                v3_times.append(took)
        line = (
            f"run {i + 1}: plain {plain_times[-1]:.2f}s, loader {loader_times[-1]:.2f}s "
            f"({loader_rows} rows)"
        )
        if durable_times:
            line += f", plain+fsync {durable_times[-1]:.2f}s"
        if tree_times:
            line += f", loader on TsFiles {tree_times[-1]:.2f}s ({tree_rows} rows)"
        if v3_times:
            line += f", loader on v3 TsFiles {v3_times[-1]:.2f}s ({v3_loaded} rows)"
        print(line)

    last_loader = phases.report(phases.marks[-1][0]) if phases.marks else []
    spark.stop()
    plain_spark.close()
    plain_rate = parquet_rows / statistics.median(plain_times)
    loader_rate = loader_rows / statistics.median(loader_times)
    where = "" if root is None else f" into {root}"
    print(f"plain Spark copy{where}: {plain_rate:,.0f} rows/s (median of {args.repeat})")
    if durable_times:
        durable_rate = parquet_rows / statistics.median(durable_times)
        print(f"plain Spark copy + fsync: {durable_rate:,.0f} rows/s (median of {args.repeat})")
    print(f"sealsync loader{where}:  {loader_rate:,.0f} rows/s (median of {args.repeat})")
    print(
        f"ratio loader/plain: {loader_rate / plain_rate:.2f} "
        f"({spread(plain_times, loader_times, loader_rows / parquet_rows)}, target >= 1.00)"
    )
    if durable_times:
        print(
            f"ratio loader/plain+fsync: {loader_rate / durable_rate:.2f} "
            f"({spread(durable_times, loader_times, loader_rows / parquet_rows)}, "
            "equal durability)"
        )
    print("where the last loader run went (the time from each of its steps to the next):")
    print("\n".join(last_loader))
    if tree_times:
        if tree_rows != loader_rows:
            raise SystemExit(
                f"the TsFiles loaded {tree_rows} rows, the Parquet files {loader_rows}"
            )
        tree_rate = tree_rows / statistics.median(tree_times)
        print(f"sealsync loader on tree-model TsFiles: {tree_rate:,.0f} rows/s")
        print(f"ratio loader TsFile/Parquet: {tree_rate / loader_rate:.2f} (target >= 0.50)")
    if v3_times:
        if v3_loaded != v3_rows:
            raise SystemExit(f"the v3 TsFiles loaded {v3_loaded} rows, they hold {v3_rows}")
        v3_rate = v3_loaded / statistics.median(v3_times)
        print(f"sealsync loader on v3 TsFiles: {v3_rate:,.0f} rows/s")
        print(f"ratio loader v3 TsFile/Parquet: {v3_rate / loader_rate:.2f}")
        if tree_times:
            ratio = v3_rate / (tree_rows / statistics.median(tree_times))
            print(f"ratio loader v3 TsFile/tree TsFile: {ratio:.2f} (target >= 0.50)")
    print(f"machine: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
