"""Read the table ``sealsync load`` keeps, the ways its users do: Spark SQL, the PySpark
DataFrame API, Delta's time travel, and the ``deltalake`` package (no JVM).

    python examples/query_table.py --table /srv/table [--master local[2]] [--version N]
    python examples/query_table.py --config loader.toml [--readers deltalake]
    python examples/query_table.py --table /srv/table --measurement s1

The table is a Delta Lake table, one version per load run. Read as Delta, every query
sees one version whole whatever a load commits meanwhile: nothing here retries or
checks anything for that. Never read it as a plain Parquet folder, which also holds
the files of rows later loads took out (kept for time travel until ``VACUUM``).

``--config`` takes ``table_path``, ``master`` and the ``[loader]`` table's ``spark``
settings from a loader config, read by sealsync's own config loader. The Spark session
is the loader's (``spark_loader.spark_session.create_session``): Delta's jars by their Maven
coordinates (``spark.jars.packages``, resolved and cached by Spark), Delta's SQL
extension and catalog, Spark's log lines in ``spark-driver.log`` under ``--log-dir``
(a temporary folder, removed after a clean run) instead of the terminal.

``--readers`` picks sections (default: all four), each printed under a ``# ...`` line:

* ``sql``: rows, files, senders and time range per device, from ``SELECT ... FROM
  delta.`<table>```, and a ``total`` line;
* ``dataframe``: rows, files and devices per sender, with the DataFrame API;
* ``history``: ``DESCRIBE HISTORY`` (the last ``--history`` versions) with each
  version's row count read back by ``versionAsOf``;
* ``deltalake``: the version ``DeltaTable`` reads, its files and rows, and rows per
  device, with pyarrow (``pip install deltalake``; without it the section says so).

``--measurement NAME`` adds a section finding a measurement's columns the way a reader
must: by each column's Delta field metadata (``sealsync.measurement``, ``sealsync.kind``),
never by its name. A column is named its measurement when it can be, but a measurement
some devices or senders give two kinds of values has a column per kind (``s1``,
``s1__double``), a name Delta refuses an escaped one (``a%20b``), and a name taken in
another case or by a provenance column a qualified one (``Val__string``, ``sender__long``).
The section prints each such column, its kind and how many values it holds, with Spark
(or with ``deltalake`` when that is the only reader asked for).

``--version N`` reads that version in every section instead of the latest. Device and
sender names come from the senders' files: they are printed with control characters
escaped, as ``sealsync`` prints them.

Exit codes: 0 read; 1 Spark or a reader failed (one line); 2 a bad option or a config
that does not load; 65 the folder is not a Delta table (no ``_delta_log`` commit: no
load has run, a wrong folder, or an earlier sealsync's plain Parquet table, which the
next ``sealsync load`` converts), or it has no version ``N``; 66 no such folder;
69 no Java that Spark can start with.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sealsync.printable import printable

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_DELTA = 65  # sysexits' EX_DATAERR: the input is not what it must be
EXIT_NO_TABLE = 66  # sysexits' EX_NOINPUT: the input does not exist
READERS = ("sql", "dataframe", "history", "deltalake")
_COMMIT = re.compile(r"^(\d{20})\.json$")
#: What the loader records in each measurement column's field metadata (docs/formats.md).
MEASUREMENT_KEY = "sealsync.measurement"
KIND_KEY = "sealsync.kind"
#: The table's own columns: when, which device, and where each row came from.
NOT_MEASUREMENTS = frozenset({"time", "device", "sender", "source_file", "file_id"})


class Stop(Exception):
    """One line for stderr, and the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def table_versions(table: Path) -> list[int]:
    """The versions whose commit files are in ``_delta_log``; none: not a Delta table."""
    try:
        names = os.listdir(table / "_delta_log")
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for name in names if (m := _COMMIT.match(name)))


def check_table(table: Path, version: int | None) -> list[int]:
    """The table's versions, if it is a Delta table that has ``version``; else :class:`Stop`."""
    if not table.exists():
        raise Stop(
            f"{table}: no such folder; give the loader's table_path (or --config)",
            EXIT_NO_TABLE,
        )
    versions = table_versions(table)
    if not versions:
        why = "no sealsync load has run there yet, or it is another folder"
        if table.is_dir() and any(table.glob("sender=*")):
            why = "a plain Parquet table of an earlier sealsync: the next sealsync load converts it"
        raise Stop(
            f"{table} is not a Delta table (no commit in _delta_log/): {why}", EXIT_NOT_DELTA
        )
    if version is not None and version not in versions:
        raise Stop(
            f"{table} has no version {version}: its log holds versions "
            f"{versions[0]} to {versions[-1]}",
            EXIT_NOT_DELTA,
        )
    return versions


def _quoted(table: Path) -> str:
    """The path as a back-quoted Spark SQL identifier (a back quote in it doubled)."""
    return "`" + str(table).replace("`", "``") + "`"


def _as_of(version: int | None) -> str:
    return "" if version is None else f" VERSION AS OF {version}"


def spark_sql(spark: Any, table: Path, version: int | None) -> None:
    """Rows, files, senders and time range per device: plain SQL on ``delta.`<path>```."""
    query = (
        "SELECT device, count(*) AS row_count, count(DISTINCT source_file) AS files, "
        "count(DISTINCT sender) AS senders, min(time) AS first_ms, max(time) AS last_ms "
        f"FROM delta.{_quoted(table)}{_as_of(version)} GROUP BY device ORDER BY device"
    )
    rows = spark.sql(query).collect()
    print(f"# Spark SQL: SELECT ... FROM delta.`{table}`{_as_of(version)}")
    print(f"{'device':<32}{'rows':>10}{'files':>7}{'senders':>9}  first_ms .. last_ms")
    for r in rows:
        print(
            f"{printable(r.device):<32}{r.row_count:>10}{r.files:>7}{r.senders:>9}"
            f"  {r.first_ms} .. {r.last_ms}"
        )
    print(f"{'total':<32}{sum(r.row_count for r in rows):>10}")


def dataframe_api(spark: Any, table: Path, version: int | None) -> None:
    """Rows, files and devices per sender: the DataFrame API on the Delta source."""
    from pyspark.sql import functions as F

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    rows = (
        reader.load(str(table))
        .groupBy("sender")
        .agg(
            F.count(F.lit(1)).alias("row_count"),
            F.countDistinct("source_file").alias("files"),
            F.countDistinct("device").alias("devices"),
        )
        .orderBy("sender")
        .collect()
    )
    shown = "" if version is None else f'.option("versionAsOf", {version})'
    print(f'# PySpark: spark.read.format("delta"){shown}.load(...).groupBy("sender")')
    print(f"{'sender':<40}{'rows':>10}{'files':>7}{'devices':>9}")
    for r in rows:
        print(f"{printable(r.sender):<40}{r.row_count:>10}{r.files:>7}{r.devices:>9}")


def time_travel(spark: Any, table: Path, last: int, version: int | None) -> None:
    """The table's versions (one per load run) and each one's rows, read as of it."""
    history = spark.sql(f"DESCRIBE HISTORY delta.{_quoted(table)} LIMIT {last}").collect()
    print(f"# Time travel: DESCRIBE HISTORY (last {last}), each version read by versionAsOf")
    print(f"{'version':>7}  {'timestamp':<19}  {'operation':<18}{'rows':>10}")
    for h in history:
        if version is not None and h.version > version:
            continue  # after the version asked for
        old = spark.read.format("delta").option("versionAsOf", h.version).load(str(table))
        stamp = h.timestamp.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{h.version:>7}  {stamp:<19}  {h.operation:<18}{old.count():>10}")


def deltalake_reader(table: Path, version: int | None) -> None:
    """The same table without a JVM: delta-rs reads the log, pyarrow the files."""
    print("# deltalake: DeltaTable(...).to_pyarrow_table()")
    try:
        from deltalake import DeltaTable
    except ImportError:
        print("not installed: pip install deltalake to read the table without Spark")
        return
    dt = DeltaTable(str(table), version=version)
    data = dt.to_pyarrow_table(columns=["device"])
    print(f"version {dt.version()}, {len(dt.file_uris())} files, {data.num_rows} rows")
    counts = data.group_by("device").aggregate([([], "count_all")]).sort_by("device")
    print(f"{'device':<32}{'rows':>10}")
    for device, n in zip(
        counts.column("device").to_pylist(), counts.column("count_all").to_pylist(), strict=True
    ):
        print(f"{printable(device):<32}{n:>10}")


def measurement_columns(
    fields: Iterable[tuple[str, Mapping[str, Any], str]], measurement: str
) -> list[tuple[str, str]]:
    """The columns holding ``measurement`` and the kind of each, from the table's fields
    (name, field metadata, type). A column without the loader's metadata (a table
    written before it recorded it) holds the measurement of its own name."""
    out = []
    for name, meta, type_name in fields:
        held = meta.get(MEASUREMENT_KEY)
        if held is None and name not in NOT_MEASUREMENTS:
            held = name
        if held == measurement:
            out.append((name, str(meta.get(KIND_KEY) or type_name)))
    return out


def _measurement_lines(measurement: str, found: list[tuple[str, str]], counts: list[int]) -> None:
    print(f"# Measurement {printable(measurement)}: its columns, by {MEASUREMENT_KEY} metadata")
    if not found:
        print("no column holds it")
        return
    print(f"{'column':<32}{'kind':<12}{'values':>10}")
    for (column, kind), n in zip(found, counts, strict=True):
        print(f"{printable(column):<32}{kind:<12}{n:>10}")


def spark_measurement(spark: Any, table: Path, version: int | None, measurement: str) -> None:
    """A measurement's columns found by their metadata in the DataFrame's schema, and
    the values each holds (a column name back-quoted: it may hold ``%``, ``.``...)."""
    from pyspark.sql import functions as F

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(str(table))
    fields = ((f.name, f.metadata or {}, f.dataType.simpleString()) for f in df.schema.fields)
    found = measurement_columns(fields, measurement)
    counts: list[int] = []
    if found:
        quoted = ["`" + c.replace("`", "``") + "`" for c, _ in found]
        row = df.agg(*[F.count(F.col(q)).alias(f"n{i}") for i, q in enumerate(quoted)]).first()
        counts = [int(row[f"n{i}"]) for i in range(len(found))]
    _measurement_lines(measurement, found, counts)


def deltalake_measurement(table: Path, version: int | None, measurement: str) -> None:
    """The same without a JVM: ``deltalake``'s schema keeps each field's metadata."""
    try:
        from deltalake import DeltaTable
    except ImportError:
        print(f"# Measurement {printable(measurement)}: pip install deltalake to find it")
        return
    dt = DeltaTable(str(table), version=version)
    fields = ((f.name, f.metadata or {}, str(f.type)) for f in dt.schema().fields)
    found = measurement_columns(fields, measurement)
    data = dt.to_pyarrow_table(columns=[c for c, _ in found]) if found else None
    counts = [] if data is None else [len(data) - data.column(c).null_count for c, _ in found]
    _measurement_lines(measurement, found, counts)


def table_of(args: argparse.Namespace) -> tuple[Path, str, dict[str, str]]:
    """The table's path, the master and the Spark settings: ``--table`` and ``--master``,
    or a loader config's (``--master`` still wins)."""
    if args.config is None:
        return Path(os.path.abspath(args.table)), args.master or "local[*]", {}
    from sealsync.config import load_loader_config
    from sealsync.errors import ConfigError

    try:
        config = load_loader_config(args.config)
    except ConfigError as exc:
        raise Stop(str(exc), EXIT_USAGE) from None
    table = Path(os.path.abspath(config.table_path))
    return table, args.master or config.master, dict(config.spark)


def run(args: argparse.Namespace) -> None:
    table, master, conf = table_of(args)
    wanted = [r.strip() for r in args.readers.split(",") if r.strip()]
    if not wanted or [r for r in wanted if r not in READERS]:
        raise Stop(f"--readers takes some of {','.join(READERS)}, not {args.readers}", EXIT_USAGE)
    versions = check_table(table, args.version)
    pinned = args.version  # None: each query reads the latest version as it runs
    reading = "the latest" if pinned is None else str(pinned)
    print(f"table {table}: versions {versions[0]} to {versions[-1]}, reading {reading}")
    if wanted == ["deltalake"]:  # no JVM at all
        deltalake_reader(table, pinned)
        if args.measurement is not None:
            print()
            deltalake_measurement(table, pinned, args.measurement)
        return

    from sealsync.errors import SealsyncError
    from spark_loader.failure import describe
    from spark_loader.spark_session import create_session, python_warnings_quiet

    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="sealsync-query-"))
    try:
        spark = create_session(
            master, log_dir, verbose=args.verbose, conf={"spark.app.name": "sealsync-query", **conf}
        )
    except SealsyncError as exc:
        raise Stop(str(exc), exc.exit_code) from None
    try:
        with python_warnings_quiet():
            for reader in wanted:
                print()
                if reader == "sql":
                    spark_sql(spark, table, pinned)
                elif reader == "dataframe":
                    dataframe_api(spark, table, pinned)
                elif reader == "history":
                    time_travel(spark, table, args.history, pinned)
                else:
                    deltalake_reader(table, pinned)
            if args.measurement is not None:
                print()
                spark_measurement(spark, table, pinned, args.measurement)
    except Stop:
        raise
    except Exception as exc:  # a Spark or deltalake error: its first line, not a trace
        raise Stop(f"reading {table} failed: {describe(exc).reason}", EXIT_FAILED) from None
    finally:
        spark.stop()
    if args.log_dir is None:
        shutil.rmtree(log_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--table", help="the Delta table's folder (the loader's table_path)")
    where.add_argument("--config", type=Path, help="a loader config: its table_path and Spark")
    parser.add_argument("--master", help="Spark master (default: the config's, or local[*])")
    parser.add_argument("--version", type=int, help="read this version (default: the latest)")
    parser.add_argument(
        "--measurement", help="also list this measurement's columns, found by their metadata"
    )
    parser.add_argument("--history", type=int, default=5, help="versions DESCRIBE HISTORY shows")
    parser.add_argument(
        "--readers", default=",".join(READERS), help=f"sections to print ({','.join(READERS)})"
    )
    parser.add_argument("--log-dir", help="keep Spark's log here (default: a temporary folder)")
    parser.add_argument("--verbose", action="store_true", help="Spark's own log on stderr")
    args = parser.parse_args(argv)
    try:
        run(args)
    except Stop as stop:
        print(f"query_table: error: {printable(stop)}", file=sys.stderr)
        return stop.code
    except KeyboardInterrupt:
        print("query_table: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
