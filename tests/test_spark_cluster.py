"""`sealsync load --master spark://...` on a real Spark standalone cluster.

A master and one worker are started from PySpark's own launcher on loopback
(``tests/lake_servers.py``), so the executors are separate JVMs with their own Python
workers: the TsFile reader runs from the package the loader ships, with the
interpreter `[loader] python` names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from config_helpers import write_config
from java_servers import free_ports
from lake_servers import SparkCluster, spark_cluster
from spark_loader_helpers import Receiver, partition_dirs, source_rows, table_rows, two_senders

from spark_loader.table import Table

pytestmark = pytest.mark.slow  # a Spark standalone cluster: JVMs and Python workers

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkCluster]:
    with spark_cluster(workers=1, cores=2) as found:
        yield found


def _config(tmp_path: Path, recv: Receiver, python: str | None) -> Path:
    loader: dict[str, Any] = {
        "receiver_data_dirs": [str(d) for d in recv.data_dirs],
        "table_path": str(tmp_path / "table"),
        "state_dir": str(tmp_path / "state"),
        "spark": {"spark.driver.host": "127.0.0.1", "spark.executor.memory": "1g"},
    }
    if python is not None:
        loader["python"] = python
    return write_config(tmp_path / "loader.toml", {"loader": loader})


def _load(config: Path, master: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sealsync",
            "load",
            "--config",
            str(config),
            "--master",
            master,
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def test_loads_both_formats_on_a_standalone_cluster(tmp_path: Path, cluster: SparkCluster) -> None:
    _, recv = two_senders(tmp_path)
    ts_a, _, _, pq_b = list(recv.placed)
    # Deletions reach the executors: in the TsFile rows, and in the Parquet scan's plan.
    recv.add_mods(ts_a[1], "root.sg1.d1", 9000, ts_a[0])
    recv.add_mods(pq_b[1], "root.sg2.d8", 1000, pq_b[0])
    done_before = len(cluster.state().get("completedapps", []))

    result = _load(_config(tmp_path, recv, sys.executable), cluster.url)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["ok"], report["ingested"], report["skipped"]) == (True, 4, {})
    assert report["rows_written"] == 155 - 10 - 2
    rows = table_rows(tmp_path / "table")
    assert rows == source_rows(recv)
    points = {row[:4] for row in rows}
    assert (*ts_a, 9000, "root.sg1.d1") not in points and (*ts_a, 10000, "root.sg1.d1") in points
    assert (*pq_b, 1000, "root.sg2.d8") not in points and (*pq_b, 2000, "root.sg2.d8") in points
    assert len(partition_dirs(tmp_path / "table")) == 4
    apps = cluster.state().get("completedapps", [])
    assert len(apps) == done_before + 1 and apps[-1]["name"] == "sealsync-load"


def test_executors_without_pyarrow_fail_the_run_in_one_line(
    tmp_path: Path, cluster: SparkCluster
) -> None:
    """The workers' interpreter lacks a dependency: one error line, nothing written."""
    _, recv = two_senders(tmp_path)
    fake = tmp_path / "fake-site" / "pyarrow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('pyarrow is not installed here')\n")
    python = tmp_path / "python-without-pyarrow"
    python.write_text(
        f'#!/bin/sh\nPYTHONPATH="{fake.parent}:$PYTHONPATH" exec "{sys.executable}" "$@"\n'
    )
    python.chmod(0o755)

    result = _load(_config(tmp_path, recv, str(python)), cluster.url)

    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == (
        f"sealsync: error: executors cannot read received files with {python}: ImportError: "
        "pyarrow is not installed here; set [loader] python to an interpreter on the "
        "workers that has pyarrow and tsfile"
    )
    assert "Traceback" not in result.stderr
    assert Table(tmp_path / "table").partitions() == {}


def test_an_unreachable_master_is_one_error_line_in_seconds(tmp_path: Path) -> None:
    """A master that refuses the connection: one line naming it and the fix, exit 1, at
    once rather than after Spark's minute of registration retries."""
    _, recv = two_senders(tmp_path)
    (port,) = free_ports(1)
    master = f"spark://127.0.0.1:{port}"

    started = time.monotonic()
    result = _load(_config(tmp_path, recv, sys.executable), master)
    seconds = time.monotonic() - started

    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"sealsync: error: cannot start Spark on {master}: no master answers "
        f"(127.0.0.1:{port}: Connection refused): start the master, or fix --master or "
        "the [loader] master key"
    )
    assert "Traceback" not in result.stderr
    assert seconds < 30, seconds  # Spark alone takes 60 s to give up
    assert Table(tmp_path / "table").partitions() == {}
