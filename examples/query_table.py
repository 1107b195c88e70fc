"""A Spark job that queries the table ``sealsync load`` maintains.

    python examples/query_table.py warehouse/points [--master local[*]]

The table is a plain Parquet dataset (no metastore needed): one row per source row
(``time`` in epoch ms, ``device``, one column per measurement) plus provenance columns
(``sender``, ``source_file``). Files differ in their measurements, so it is read with
``mergeSchema``. Prints rows, time range and senders per device.

A ``sealsync load --full`` swaps a new table in whole, but a query whose listing of
the folders straddles the swap can see part of each (docs/operations.md, "--full"):
the query is run again if the table folder is another one after it than before.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

ATTEMPTS = 20


def summarise(spark: Any, path: str) -> list[Any]:
    """Rows, time range and senders per device, from one table, whole."""
    from pyspark.sql import functions as F

    for _ in range(ATTEMPTS):
        before = os.stat(path).st_ino  # the listing happens when the table is read
        table = spark.read.option("mergeSchema", "true").parquet(path)
        rows = (
            table.groupBy("device")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.min("time").alias("first_ms"),
                F.max("time").alias("last_ms"),
                F.countDistinct("sender").alias("senders"),
                F.countDistinct("source_file").alias("files"),
            )
            .orderBy("device")
            .collect()
        )
        if os.stat(path).st_ino == before:
            return rows
        time.sleep(0.1)  # a --full swap landed during the query
    raise SystemExit(f"{path} was swapped during each of {ATTEMPTS} queries")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table_path")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    if not os.path.isdir(args.table_path):
        raise SystemExit(f"{args.table_path}: no table there (the loader's table_path?)")

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("sealsync-query")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        summary = summarise(spark, args.table_path)
        print(f"{'device':<24}{'rows':>10}{'files':>7}{'senders':>9}  first_ms .. last_ms")
        for row in summary:
            print(
                f"{row.device:<24}{row.rows:>10}{row.files:>7}{row.senders:>9}"
                f"  {row.first_ms} .. {row.last_ms}"
            )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
