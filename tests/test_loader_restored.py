"""A receiver storage restored with other times keeps its rows (real Spark, one session).

A restore that keeps whole seconds only (``cp -r --preserve=timestamps`` to another
file system, ``tar`` without nanoseconds) changes every file's mtime, hence every
file's id: without the content match the next run would remove every row and ingest
everything again. With it, nothing is ingested and the table gets no new version;
only a file whose bytes differ (same size) is a new version (spark_loader.restored).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from spark_loader_helpers import (
    partition_dirs,
    source_rows,
    table_rows,
    table_versions,
    two_senders,
)

from sealsync import received
from spark_loader import run_load
from spark_loader.state import load_state, state_path
from spark_loader.status import loader_status

pytestmark = pytest.mark.slow  # Spark


def _receiver_md5(path: Path) -> None:
    """The MD5 the receiver records on a file it verified."""
    fd = os.open(path, os.O_RDONLY)
    try:
        received.record_md5(fd, hashlib.md5(path.read_bytes()).hexdigest())
    finally:
        os.close(fd)


def _whole_seconds(paths: list[str]) -> None:
    """Each file's mtime set to whole seconds (one back if it had none to drop, so that
    it changes), as a copy without nanoseconds leaves it."""
    for path in paths:
        mtime = os.stat(path).st_mtime_ns
        whole = mtime // 1_000_000_000 * 1_000_000_000
        os.utime(path, ns=(whole, whole if whole != mtime else whole - 1_000_000_000))


def _every_file(data_dir: Path) -> list[str]:
    return [os.path.join(folder, name) for folder, _, files in os.walk(data_dir) for name in files]


def test_a_restored_storage_is_matched_by_content_not_ingested_again(
    tmp_path: Path, spark: Any
) -> None:
    _, recv = two_senders(tmp_path)
    ts_a, _, _, pq_b = list(recv.placed)
    recv.add_mods(ts_a[1], "root.sg1.d1", 5000, ts_a[0])  # a sidecar to restore as well
    for path in recv.placed.values():
        _receiver_md5(path)
    config = recv.config(tmp_path)

    first = run_load(config, spark=spark)
    assert first.ok and first.ingested == 4
    rows, versions = table_rows(config.table_path), table_versions(config.table_path)
    assert rows == source_rows(recv)
    partitions = partition_dirs(config.table_path)
    ids = set(load_state(config.state_dir).files)

    # restored: every data file and sidecar with other times, the attributes kept
    every = _every_file(recv.data_dirs[0])
    assert len(every) >= 5  # the data files, the .mods, the .resource files
    _whole_seconds(every)
    assert loader_status(config)["pending"] == {"new_files": 4, "missing_files": 4}
    restored = run_load(config, spark=spark)

    assert restored.ok, restored.to_dict()
    assert (restored.ingested, restored.removed, restored.restored) == (0, 0, 4)
    assert restored.unchanged == 4 and restored.rows_written == 0
    assert table_versions(config.table_path) == versions  # no commit at all
    assert table_rows(config.table_path) == rows
    assert partition_dirs(config.table_path) == partitions
    state = load_state(config.state_dir)
    assert set(state.files) == ids
    for record in state.files.values():  # the new times are recorded
        path = recv.placed[(record.sender, record.name)]
        assert record.mtime_ns == path.stat().st_mtime_ns
        assert record.mtime_ns % 1_000_000_000 == 0
    assert loader_status(config)["pending"] == {"new_files": 0, "missing_files": 0}

    # the next run knows them by those times: nothing compared, nothing written
    before = state_path(config.state_dir).stat().st_mtime_ns
    again = run_load(config, spark=spark)
    assert again.ok and (again.ingested, again.restored, again.unchanged) == (0, 0, 4)
    assert state_path(config.state_dir).stat().st_mtime_ns == before

    # a copy that dropped the attribute still matches by its bytes; one whose bytes
    # differ at the same size is a new version, even with the receiver's attribute on it
    os.removexattr(recv.placed[ts_a], received.MD5_XATTR)
    data = bytearray(recv.placed[pq_b].read_bytes())
    at = data.find(b"parquet-cpp-arrow")  # the writer's name: the rows read the same
    assert at > 0
    data[at] = ord("P")
    recv.placed[pq_b].write_bytes(bytes(data))
    assert received.recorded_md5(recv.placed[pq_b])  # still the old content's MD5
    _whole_seconds([str(recv.placed[ts_a])])
    # whole seconds, and not the recorded ones: the rewrite may fall in their second
    recorded = next(r for r in state.files.values() if (r.sender, r.name) == pq_b)
    later = recorded.mtime_ns + 7_000_000_000
    os.utime(recv.placed[pq_b], ns=(later, later))

    changed = run_load(config, spark=spark)

    report = json.dumps(changed.to_dict())
    assert changed.ok, report
    assert (changed.ingested, changed.removed, changed.restored) == (1, 1, 1), report
    assert changed.unchanged == 3
    assert table_versions(config.table_path) == [*versions, versions[-1] + 1]
    assert table_rows(config.table_path) == rows == source_rows(recv)
    now = partition_dirs(config.table_path)
    assert len(now - partitions) == 1 and len(partitions - now) == 1
    assert all(pq_b[1].rsplit("/", 1)[-1] in p for p in now - partitions)

    # a rebuild ingests every file under the id it is known by, and the record stays whole
    full = run_load(config, spark=spark, full=True)
    assert full.ok and (full.ingested, full.restored) == (4, 0)
    assert partition_dirs(config.table_path) == now
    assert table_rows(config.table_path) == rows
    assert all(record.proved for record in load_state(config.state_dir).files.values())
    last = run_load(config, spark=spark)
    assert last.ok and (last.ingested, last.removed, last.unchanged) == (0, 0, 4)
