"""Puts ``tests/`` on ``sys.path`` for every test, including those in sub-folders, so
shared helpers (``deploy_helpers``, ``config_helpers``...) import the same way; holds
the fixtures more than one test module needs; and keeps the ``slow`` marks honest.

``pytest -m "not slow"`` is the quick day-to-day run, so a test outside it must stay in
this process: one that starts a process (subprocess, multiprocessing, a fork), opens
an SSH transport, or runs while a Spark context is up fails at teardown unless it is
marked ``slow``. The marks are checked in every run, the full one included.
"""

from __future__ import annotations

import functools
import multiprocessing.process
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko
import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from proc_helpers import clip  # noqa: E402 - importable once tests/ is on the path

if TYPE_CHECKING:
    from deploy_helpers import Deployment
    from iotdb_server import IoTDBServer
    from lake_servers import Hdfs, S3Server, SparkCluster, SparkDriver


class _HeavyUse:
    """What the running test (setup, call and teardown) started that the quick run
    must not: ``seen`` is None between tests."""

    def __init__(self) -> None:
        self.seen: list[str] | None = None
        self.shared_spark: Any = None
        """The ``spark`` fixture's context while it is up: it outlives the tests that
        asked for it, so only those are charged with it."""

    def note(self, what: str) -> None:
        seen = self.seen
        if seen is not None and len(seen) < 3:
            seen.append(what)

    def watch(self, owner: Any, name: str, describe: Callable[..., str]) -> None:
        """Wrap ``owner.name`` to note ``describe(*args)`` each time it is called."""
        real = getattr(owner, name)

        @functools.wraps(real)
        def watched(*args: Any, **kwargs: Any) -> Any:
            self.note(describe(*args, **kwargs))
            return real(*args, **kwargs)

        setattr(owner, name, watched)

    def note_spark(self, item: pytest.Item) -> None:
        pyspark = sys.modules.get("pyspark")
        active = None if pyspark is None else pyspark.SparkContext._active_spark_context
        if active is None:
            return
        if active is self.shared_spark and "spark" not in getattr(item, "fixturenames", ()):
            return  # the shared session, up since an earlier test
        self.note("a Spark context")


_heavy = _HeavyUse()


def pytest_configure(config: pytest.Config) -> None:
    import exit_guard

    config.pluginmanager.register(exit_guard, "sealsync-exit-guard")


def _command(popen: subprocess.Popen[Any], args: Any, *_: Any, **__: Any) -> str:
    words = [str(a) for a in args] if isinstance(args, list | tuple) else [str(args)]
    return f"the process `{clip(' '.join(words))}`"


_heavy.watch(subprocess.Popen, "_execute_child", _command)
_heavy.watch(multiprocessing.process.BaseProcess, "start", lambda proc: f"the process {proc.name}")
_heavy.watch(os, "fork", lambda: "a fork")
_heavy.watch(paramiko.Transport, "__init__", lambda *_a, **_k: "an SSH transport")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _heavy.seen = []
    try:
        return (yield)
    finally:
        _heavy.seen = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    try:
        return (yield)
    finally:
        _heavy.note_spark(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.when == "teardown" and report.passed and _heavy.seen:
        if item.get_closest_marker("slow") is None:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} started {'; '.join(_heavy.seen)} but is not marked slow: "
                "mark it (pytestmark = pytest.mark.slow, or @pytest.mark.slow), or keep "
                "it in this process"
            )
    return report


def _no_flush(fd: int) -> None:
    """``os.fsync`` for the quick run: the data stays in the page cache."""


@pytest.fixture(autouse=True)
def _quick_run_does_not_flush(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests outside ``slow`` skip the disk flush.

    No test here cuts the power: crashes are simulated by raising or by SIGKILL, after
    which the page cache still holds every write, so a flush changes no outcome, only
    the time (most of it, in the crash-loop tests on a busy disk). Tests that check
    when a flush happens patch it themselves. The ``slow`` tests keep real flushes.
    """
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setattr(os, "fsync", _no_flush)
        monkeypatch.setattr(os, "fdatasync", _no_flush)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local Spark session (two cores) for every test that takes ``spark``.

    A session is a JVM that takes seconds to start. The tests that use this one only
    run jobs on it and leave its settings as they found them (the loader's
    ``run_conf`` restores what it sets), so one serves the whole run; a test that
    needs a session of its own (another master, other settings) starts one itself.
    ``run_load`` without a session uses this one while it is up, so a test that starts
    Spark that way unmarked is caught by the quick run, where this one never starts.
    """
    from spark_loader.spark_session import create_session

    session = create_session("local[2]", tmp_path_factory.mktemp("spark-logs"))
    _heavy.shared_spark = session.sparkContext
    try:
        yield session
    finally:
        _heavy.shared_spark = None
        session.stop()


@pytest.fixture(scope="session")
def tsfile_corpus() -> list[Any]:
    """The TsFiles IoTDB's own Java writers generate, each with the Java reader's answer
    (``tsfile_corpus.Entry``); built by Maven on first use, then cached. Tests using it
    are ``slow``."""
    import tsfile_corpus

    return list(tsfile_corpus.corpus())


@pytest.fixture
def trusting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust folder listings and identities at once.

    Everything a test writes is milliseconds old, so the scan cache and the idle mark
    would otherwise never rely on it and their short ways would go untested.
    """
    from sender.manage import scan_cache

    monkeypatch.setattr(scan_cache, "RACY_NS", -(10**18))


@pytest.fixture
def start_deployment(tmp_path: Path) -> Iterator[Callable[..., Deployment]]:
    """Builds a deployment under ``tmp_path/site`` with its ``sealsync serve`` running;
    the receiver is stopped after the test, whatever it did."""
    from deploy_helpers import make_deployment

    started: list[Deployment] = []

    def start(senders: int = 1, data_dirs: int = 1) -> Deployment:
        dep = make_deployment(tmp_path / "site", senders=senders, data_dirs=data_dirs)
        started.append(dep)
        dep.start_receiver()
        return dep

    yield start
    for dep in reversed(started):
        dep.stop_receiver()


@pytest.fixture
def iotdb_server(tmp_path: Path) -> Iterator[Callable[[str], IoTDBServer]]:
    """Starts a real IoTDB release, ``iotdb_server("2.0.1-beta")``, under ``tmp_path``
    (see ``tests/iotdb_server.py``); every server it started is stopped after the test."""
    from iotdb_server import RELEASES, IoTDBServer

    started: list[IoTDBServer] = []

    def start(version: str) -> IoTDBServer:
        server = IoTDBServer(RELEASES[version], tmp_path / f"iotdb-{version}-{len(started)}")
        started.append(server)
        return server.start()

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture(scope="session")
def lake_hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hdfs]:
    """A real HDFS (NameNode and DataNode of PySpark's Hadoop release) for the whole run,
    its root at ``lake_hdfs.uri`` (``tests/lake_servers.py``)."""
    from lake_servers import Hdfs

    with Hdfs(tmp_path_factory.mktemp("hdfs")).running() as server:
        yield server


@pytest.fixture(scope="session")
def lake_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3-compatible server (s3proxy) with the bucket ``lake``, for the whole run;
    ``spark_conf()``, ``storage_options()`` and ``env()`` say how to reach it."""
    from lake_servers import S3Server

    with S3Server(tmp_path_factory.mktemp("s3")).running() as server:
        yield server


@pytest.fixture(scope="session")
def lake_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A Spark standalone master with two workers for the whole run, each worker unable
    to see any folder of this run's ``tmp_path``s (receiver data, state, local tables):
    what reaches the executors must go through the driver or a shared store."""
    from lake_servers import spark_cluster

    with spark_cluster([tmp_path_factory.getbasetemp()]) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def lake_driver(
    lake_cluster: SparkCluster,
    lake_hdfs: Hdfs,
    lake_s3: S3Server,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SparkDriver]:
    """A Spark driver on ``lake_cluster`` (a process of its own: ``SparkDriver``) with the
    loader's session, set up for ``lake_hdfs`` and ``lake_s3``, for the whole run: every
    test that reads or loads through the cluster shares its executors."""
    from lake_servers import SparkDriver

    work = tmp_path_factory.mktemp("lake-driver")
    found = SparkDriver(work / "driver.log")
    try:
        found.call(
            "start",
            master=lake_cluster.url,
            conf={
                **lake_cluster.spark_conf(),
                **lake_hdfs.spark_conf(),
                **lake_s3.spark_conf(),
                # Delta rebuilds a version's state in this many tasks (50 by default):
                # the tables here are a few files.
                "spark.databricks.delta.snapshotPartitions": "2",
            },
            log_dir=str(work / "logs"),
            executors=lake_cluster.workers,
        )
        yield found
    finally:
        found.close()
