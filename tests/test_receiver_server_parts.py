"""The receiver's server parts in one process: the storage lock, the counters and
their Prometheus families, paramiko's noise kept at DEBUG, the log line format.
(``tests/test_serve_e2e.py`` runs the same against real ``sealsync serve`` processes.)"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from receiver.lock import LOCK_NAME, ReceiverLocked, StorageLock, holder
from receiver.metrics import REFUSALS, ReceiverMetrics
from receiver.metrics_http import MetricsServer
from receiver.serve import IsoFormatter
from receiver.ssh_server import SSH_LOG
from sealsync.errors import EXIT_LOCKED, SealsyncError


def _storage(tmp_path: Path) -> tuple[Path, list[Path]]:
    schema, data = tmp_path / "schema", [tmp_path / "d0", tmp_path / "d1"]
    for folder in (schema, *data):
        folder.mkdir()
    return schema, data


# ---------------------------------------------------------------- lock


def test_the_storage_lock_is_exclusive_names_its_pid_and_leaves_nothing_held(
    tmp_path: Path,
) -> None:
    schema, data = _storage(tmp_path)
    assert holder(schema, data) is None
    first = StorageLock(schema, data).acquire()
    assert (schema / "sync" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    assert (data[1] / "sync-receiver" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    found = holder(schema, data)
    assert found is not None and found.pid == os.getpid()

    # any one shared folder is enough to be refused, and nothing is left taken
    with pytest.raises(ReceiverLocked) as info:
        StorageLock(tmp_path / "schema", [data[1]]).acquire()
    assert info.value.exit_code == EXIT_LOCKED
    assert str(info.value) == (
        f"another receiver (pid {os.getpid()}) serves this storage: "
        f"{schema / 'sync' / LOCK_NAME} is locked"
    )
    other_schema = tmp_path / "schema2"
    other_schema.mkdir()
    partial = StorageLock(other_schema, [data[1]])
    with pytest.raises(ReceiverLocked, match=str(data[1] / "sync-receiver" / LOCK_NAME)):
        partial.acquire()
    assert not partial.held and holder(other_schema, []) is None

    first.release()
    assert holder(schema, data) is None
    assert (schema / "sync" / LOCK_NAME).read_text() == ""  # no stale pid for humans
    with StorageLock(schema, data):
        assert holder(schema, data) is not None


def test_the_lock_of_a_folder_that_cannot_hold_it_is_one_error(tmp_path: Path) -> None:
    schema, data = _storage(tmp_path)
    (data[0] / "sync-receiver").write_text("a file where the folder goes")
    lock = StorageLock(schema, data)
    with pytest.raises(SealsyncError, match=r"cannot open the receiver lock .*d0/sync-receiver"):
        lock.acquire()
    assert not lock.held and holder(schema, data) is None


# ---------------------------------------------------------------- metrics


def _families(metrics: ReceiverMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_counters_become_prometheus_families(tmp_path: Path) -> None:
    schema, data = _storage(tmp_path)
    metrics = ReceiverMetrics([("schema", schema), ("data", data[0]), ("data", tmp_path / "gone")])
    metrics.workers_alive = lambda: 3
    metrics.session_opened()
    metrics.session_opened()
    metrics.session_closed()
    metrics.received(1000)
    metrics.received(24)
    for kind in ("verified", "verified", "conflict"):
        metrics.verdict(kind)
    metrics.deleted()
    metrics.refused("allow_list")
    metrics.round_ended("done")
    m = _families(metrics)
    assert m["sealsync_receiver_sessions_open"][()] == 1
    assert m["sealsync_receiver_sessions_total"][()] == 2
    assert m["sealsync_receiver_bytes_received_total"][()] == 1024
    assert m["sealsync_receiver_files_received_total"][()] == 2
    assert m["sealsync_receiver_files_deleted_total"][()] == 1
    assert m["sealsync_receiver_verdicts_total"] == {
        (("verdict", "verified"),): 2,
        (("verdict", "mismatch"),): 0,
        (("verdict", "conflict"),): 1,
        (("verdict", "refused"),): 0,
    }
    refusals = m["sealsync_receiver_refusals_total"]
    assert set(refusals) == {(("reason", r),) for r in REFUSALS}
    assert refusals[(("reason", "allow_list"),)] == 1 and sum(refusals.values()) == 1
    assert m["sealsync_receiver_rounds_total"][(("outcome", "done"),)] == 1
    assert m["sealsync_receiver_inspect_workers_alive"][()] == 3
    free = m["sealsync_receiver_disk_free_bytes"]
    assert set(free) == {
        (("path", "schema_dir"), ("role", "schema")),
        (("path", "data_dirs[0]"), ("role", "data")),
    }  # a folder statvfs cannot see has no sample rather than a wrong one; no paths shown
    assert all(v > 0 for v in free.values())
    assert all(v > 0 for v in m["sealsync_receiver_disk_size_bytes"].values())
    shown = ReceiverMetrics([("schema", schema), ("data", data[0])], paths=True)
    assert set(_families(shown)["sealsync_receiver_disk_free_bytes"]) == {
        (("path", str(schema)), ("role", "schema")),
        (("path", str(data[0])), ("role", "data")),
    }  # metrics_paths = true


def test_checks_in_flight_are_counted_while_they_run() -> None:
    metrics = ReceiverMetrics()
    inside = threading.Event()
    release = threading.Event()

    def slow_inspect(paths: list[Path]) -> list[int]:
        inside.set()
        release.wait(10)
        return [1] * len(paths)

    tracked = metrics.tracked(slow_inspect, count=len)
    worker = threading.Thread(target=tracked, args=([Path("a"), Path("b"), Path("c")],))
    worker.start()
    assert inside.wait(10)
    assert metrics.snapshot()["checks_in_flight"] == 3
    release.set()
    worker.join(10)
    assert metrics.snapshot()["checks_in_flight"] == 0

    def broken(path: Path) -> int:
        raise ValueError(path)

    with pytest.raises(ValueError):
        metrics.tracked(broken)(Path("x"))
    assert metrics.snapshot()["checks_in_flight"] == 0


def test_a_metrics_port_in_use_is_one_error() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SealsyncError) as info:
            MetricsServer(ReceiverMetrics(), "127.0.0.1", port).start()
    assert str(info.value) == (
        f"cannot serve metrics on 127.0.0.1:{port}: address already in use (another "
        "program, or another receiver, listens there): stop it, or change [receiver] "
        "metrics_listen"
    )


# ---------------------------------------------------------------- logging


def _capture(level: int) -> tuple[logging.Logger, list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    top = logging.getLogger("sealsync")
    handler = Keep()
    top.addHandler(handler)
    top.setLevel(level)
    return top, records


@pytest.fixture
def restore_sealsync_logger():  # type: ignore[no-untyped-def]
    top = logging.getLogger("sealsync")
    level, handlers = top.level, list(top.handlers)
    yield
    top.setLevel(level)
    top.handlers[:] = handlers


@pytest.mark.usefixtures("restore_sealsync_logger")
def test_paramiko_connection_noise_is_debug_only() -> None:
    _, records = _capture(logging.INFO)
    ssh = logging.getLogger(SSH_LOG)
    ssh.error("Socket exception: Connection reset by peer (104)")
    ssh.error("Error reading SSH protocol banner")
    ssh.info("Connected (version 2.0, client paramiko_3.5.0)")
    assert records == []
    _, records = _capture(logging.DEBUG)
    ssh.error("Error reading SSH protocol banner")
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("DEBUG", "Error reading SSH protocol banner")
    ]


def test_log_lines_carry_an_iso_8601_timestamp_with_offset() -> None:
    record = logging.LogRecord("sealsync.x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    line = IsoFormatter().format(record)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d sealsync INFO: hello you", line
    ), line
