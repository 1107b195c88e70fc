"""A real IoTDB's compaction reaches the table as IoTDB answers it, whichever round saw it:
before (the sources alone), mid-way (the sealed target beside its sources, the window in
which IoTDB has sealed the target and not yet deleted the sources) and after (the target
alone). The files are the ones a real IoTDB wrote and compacted, shipped by ``sealsync
send`` to ``sealsync serve`` and loaded by ``sealsync load`` (real processes all); after
each round the table is compared row by row with a reference computed from the statements
run and with IoTDB's own answer, and no (device, time) is in it twice. A second table
sees the other order: the targets first (the sources' round failed), the sources after
them, then their deletion.

Only 0.12.0: it has a statement (``MERGE``) that starts a compaction. 2.x has none
(``MERGE``, ``FULL MERGE`` and ``START COMPACTION`` are parse errors there) and compacts
only on its own schedule.

The compaction is 0.12's cross-space merge. 0.12 merges the unsequence files into the
sequence files they overlap as soon as a flush ends, too soon to copy the sources; so the
server first runs with ``enable_unseq_compaction=false`` while the points are written and
the sources are copied, then restarts with the default (true), and a flush of a later
point (which starts the merge after a flush) and ``MERGE`` compact them. The merge writes
one target per sequence source, its name's merge count raised by one
(``<time>-<version>-0-1.tsfile``), then deletes the sources.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deploy_helpers import Deployment, make_deployment
from iotdb_helpers import (
    Points,
    Rows,
    copy_files,
    insert_flush,
    iotdb_answer,
    load_table,
    point_sender_at,
    rows_of,
    sealed_files,
)
from iotdb_server import RELEASES, V3_RELEASE, IoTDBServer

from spark_loader import read_arrow

SERIES = {"root.sg.d1": ("s1", "s2"), "root.sg.d2": ("s1",)}
MERGE_WAIT = 60.0
LATE = 100  # the later point whose flush starts the merge after the restart
# 0.12.0's merge fails ("Device ... is not in tsFileMetaData") on an unsequence file that
# lacks a device of the files it merges, so every insert here writes every series.


def _insert(server: IoTDBServer, points: Points, times: range, base: int) -> None:
    with server.client() as client:
        insert_flush(client, SERIES, points, times, base)


def _write(server: IoTDBServer) -> Points:
    """Two sequence files (10..19, 20..29) and an unsequence file (15..24) overwriting
    both; the points IoTDB's answer must hold."""
    points: Points = {(d, m): {} for d, ms in SERIES.items() for m in ms}
    with server.client() as client:
        client.sql("SET STORAGE GROUP TO root.sg")
        for device, measurements in SERIES.items():
            for m in measurements:
                client.sql(f"CREATE TIMESERIES {device}.{m} WITH DATATYPE=INT64, ENCODING=RLE")
    _insert(server, points, range(10, 20), 100)
    _insert(server, points, range(20, 30), 200)
    _insert(server, points, range(15, 25), 300)
    return points


def _tsfiles(files: dict[str, Path]) -> set[str]:
    return {Path(rel).name for rel in files if rel.endswith(".tsfile")}


def _round(dep: Deployment, tmp_path: Path) -> tuple[Rows, dict[tuple[str, int], str]]:
    """Send the edge folder, load; the table's rows and each row's source file."""
    sent = dep.senders[0].send()
    assert sent.returncode == 0, sent.stderr
    table = read_arrow(load_table(dep, tmp_path))
    rows: Rows = {}
    sources: dict[tuple[str, int], str] = {}
    for row in table.to_pylist():
        key = (row["device"], row["time"])
        assert key not in rows, f"{key} twice in the table"
        rows[key] = {m: row[m] for m in ("s1", "s2") if row.get(m) is not None}
        sources[key] = Path(row["source_file"]).name
    return rows, sources


@pytest.mark.slow
def test_the_table_holds_what_iotdb_answers_across_a_compaction(
    tmp_path: Path,
    start_deployment: Callable[..., Deployment],
) -> None:
    server = IoTDBServer(
        RELEASES[V3_RELEASE],
        tmp_path / "iotdb",
        properties={"enable_unseq_compaction": "false"},
    )
    server.start()
    try:
        points = _write(server)
        expected = rows_of(points)
        assert iotdb_answer(server) == expected
        sources = sealed_files(server.data_dir)
        assert any(rel.startswith("unsequence/") for rel in sources), sources
        assert len(_tsfiles(sources)) == 3, sources
        saved = tmp_path / "sources"
        copy_files(sources, saved)
        sources = {rel: saved / rel for rel in sources}

        server.stop()
        server.properties = {}
        server.start()
        _insert(server, points, range(LATE, LATE + 1), 500)
        expected = rows_of(points)
        deadline = time.monotonic() + MERGE_WAIT
        while list((server.data_dir / "unsequence").rglob("*.tsfile")) or (
            _tsfiles(sources) & _tsfiles(sealed_files(server.data_dir))
        ):
            assert time.monotonic() < deadline, "the merge did not finish\n" + server.log_tail()
            with server.client() as client:
                client.sql("MERGE")
            time.sleep(1.0)
        after = sealed_files(server.data_dir)
        answer = iotdb_answer(server)
    finally:
        server.stop()
    assert answer == expected  # the reference reads IoTDB as IoTDB does
    targets = {
        rel: p
        for rel, p in after.items()
        if Path(rel).name.split(".")[0].rsplit("-", 1)[0]
        in {Path(s).name.split(".")[0].rsplit("-", 1)[0] for s in sources}
    }
    late = {rel: p for rel, p in after.items() if rel not in targets}
    assert len(_tsfiles(targets)) == 2, after  # one per sequence source
    assert len(_tsfiles(late)) == 1, after
    before_rows = {k: v for k, v in expected.items() if k[1] != LATE}

    edge = tmp_path / "edge"
    dep = start_deployment()
    point_sender_at(dep, edge)

    # before: the sources alone
    copy_files(sources, edge)
    got, _ = _round(dep, tmp_path)
    assert got == before_rows
    assert got[("root.sg.d1", 16)] == {"s1": 316, "s2": 316}

    # mid-way: the sealed targets beside their sources (and the later file)
    copy_files(targets, edge)
    copy_files(late, edge)
    got, _ = _round(dep, tmp_path)
    assert got == expected

    # after: the sources deleted
    for rel in sources:
        (edge / rel).unlink()
    got, source_file = _round(dep, tmp_path)
    assert got == expected
    assert set(source_file.values()) == _tsfiles(targets) | _tsfiles(late)
    assert {f for (_, t), f in source_file.items() if t != LATE} == _tsfiles(targets)

    # the other order, on a table of its own: the targets reach the table first (the
    # sources' round failed), the sources after them, then their deletion
    edge = tmp_path / "edge-other"
    dep = make_deployment(tmp_path / "site-other")
    dep.start_receiver()
    try:
        point_sender_at(dep, edge)
        other = tmp_path / "other"
        other.mkdir()
        copy_files(targets, edge)
        copy_files(late, edge)
        got, _ = _round(dep, other)
        assert got == expected
        copy_files(sources, edge)
        got, _ = _round(dep, other)
        assert got == expected
        for rel in sources:
            (edge / rel).unlink()
        got, source_file = _round(dep, other)
    finally:
        dep.stop_receiver()
    assert got == expected
    assert set(source_file.values()) == _tsfiles(targets) | _tsfiles(late)
