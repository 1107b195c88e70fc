"""The data centre's lake the tests start works: a Spark cluster whose executors cannot
see the driver's folders writes a Delta table to a real HDFS and to a real S3 server,
reads it back, and ``deltalake`` (no JVM) reads the same table through the store.

The servers are the run's (``lake_hdfs``, ``lake_s3``, ``lake_cluster`` in
``tests/conftest.py``); one driver, a process of its own on the cluster (``lake_driver``),
serves every test here and the loader's lake tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from deltalake import DeltaTable
from lake_servers import Hdfs, S3Server, SparkDriver

pytestmark = pytest.mark.slow  # JVMs: HDFS, s3proxy, a Spark master, workers, a driver

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def driver(lake_driver: SparkDriver) -> SparkDriver:
    return lake_driver  # the run's (tests/conftest.py): one session for every lake test


def _rows(first: int, count: int) -> list[list[int]]:
    return [[i, 2 * i] for i in range(first, first + count)]


def _arrow_rows(table: DeltaTable) -> list[list[int]]:
    data = table.to_pyarrow_table().to_pydict()
    return sorted([i, d] for i, d in zip(data["id"], data["doubled"], strict=True))


def test_executors_cannot_open_the_driver_s_files(driver: SparkDriver, tmp_path: Path) -> None:
    """A file the driver reads is not there for any task, on either worker; a file
    outside the run's folders (the project's own) is."""
    received = tmp_path / "received.tsfile"
    received.write_text("edge data")

    seen = driver.call("look", path=str(received), tasks=8)

    assert seen["driver"] == {**seen["driver"], "read": "edge data"}
    assert seen["driver"]["mnt"] == os.readlink("/proc/self/ns/mnt")  # the driver is here
    namespaces = {task["mnt"] for task in seen["tasks"]}
    assert len(namespaces) == 2 and seen["driver"]["mnt"] not in namespaces  # two workers
    assert {task.get("error") for task in seen["tasks"]} == {"FileNotFoundError"}
    shared = driver.call("look", path=str(ROOT / "pyproject.toml"), tasks=2)
    text = (ROOT / "pyproject.toml").read_text()
    assert [task.get("read") for task in shared["tasks"]] == [text, text]


def test_a_delta_table_on_hdfs(driver: SparkDriver, lake_hdfs: Hdfs) -> None:
    uri = f"{lake_hdfs.uri}/lake/points"
    driver.call("write", uri=uri, first=0, count=1000, mode="overwrite")
    driver.call("write", uri=uri, first=1000, count=500)

    now, then = driver.call("read", uri=uri), driver.call("read", uri=uri, version=0)

    assert now["rows"] == _rows(0, 1500) and then["rows"] == _rows(0, 1000)
    assert now["files"] and all(f.startswith(f"{uri}/part-") for f in now["files"])
    # deltalake reads hdfs:// itself (a Rust HDFS client, no JVM, no Hadoop config).
    table = DeltaTable(uri)
    assert table.version() == 1
    assert _arrow_rows(table) == _rows(0, 1500)
    assert _arrow_rows(DeltaTable(uri, version=0)) == _rows(0, 1000)


def test_a_delta_table_on_s3(
    driver: SparkDriver, lake_s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = "s3a://lake/points"
    driver.call("write", uri=uri, first=0, count=1000, mode="overwrite")
    driver.call("write", uri=uri, first=1000, count=500)

    now, then = driver.call("read", uri=uri), driver.call("read", uri=uri, version=0)

    assert now["rows"] == _rows(0, 1500) and then["rows"] == _rows(0, 1000)
    assert now["files"] and all(f.startswith(f"{uri}/part-") for f in now["files"])
    # Every object is in the server's store: the log's two versions and the data files.
    log = lake_s3.store / "lake" / "points" / "_delta_log"
    assert {p.name for p in log.glob("*.json")} == {f"{v:020d}.json" for v in (0, 1)}
    stored = {p.name for p in (lake_s3.store / "lake" / "points").glob("part-*.parquet")}
    assert stored == {f.rsplit("/", 1)[1] for f in now["files"]}
    options = lake_s3.storage_options()
    table = DeltaTable("s3://lake/points", storage_options=options)
    assert table.version() == 1
    assert _arrow_rows(table) == _rows(0, 1500)
    # The credentials from the environment instead, as an operator keeps them.
    for key, value in lake_s3.env().items():
        monkeypatch.setenv(key, value)
    plain = {k: v for k, v in options.items() if "KEY" not in k}
    assert _arrow_rows(DeltaTable("s3a://lake/points", version=0, storage_options=plain)) == (
        _rows(0, 1000)
    )
