"""`sealsync load --full` on the Delta table, against a reader polling it: the rebuild is
one overwrite commit, so every count a reader gets (``deltalake``, no JVM, no contract of
ours) is the old table's or the new one's, never empty or partial; the versions before
stay readable (time travel). A killed rebuild leaves the old table serving, and its files
are removed by the next run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from config_helpers import loader_config_file
from spark_loader_helpers import (
    SENDER_B,
    partition_dirs,
    source_rows,
    table_rows,
    table_versions,
    two_senders,
    uncommitted_list,
)

from sealsync.config import LoaderConfig
from spark_loader import delta_log, run_load

pytestmark = pytest.mark.slow  # Spark, and sealsync processes

READER = """
import json, sys, time
from pathlib import Path
from deltalake import DeltaTable
table, out, stop = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
with open(out, "w") as f:
    while not stop.exists():
        try:
            t = DeltaTable(table)
            rows = t.to_pyarrow_dataset().count_rows()
            f.write(json.dumps([time.time(), rows, t.version()]) + "\\n")
        except Exception as exc:
            f.write(json.dumps([time.time(), type(exc).__name__, -1]) + "\\n")
        f.flush()
"""


def _old_table_and_a_new_file(tmp_path: Path, spark: Any) -> tuple[Any, LoaderConfig, int, int]:
    """A table loaded from four files, then a fifth file on the receiver: the full
    rebuild's table has more rows than the old one."""
    edge, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    run_load(config, spark=spark, sync=False)
    old = len(table_rows(config.table_path))
    extra = edge.write_file("root.sg9", 0, devices=["root.sg9.d1"], rows_per_device=33)
    recv.place(edge, extra, SENDER_B)
    return recv, config, old, old + 33


def test_a_reader_sees_the_old_or_the_new_table_during_a_full_rebuild(
    tmp_path: Path, spark: Any
) -> None:
    recv, config, old, new = _old_table_and_a_new_file(tmp_path, spark)
    before = partition_dirs(config.table_path)
    out, stop = tmp_path / "reads.jsonl", tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(config.table_path), str(out), str(stop)]
    )
    try:
        deadline = time.monotonic() + 120
        while not out.exists() or not out.read_text():
            assert time.monotonic() < deadline, "the reader never read"
            time.sleep(0.05)  # the reader is reading
        started = time.time()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "sealsync",
                "load",
                "--config",
                str(loader_config_file(tmp_path / "loader.toml", config)),
                "--full",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        ended = time.time()
        time.sleep(1.0)  # the reader reads the new table for a while
    finally:
        stop.touch()
        reader.wait(60)

    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert any("in one commit" in note for note in doc["notes"]), doc["notes"]
    reads = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r for _, r, _ in reads if not isinstance(r, int)} == set()  # no reader error
    assert {(v, r) for _, r, v in reads} == {(0, old), (1, new)}  # whole versions only
    during = [r for t, r, _ in reads if started <= t <= ended]
    assert during.count(old) >= 5  # the old table served throughout the rebuild
    assert reads[-1][1] == new
    assert table_versions(config.table_path) == [0, 1]  # the rebuild: one commit
    assert table_rows(config.table_path) == source_rows(recv)
    assert len(partition_dirs(config.table_path)) == 5
    assert partition_dirs(config.table_path, version=0) == before  # time travel
    files = [set(delta_log.read(config.table_path, v).files) for v in (0, 1)]
    assert len(files[0]) == 4 and len(files[1]) == 5 and not files[0] & files[1]
    assert len(table_rows_as_of(config.table_path, 0)) == old
    assert not [n for n in os.listdir(Path(config.table_path).parent) if "sealsync-" in n]


def table_rows_as_of(table: Path, version: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = delta_log.read_arrow(table, version).to_pylist()
    return rows


def test_a_killed_full_rebuild_leaves_the_old_table_and_its_files_are_removed(
    tmp_path: Path, spark: Any
) -> None:
    recv, config, old, new = _old_table_and_a_new_file(tmp_path, spark)
    before = partition_dirs(config.table_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sealsync",
            "load",
            "--config",
            str(loader_config_file(tmp_path / "loader.toml", config)),
            "--full",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = uncommitted_list(config)
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, "the rebuild ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)  # the rebuild's files are moving in, uncommitted
    proc.wait()
    written = json.loads(marker.read_text())["files"]
    assert written

    assert partition_dirs(config.table_path) == before  # the old table is untouched
    assert len(table_rows(config.table_path)) == old
    assert table_versions(config.table_path) == [0]

    report = run_load(config, spark=spark, sync=False)

    assert any("a run killed before its commit wrote" in n for n in report.notes), report.notes
    assert not [f for f in written if (Path(config.table_path) / f).exists()]
    assert report.ingested == 1 and len(table_rows(config.table_path)) == new
    assert table_rows(config.table_path) == source_rows(recv)
    assert table_versions(config.table_path) == [0, 1]
