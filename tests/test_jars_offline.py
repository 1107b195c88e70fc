"""A cluster load with Maven Central unreachable: the jars come from a folder that
``sealsync jars fetch`` filled, and nothing is resolved.

The master, its worker and ``sealsync load`` run in a network namespace of their own
with only a loopback interface, and the load's ivy home is empty: any resolution would
have to reach Maven Central, and cannot. The same load without ``jars_dir`` shows it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from config_helpers import write_config
from lake_servers import SparkCluster, offline_network, spark_cluster
from spark_loader_helpers import Receiver, source_rows, table_rows, two_senders

from spark_loader import jars_dir, jvm

pytestmark = pytest.mark.slow  # a real fetch, a Spark cluster, two loads

ROOT = Path(__file__).resolve().parent.parent


def _sealsync(prefix: Sequence[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "sealsync", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _config(tmp_path: Path, name: str, recv: Receiver, cluster: SparkCluster, **more: Any) -> Path:
    ivy = tmp_path / f"ivy-{name}"  # empty: a resolution would have to download
    ivy.mkdir()
    loader: dict[str, Any] = {
        "receiver_data_dirs": [str(d) for d in recv.data_dirs],
        "table_path": str(tmp_path / "table"),
        "state_dir": str(tmp_path / f"state-{name}"),
        "master": cluster.url,
        "python": sys.executable,
        "spark": {
            **cluster.spark_conf(),
            "spark.executor.memory": "1g",
            "spark.jars.ivy": str(ivy),
        },
        **more,
    }
    return write_config(tmp_path / f"{name}.toml", {"loader": loader})


def test_a_cluster_load_without_maven_central_takes_the_jars_dir(tmp_path: Path) -> None:
    folder = tmp_path / "jars"
    fetched = _sealsync((), "jars", "fetch", str(folder))
    assert fetched.returncode == 0, fetched.stderr
    listed = json.loads((folder / jars_dir.MANIFEST).read_text())
    assert listed["packages"] == jvm.packages()[0]
    names = set(listed["jars"])
    assert {
        "io.delta_delta-spark_2.13-4.4.0.jar",
        f"org.apache.tsfile_tsfile-{jvm.TSFILE_VERSION}.jar",
    } <= names
    assert {p.name for p in folder.glob("*.jar")} == names
    _, recv = two_senders(tmp_path)

    with (
        offline_network() as prefix,
        spark_cluster(prefix=prefix, workers=1, cores=2) as cluster,
    ):
        # Without the folder the session must resolve, and Maven Central is not there.
        resolving = _sealsync(
            prefix, "load", "--config", str(_config(tmp_path, "resolving", recv, cluster))
        )
        written = sorted((tmp_path / "table").rglob("*.parquet"))
        offline = _config(tmp_path, "offline", recv, cluster, jars_dir=str(folder))
        loaded = _sealsync(prefix, "load", "--json", "--config", str(offline))
        apps = cluster.state().get("completedapps", [])

    assert resolving.returncode == 1, resolving.stderr
    error = resolving.stderr.strip().splitlines()[-1]
    assert error.startswith("sealsync: error: cannot start Spark on spark://"), error
    assert "io.delta#delta-spark_2.13" in error or "unresolved dependency" in error, error
    assert written == []

    assert loaded.returncode == 0, loaded.stderr
    report = json.loads(loaded.stdout)
    assert (report["ok"], report["ingested"]) == (True, 4)
    assert table_rows(tmp_path / "table") == source_rows(recv)
    assert not any((tmp_path / "ivy-offline").iterdir())  # ivy was never asked
    assert [app["name"] for app in apps] == ["sealsync-load"]  # on the cluster
