"""The loader on a data centre's lake: the Delta table on a real HDFS and a real S3
server, loaded by a Spark cluster whose workers cannot see the receiver's folders.

On each store the whole chain runs as an operator runs it: edges write TsFiles and
Parquet files, ``sealsync send`` ships them over SSH to ``sealsync serve``, and the
loader (``run_load`` in the run's cluster driver, ``lake_driver``) loads what the
receiver holds; Spark SQL (in that driver) and ``deltalake`` (no JVM) read the table.
Deletions (``.mods2`` from the edge, ``.mods`` lines), a compaction that replaces two
files by one, a file removed by the edge, ``--full`` and time travel follow. Then the
loader, a ``sealsync load`` process, is killed (``kill -9``: the crash-point switch,
:mod:`sealsync.crashpoints`) at each step of a load on the store: while it copies the
received files to the store, after it moved a batch's files into their partitions,
just before its Delta commit and just after it. After each kill the table is as it was
(or, after the commit, as the run made it), and the next run leaves it as one clean
run would: every row once, one version for the round, no file of a killed run left.

The killed processes run on ``local[1]``: the steps killed are the driver's (the
copies, the moves, the commit), which a local master runs exactly as a cluster's
driver does, without starting executors for each process; the cluster is the driver's.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from deploy_helpers import SEALSYNC, Deployment, make_deployment
from lake_servers import Hdfs, S3Server, SparkCluster, SparkDriver
from spark_loader_helpers import (
    SENDER_A,
    SENDER_B,
    Receiver,
    answer,
    canonical,
    file_rows,
    source_rows,
)

from receiver.storage import DirectoryStorage
from sealsync.crashpoints import ENV_AT, ENV_NAMES, ENV_STOP
from sealsync.formats import mods
from sealsync.formats.deletion import MIN_TIME
from sealsync.simulator import EdgeInstance

pytestmark = pytest.mark.slow  # HDFS, s3proxy, a Spark cluster, SSH, loader processes

STORES = ("hdfs", "s3")
#: The steps of a load a process is killed at before its commit, in the order a run
#: meets them, per store: mid-upload on both; between the upload and the commit after
#: a batch's files moved in on one, just before the commit on the other (the same
#: state with every batch moved: each kill is a process start, the heavy part). Both
#: stores are killed just after the commit too.
KILLED_AT = {
    "hdfs": ("loader.upload.file", "loader.batch.moved"),
    "s3": ("loader.upload.file", "loader.commit.before"),
}
COMMITTED_AT = "loader.commit.after"


@dataclass
class Store:
    """One of the lake's stores as the loader and the readers reach it."""

    name: str
    root: str  # the URI folder tables go under
    conf: dict[str, str]  # what a loader file's [loader.spark] needs for it
    env: dict[str, str]  # what a loader process needs in its environment for it
    options: dict[str, str] | None  # deltalake's storage options

    def table(self, name: str) -> str:
        return f"{self.root}/{name}-{uuid.uuid4().hex[:8]}"

    def delta(self, uri: str, version: int | None = None) -> DeltaTable:
        """The table as ``deltalake`` reads it (its S3 client takes ``s3://``)."""
        where = "s3://" + uri.removeprefix("s3a://") if uri.startswith("s3a://") else uri
        return DeltaTable(where, version=version, storage_options=self.options)

    def rows(self, uri: str, version: int | None = None) -> list[tuple[Any, ...]]:
        return canonical(self.delta(uri, version).to_pyarrow_table().to_pylist())


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, lake_hdfs: Hdfs, lake_s3: S3Server) -> Store:
    if request.param == "hdfs":
        return Store("hdfs", f"{lake_hdfs.uri}/lake", lake_hdfs.spark_conf(), {}, None)
    # The credentials from the environment, as an operator keeps them out of the file.
    return Store(
        "s3",
        "s3a://lake/tables",
        lake_s3.spark_conf(credentials=False),
        {k: v for k, v in lake_s3.env().items() if k.startswith("AWS_") and "KEY" in k},
        lake_s3.storage_options(),
    )


@pytest.fixture
def driver(lake_driver: SparkDriver) -> Iterator[SparkDriver]:
    yield lake_driver


def loader_file(path: Path, data_dirs: list[Path], table: str, master: str, store: Store) -> Path:
    """A loader's file: its receiver's data dirs, the table on the store, its state."""
    dirs = ", ".join(f'"{d}"' for d in data_dirs)
    lines = [
        "[loader]",
        f"receiver_data_dirs = [{dirs}]",
        f'table_path = "{table}"',
        f'state_dir = "{path.parent / (path.stem + "-state")}"',
        f'master = "{master}"',
        f'python = "{sys.executable}"',
        "[loader.spark]",
        '"spark.databricks.delta.snapshotPartitions" = "2"',
        *(f'"{k}" = "{v}"' for k, v in store.conf.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


def load_process(
    config: Path, store: Store, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``sealsync load`` on ``local[1]`` as a process of its own (killed at ``crash_at``)."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_NAMES}
    env.update(store.env)
    if crash_at is not None:
        env[ENV_AT] = crash_at
    return subprocess.run(
        [*SEALSYNC, "load", "--config", str(config), "--master", "local[1]"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def received_rows(site: Deployment) -> list[tuple[Any, ...]]:
    """What the table must hold: IoTDB's answer from every file the receiver holds,
    read independently of the loader, deletions applied."""
    storage = DirectoryStorage([site.receiver_data])
    files = {}
    for sender in site.senders:
        for name in storage.list(sender.uuid):
            path = storage.target(site.receiver_data, sender.uuid, name)
            files[(sender.uuid, name)] = file_rows(path).to_pylist()
    return answer(files)


def sent(site: Deployment) -> None:
    for sender in site.senders:
        result = sender.send()
        assert result.returncode == 0, result.stderr


def add_mods_line(edge: EdgeInstance, rel: str, device: str, until_ms: int) -> None:
    """A ``.mods`` deletion (IoTDB 0.12-1.x's text form) beside an edge's file."""
    size = edge.path(rel).stat().st_size
    with open(f"{edge.path(rel)}.mods", "a", encoding="utf-8") as f:
        f.write(mods.line(f"{device}.*", size, MIN_TIME, until_ms))


def loaded(driver: SparkDriver, config: Path, **options: Any) -> dict[str, Any]:
    report: dict[str, Any] = driver.call("load", config=str(config), **options)["report"]
    assert report["ok"] and not report["skipped"], repr(report)[:3000]
    return report


def spark_rows(driver: SparkDriver, uri: str, version: int | None = None) -> list[tuple[Any, ...]]:
    return canonical(driver.call("rows", uri=uri, version=version)["rows"])


def _below(uri: str, found: str) -> str:
    """``found`` (a URI of a file in the table ``uri``, as a store or a reader spells
    it) relative to the table."""
    name = "/" + uri.rstrip("/").rsplit("/", 1)[1] + "/"
    return found[found.index(name) + len(name) :]


def listed(driver: SparkDriver, uri: str) -> list[str]:
    """Every file below the table on its store, relative to it."""
    return [_below(uri, f) for f in driver.call("list", uri=uri)["files"]]


def loader_leftovers(driver: SparkDriver, uri: str) -> list[str]:
    """Files below the table that are neither its log nor data: what a killed or
    failed run would leave behind (working folders, a list of uncommitted files)."""
    return [f for f in listed(driver, uri) if f.startswith((".", "_")) and "_delta_log/" not in f]


def data_files(driver: SparkDriver, uri: str) -> set[str]:
    return {f for f in listed(driver, uri) if not f.startswith((".", "_"))}


def logged_files(store: Store, uri: str) -> set[str]:
    """Every data file some version of the table holds (time travel reads them)."""
    out: set[str] = set()
    for version in range(store.delta(uri).version() + 1):
        out |= {_below(uri, f) for f in store.delta(uri, version).file_uris()}
    return out


def test_the_chain_on_each_store_and_a_kill_at_each_step(
    store: Store,
    driver: SparkDriver,
    lake_cluster: SparkCluster,
    tmp_path: Path,
) -> None:
    site = make_deployment(tmp_path / "site", senders=2)
    a, b = site.senders
    a_files = [
        a.edge.write_file("root.a", 0, devices=["root.a.d0", "root.a.d1"], rows_per_device=300),
        a.edge.write_file("root.a", 1, devices=["root.a.d0"], rows_per_device=200, start_ms=10**6),
        a.edge.write_file(
            "root.a", 2, devices=["root.a.d2"], rows_per_device=250, start_ms=2 * 10**6
        ),
        a.edge.write_file("root.ap", 0, devices=["root.ap.d0"], rows_per_device=150, fmt="parquet"),
    ]
    b_files = [
        b.edge.write_file("root.b", 0, devices=["root.b.d0"], rows_per_device=400),
        b.edge.write_file(
            "root.b", 1, devices=["root.b.d1"], rows_per_device=100, unsequence=True, fmt="parquet"
        ),
    ]
    site.start_receiver()
    try:
        sent(site)
        table = store.table("chain")
        config = loader_file(
            tmp_path / "loader.toml", [site.receiver_data], table, lake_cluster.url, store
        )

        first = loaded(driver, config)

        assert first["ingested"] == 6
        expected = received_rows(site)
        assert store.rows(table) == expected == spark_rows(driver, table)
        v_first = store.delta(table).version()

        # Deletions, a compaction replacing two files by one, a file the edge removed.
        a.edge.add_mods(a_files[0], "root.a.d0", 100_000)  # .mods2, IoTDB 2.x's
        add_mods_line(b.edge, b_files[0], "root.b.d0", 50_000)  # .mods, 0.12-1.x's
        merged = a.edge.merge(a_files[1:3], "root.a", 1)
        a.edge.delete(a_files[3])
        sent(site)

        second = loaded(driver, config)

        assert (second["ingested"], second["removed"]) == (3, 5), second
        changed = received_rows(site)
        assert changed != expected and merged
        assert store.rows(table) == changed == spark_rows(driver, table)
        v_second = store.delta(table).version()
        assert v_second == v_first + 1

        full = loaded(driver, config, full=True)

        assert full["ingested"] == 4
        assert store.rows(table) == changed == spark_rows(driver, table)
        assert store.delta(table).version() == v_second + 1
        # Every version stays readable as it was: time travel on both readers.
        assert store.rows(table, v_first) == expected == spark_rows(driver, table, v_first)
        assert store.rows(table, v_second) == changed == spark_rows(driver, table, v_second)
        assert loader_leftovers(driver, table) == []

        # A round of changes, then a loader process killed at each step of its load.
        a.edge.write_file("root.a", 3, devices=["root.a.d3"], rows_per_device=120, start_ms=9**7)
        b.edge.add_mods(b_files[1], "root.b.d1", 30_000)
        sent(site)
        before, version = store.rows(table), store.delta(table).version()
        for point in KILLED_AT[store.name]:
            killed = load_process(config, store, crash_at=point)
            assert killed.returncode == -9, (point, killed.stderr)
            assert store.rows(table) == before and store.delta(table).version() == version
        committed = load_process(config, store, crash_at=COMMITTED_AT)
        assert committed.returncode == -9, committed.stderr
        final = received_rows(site)
        assert store.delta(table).version() == version + 1
        assert store.rows(table) == final

        last = loaded(driver, config)

        assert last["ingested"] == 0, last  # the killed run's commit stands, adopted
        assert store.delta(table).version() == version + 1  # nothing committed twice
        assert store.rows(table) == final == spark_rows(driver, table)
        assert loader_leftovers(driver, table) == []
        assert data_files(driver, table) == logged_files(store, table)
    finally:
        site.stop_receiver()


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP: its crash-point switch froze it)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_a_version_s_file_two_writers_create_at_once_stays_the_first_s(
    store: Store, driver: SparkDriver
) -> None:
    """What makes a Delta version appear once: a log store creates the version's file
    without overwrite, and of two writers doing that at once (both streams open before
    either closes, both past any existence check) the second must fail and the
    first's content stay. HDFS refuses the second create. S3 does not, by default:
    Delta's own S3 log store (a check, then a plain create) would let a second loader
    replace a commit; the loader's log store asks S3A for a conditional PUT
    (``If-None-Match: *``), which the server refuses with 412, and reports it to Delta
    as the file already there."""
    uri = store.table("version") + "/00000000000000000000.json"
    plain = driver.call("two_creates", uri=uri)
    if store.name == "hdfs":
        assert plain["outcome"][0] is None and plain["outcome"][1] is not None, plain
        assert plain["holds"] == "first"
        return
    assert plain["outcome"] == [None, None] and plain["holds"] == "second", plain  # replaced
    again = store.table("version") + "/00000000000000000000.json"
    conditional = driver.call("two_creates", uri=again, conditional=True)
    first, second = conditional["outcome"]
    assert first is None and second is not None and "412" in second, conditional
    assert conditional["holds"] == "first"
    logged = driver.call("log_store_writes", uri=store.table("log") + "/00000000000000000000.json")
    assert logged["outcome"] == [None, "java.nio.file.FileAlreadyExistsException"], logged
    assert logged["holds"] == "first\n"


def test_two_loaders_racing_on_one_table_lose_no_commit(
    store: Store, driver: SparkDriver, tmp_path: Path
) -> None:
    """Two receivers, each with its own senders and its own loader (state dir, loader
    id), feed one table. Both loaders are frozen just before their Delta commits, each
    having read the same version, and let go together: Delta's optimistic concurrency
    puts both commits in (their files are disjoint), or fails the later one with one
    line (exit 1) and its next run commits; either way every row of both receivers is
    in the table once, and neither loader touched the other's files."""
    edge = EdgeInstance(tmp_path / "edge")
    receivers = [Receiver(tmp_path / "east"), Receiver(tmp_path / "west")]
    senders = (SENDER_A, SENDER_B)
    for n in range(2):
        rel = edge.write_file(f"root.r{n}", 0, devices=[f"root.r{n}.d0"], rows_per_device=90)
        receivers[n].place(edge, rel, senders[n])
    table = store.table("race")
    configs = [
        loader_file(tmp_path / f"{name}.toml", recv.data_dirs, table, "local[1]", store)
        for name, recv in zip(("east", "west"), receivers, strict=True)
    ]
    loaded(driver, configs[0])  # the table exists, and each loader has a run behind it
    loaded(driver, configs[1])
    version = store.delta(table).version()
    for n in range(2):
        rel = edge.write_file(f"root.r{n}", 1, devices=[f"root.r{n}.d1"], rows_per_device=70)
        receivers[n].place(edge, rel, senders[n])

    env = {k: v for k, v in os.environ.items() if k not in ENV_NAMES}
    env.update(store.env)
    env[ENV_STOP] = "loader.commit.before"
    procs = [
        subprocess.Popen(
            [*SEALSYNC, "load", "--config", str(c), "--master", "local[1]"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in configs
    ]
    try:
        deadline = time.monotonic() + 600
        while not all(_stopped(p.pid) for p in procs):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline, "the loaders never reached their commits"
            time.sleep(0.1)
        assert store.delta(table).version() == version  # both read it, neither committed
        for p in procs:
            p.send_signal(signal.SIGCONT)
        results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    lost = [n for n, (code, _, _) in enumerate(results) if code != 0]
    assert len(lost) <= 1, results
    if not lost:  # both read the same version: the later one's first try was refused
        said = sorted(re.findall(r"committed version (\d+) ", e)[0] for _, _, e in results)
        assert said == [str(version + 1), str(version + 2)], results
    for n in lost:  # the later commit failed: one line, nothing of it in the table
        code, _, err = results[n]
        assert code == 1 and "nothing committed" in err and len(err.splitlines()) == 1, err
        assert store.delta(table).version() == version + 1
        assert loaded(driver, configs[n])["ingested"] == 1
    assert store.delta(table).version() == version + 2
    expected = sorted(source_rows(receivers[0]) + source_rows(receivers[1]), key=repr)
    assert store.rows(table) == expected == spark_rows(driver, table)
    for config in configs:  # each loader's next run finds its own files in, nothing to do
        report = loaded(driver, config)
        assert (report["ingested"], report["removed"], report["unchanged"]) == (0, 0, 2)
        assert any("another loader's, left as they are" in n for n in report["notes"])
    assert store.delta(table).version() == version + 2
    assert loader_leftovers(driver, table) == []
