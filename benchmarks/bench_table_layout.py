"""The table's layout, measured: one wide row per (device, time) with a column per
measurement (what the loader writes), against a narrow table of one row per point
(``time, device, measurement`` and a typed value column per kind), the other way to
hold IoTDB's series without converting a type.

The same points both ways, written with Arrow's Parquet writer at the loader's
settings (snappy, dictionaries but for time and floating point), then read by Spark
as a user queries the table: one measurement of one device over a time range, and a
device's rows with all its measurements (IoTDB's ``ALIGN BY DEVICE``; the narrow table
pivots for it). Prints rows, bytes, write seconds and query seconds per layout, and
the narrow/wide ratios.

    .venv/bin/python benchmarks/bench_table_layout.py [--devices 20] [--measurements 10]
        [--rows 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def wide_table(devices: int, measurements: int, rows: int) -> pa.Table:
    """``rows`` rows per device, every measurement a double with a value in each."""
    rng = np.random.default_rng(7)
    n = devices * rows
    columns: dict[str, pa.Array] = {
        "time": pa.array(np.tile(np.arange(rows, dtype=np.int64) * 1000, devices)),
        "device": pa.array(np.repeat([f"root.sg.d{d}" for d in range(devices)], rows)),
    }
    for m in range(measurements):
        columns[f"s{m}"] = pa.array(rng.random(n))
    return pa.table(columns)


def narrow_table(wide: pa.Table) -> pa.Table:
    """The same points, one row each (Arrow's own column operations, no Python loop)."""
    names = [c for c in wide.column_names if c not in ("time", "device")]
    parts = []
    for name in names:
        parts.append(
            pa.table(
                {
                    "time": wide.column("time"),
                    "device": wide.column("device"),
                    "measurement": pa.array([name] * wide.num_rows),
                    "value_double": wide.column(name),
                }
            )
        )
    return pa.concat_tables(parts)


def write(table: pa.Table, path: Path, no_dictionary: list[str]) -> float:
    start = time.perf_counter()
    pq.write_table(
        table,
        path,
        compression="snappy",
        use_dictionary=[c for c in table.column_names if c not in no_dictionary],
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--measurements", type=int, default=10)
    parser.add_argument("--rows", type=int, default=200_000, help="rows per device")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from spark_loader.spark_session import create_session

    wide = wide_table(args.devices, args.measurements, args.rows)
    listed = ", ".join(repr(f"s{m}") for m in range(args.measurements))
    narrow = narrow_table(wide)
    with tempfile.TemporaryDirectory(prefix="bench-layout-") as tmp:
        folder = Path(tmp)
        spark = create_session("local[*]", folder / "logs")
        try:
            figures: dict[str, dict[str, list[float]]] = {"wide": {}, "narrow": {}}
            for _ in range(args.repeat):
                for layout, table, plain in (
                    ("wide", wide, ["time", *[f"s{m}" for m in range(args.measurements)]]),
                    ("narrow", narrow, ["time", "value_double"]),
                ):
                    path = folder / f"{layout}.parquet"
                    path.unlink(missing_ok=True)
                    figures[layout].setdefault("write", []).append(write(table, path, plain))
                    df = spark.read.parquet(str(path))
                    df.createOrReplaceTempView(layout)
                    one = (
                        "SELECT time, s3 FROM wide WHERE device = 'root.sg.d5' AND time < 50000000"
                        if layout == "wide"
                        else "SELECT time, value_double FROM narrow WHERE device = 'root.sg.d5' "
                        "AND measurement = 's3' AND time < 50000000"
                    )
                    device = (
                        "SELECT * FROM wide WHERE device = 'root.sg.d5'"
                        if layout == "wide"
                        else "SELECT * FROM (SELECT time, device, measurement, value_double FROM "
                        "narrow WHERE device = 'root.sg.d5') PIVOT (first(value_double) FOR "
                        f"measurement IN ({listed}))"
                    )
                    for name, sql in (("one series", one), ("a device aligned", device)):
                        start = time.perf_counter()
                        # every column of the answer read and made (a count would prune them)
                        spark.sql(sql).write.format("noop").mode("overwrite").save()
                        figures[layout].setdefault(name, []).append(time.perf_counter() - start)
                    figures[layout]["bytes"] = [float(os.path.getsize(path))]
                    figures[layout]["rows"] = [float(table.num_rows)]
        finally:
            spark.stop()
    load = os.getloadavg()
    print(f"machine load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(
        f"{args.devices} devices x {args.rows} rows x {args.measurements} double measurements "
        f"({args.devices * args.rows * args.measurements:,} points), medians of {args.repeat}"
    )
    print(f"{'':18}{'wide':>14}{'narrow':>14}{'narrow/wide':>14}")
    for key in ("rows", "bytes", "write", "one series", "a device aligned"):
        w, n = statistics.median(figures["wide"][key]), statistics.median(figures["narrow"][key])
        unit = "" if key in ("rows", "bytes") else " s"
        print(f"{key + unit:18}{w:>14,.2f}{n:>14,.2f}{n / w:>14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
