"""The edges' TTL in the table, with real Spark: rows IoTDB no longer answers are not
ingested, rows that expire later leave on a later run (the run's ``now`` given, as a
clock that moved), a rule removed brings the rows back, and time travel still shows
what an earlier version held."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_loader_helpers import Receiver, source_rows, table_rows, table_versions

from sealsync.config import LoaderConfig
from sealsync.simulator import EdgeInstance
from sealsync.ttl import Rule, TtlRules
from spark_loader import delta_log, read_arrow, run_load
from spark_loader.expiry import TTL_TAG

pytestmark = pytest.mark.slow

NOW = 1_790_000_000.0  # the first run's clock, seconds
NOW_MS = int(NOW * 1000)
MINUTE, HOUR = 60_000, 3_600_000
RULES = TtlRules.of([Rule("root.w3t.**", HOUR), Rule("root.w3t.d2", None)])


def _rows(device: str, times: range, value: float) -> pa.Table:
    return pa.table(
        {
            "time": pa.array(list(times), pa.int64()),
            "device": pa.array([device] * len(times)),
            "s1": pa.array([value + t / 1e9 for t in times], pa.float64()),
        }
    )


def _alive(rows: list[tuple], now_ms: int, rules: TtlRules) -> list[tuple]:
    """What IoTDB answers at ``now_ms``: a point whose device has a TTL is kept while
    ``time >= now - ttl`` (TimeFilterForDeviceTTL)."""
    out = []
    for row in rows:
        ttl = rules.ttl_ms(row[3])
        if ttl is None or row[2] >= now_ms - ttl:
            out.append(row)
    return out


def _load(config: LoaderConfig, spark: Any, now: float) -> Any:
    report = run_load(config, spark=spark, sync=False, now=now)
    assert report.ok, report.skipped
    return report


def test_ttl_hides_expired_rows_and_later_runs_remove_them(tmp_path: Path, spark: Any) -> None:
    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    every_10 = range(NOW_MS - 2 * HOUR, NOW_MS + 1, 10 * MINUTE)  # now-2h .. now

    # a sequence TsFile of d1 (1h) and d2 (INF), and an unsequence one overwriting d1
    # inside it (a group of overlapping files: .resolve), a Parquet file of d3 alone,
    # an unsequence TsFile of d3 all expired, and a TsFile of a database without a TTL
    def minutes_ago(first: int, last: int) -> range:
        return range(NOW_MS - first * MINUTE, NOW_MS - last * MINUTE + 1, 10 * MINUTE)

    def write(rows: pa.Table, name: str, database: str = "root.w3t", **how: Any) -> str:
        return edge.write_table(rows, database, 0, name, **how)

    both = [_rows("root.w3t.d1", every_10, 1.0), _rows("root.w3t.d2", every_10, 2.0)]
    seq = write(pa.concat_tables(both), "1-1-0-0.tsfile")
    unseq = write(_rows("root.w3t.d1", minutes_ago(90, 30), 9.0), "2-2-0-0.tsfile", unsequence=True)
    lone = write(_rows("root.w3t.d3", every_10, 3.0), "3-3-0-0.parquet", fmt="parquet")
    # d3 overwritten where its points expired: nothing of it is answered until the TTL
    # is lifted, when it overlaps the Parquet file and wins
    gone = write(_rows("root.w3t.d3", minutes_ago(100, 70), 5.0), "5-5-0-0.tsfile", unsequence=True)
    other = write(_rows("root.other.d1", every_10, 4.0), "4-4-0-0.tsfile", "root.other")
    for rel in (seq, unseq, lone, gone, other):
        recv.place(edge, rel)
    config = dataclasses.replace(recv.config(tmp_path), ttl=RULES)
    everything = source_rows(recv)

    first = _load(config, spark, NOW)

    assert first.ttl_now == NOW_MS
    want = _alive(everything, NOW_MS, RULES)
    assert table_rows(config.table_path) == want
    # d1 and d3 keep the last hour (7 of 13 points), d2 (INF) and root.other all 13
    by_device: dict[str, int] = {}
    for row in want:
        by_device[row[3]] = by_device.get(row[3], 0) + 1
    assert by_device == {"root.w3t.d1": 7, "root.w3t.d2": 13, "root.w3t.d3": 7, "root.other.d1": 13}
    tags = [f.tags for f in delta_log.read(str(config.table_path)).files.values()]
    assert all(TTL_TAG in t for t in tags)
    version = table_versions(config.table_path)[-1]

    later = NOW + 30 * 60  # half an hour on: d1's and d3's next three points expire
    second = _load(config, spark, later)

    later_ms = NOW_MS + 30 * MINUTE
    assert second.expired == 3  # the group's two files and the Parquet file; not root.other
    assert table_rows(config.table_path) == _alive(everything, later_ms, RULES)
    assert len(table_rows(config.table_path)) == len(want) - 6
    # time travel: the version before still holds the rows expired since
    assert len(read_arrow(config.table_path, version)) == len(want)

    again = _load(config, spark, later)  # the same now: nothing to do, nothing committed

    assert again.expired == 0
    assert table_versions(config.table_path)[-1] == version + 1

    # the TTL removed (UNSET TTL): IoTDB answers the points again, and so does the table
    unset = _load(dataclasses.replace(config, ttl=TtlRules()), spark, later)

    assert unset.expired == 5  # every file written under the rule
    assert table_rows(config.table_path) == everything  # d3's overwrite resolved too
    assert sum(1 for row in everything if row[1] == gone) == 4
