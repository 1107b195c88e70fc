"""A Spark job that queries the table ``sealsync load`` maintains.

    python examples/query_table.py warehouse/points [--master local[*]]

The table is a plain Parquet dataset (no metastore needed): one row per source row
(``time`` in epoch ms, ``device``, one column per measurement) plus provenance columns
(``sender``, ``source_file``). Files differ in their measurements, so it is read with
``mergeSchema``. Prints rows, time range and senders per device.
"""

from __future__ import annotations

import argparse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table_path")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master(args.master)
        .appName("sealsync-query")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        table = spark.read.option("mergeSchema", "true").parquet(args.table_path)
        summary = (
            table.groupBy("device")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.min("time").alias("first_ms"),
                F.max("time").alias("last_ms"),
                F.countDistinct("sender").alias("senders"),
                F.countDistinct("source_file").alias("files"),
            )
            .orderBy("device")
        )
        print(f"{'device':<24}{'rows':>10}{'files':>7}{'senders':>9}  first_ms .. last_ms")
        for row in summary.toLocalIterator():
            print(
                f"{row.device:<24}{row.rows:>10}{row.files:>7}{row.senders:>9}"
                f"  {row.first_ms} .. {row.last_ms}"
            )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
