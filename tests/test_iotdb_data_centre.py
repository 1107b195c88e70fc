"""The data centre's IoTDB (``[receiver.storage] kind = "iotdb"``) answers what the edge
answers, and a file it refuses is held aside while every other file and sender goes on:
real edges and data centres of both releases that start here, real ``sealsync serve``
and ``sealsync send`` processes.

* 2.x answers from the file it loaded last. The edge compacts two sequence files into
  a target that keeps the first one's version, below an unsequence file that
  overwrote one of their points; the target arrives after that file. Without loading
  the overwrite again after it, the data centre answered the stale point
  (``root.w6.d1`` at 5: edge 104, data centre 5).
* A series deleted at the edge and created again with another type: 2.x converted the
  new file's values to the old type (DOUBLE 4.5 became INT64 4) and 0.12 loaded the
  file as it was, after which every query of the device failed with
  ``ClassCastException``.
* A table-model file goes into a table-model database of a 2.x data centre (it was
  refused: "Attempted to load a table-model TsFile into tree-model"); one IoTDB cannot
  read at all (the ``tsfile`` package's, which 2.0.1-beta and 0.12 refuse) is held
  aside with one line. Before, the round never finished and every later round of the
  sender was "receiver busy".

* The edge's table-model file and its ``.mods2`` table deletion, read by the loader's
  Java read path, give the rows the edge's ``SELECT`` answers: tag tuples one dotted
  string would merge stay apart (the table had 4 devices' rows where IoTDB had 6).

Each release's servers start once per module (an edge and a data centre).
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import tsfile
from deploy_helpers import Deployment, Sender, make_deployment
from iotdb_helpers import copy_files, point_sender_at, receiver_on_iotdb, sealed_files, table_rows
from iotdb_server import RELEASES, IoTDBServer, client_python
from spark_loader_helpers import Receiver
from test_table_model_java import _java_rows

from sealsync.formats import mods2, resource, table_device, tsfile_meta
from sealsync.formats.deletion import MAX_TIME, MIN_TIME, TableDeletion
from sealsync.ttl import Rule, TtlRules, parse_duration
from spark_loader import run_load

pytestmark = pytest.mark.slow

TABLE_CLIENT = "apache-iotdb==2.0.11"  # a table-model session needs a 2.x client
COMPACTING = {  # each space compacts its own two files within a second
    "compaction_schedule_interval_in_ms": "1000",
    "inner_compaction_candidate_file_num": "2",
    "enable_seq_space_compaction": "true",
    "enable_unseq_space_compaction": "true",
    "enable_cross_space_compaction": "false",
}
COMPACTION_WAIT = 60.0
HELD = "held aside"


def _edge_and_data_centre(
    home: Path, release: str, edge_properties: dict[str, str] | None = None
) -> Iterator[tuple[IoTDBServer, IoTDBServer]]:
    """An edge server and a data-centre server of ``release``, stopped in reverse."""
    edge = IoTDBServer(RELEASES[release], home / "edge", properties=dict(edge_properties or {}))
    started = [edge.start()]
    try:
        started.append(IoTDBServer(RELEASES[release], home / "dc").start())
        yield started[0], started[1]
    finally:
        for server in reversed(started):
            server.stop()


@pytest.fixture(scope="module")
def v2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IoTDBServer, IoTDBServer]]:
    """A 2.0.1-beta edge that compacts, and a 2.0.1-beta data centre."""
    yield from _edge_and_data_centre(tmp_path_factory.mktemp("v2"), "2.0.1-beta", dict(COMPACTING))


@pytest.fixture(scope="module")
def v012(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IoTDBServer, IoTDBServer]]:
    yield from _edge_and_data_centre(tmp_path_factory.mktemp("v012"), "0.12.0")


def _answer(server: IoTDBServer, path: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The server's rows under ``path`` (2.x: ``path.**``; 0.12: a prefix)."""
    pattern = path if server.release.standalone else f"{path}.**"
    with server.client() as client:
        result = client.query(f"SELECT * FROM {pattern} ALIGN BY DEVICE")
    names = result.columns[2:]
    out = {}
    for t, device, *values in result.rows:
        got = {n: v for n, v in zip(names, values, strict=True) if v is not None}
        if got:
            out[(device, t)] = got
    return out


def _table(server: IoTDBServer, statements: list[str]) -> list[list[list[Any]]]:
    """``statements`` in one table-model session of a 2.x client; each query's rows."""
    script = (
        "import json, sys\n"
        "from iotdb.Session import Session\n"
        "s = Session('127.0.0.1', int(sys.argv[1]))\n"
        "s.sql_dialect = 'table'\n"
        "s.open(False)\n"
        "for line in sys.stdin:\n"
        "    sql = json.loads(line)\n"
        "    if sql.upper().startswith(('SELECT', 'SHOW')):\n"
        "        ds = s.execute_query_statement(sql)\n"
        "        rows = []\n"
        "        while ds.has_next():\n"
        "            r = ds.next()\n"
        "            rows.append([str(f.get_object_value(f.get_data_type())) for f in "
        "r.get_fields()])\n"
        "        print(json.dumps(sorted(rows)), flush=True)\n"
        "    else:\n"
        "        s.execute_non_query_statement(sql)\n"
        "s.close()\n"
    )
    import json

    run = subprocess.run(
        [client_python(TABLE_CLIENT), "-c", script, str(server.rpc_port)],
        input="".join(json.dumps(s) + "\n" for s in statements),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return [json.loads(line) for line in run.stdout.splitlines()]


def _flush_files(server: IoTDBServer, database: str) -> list[Path]:
    return sorted(server.data_dir.glob(f"*sequence/{database}/*/*/*.tsfile"))


def _wait_compacted(server: IoTDBServer, database: str) -> str:
    """The name of the one sequence file left once the edge compacted the others."""
    deadline = time.monotonic() + COMPACTION_WAIT
    while True:
        seq = sorted(server.data_dir.glob(f"sequence/{database}/*/*/*.tsfile"))
        if len(seq) == 1 and seq[0].name.split("-")[2] != "0":
            return seq[0].name
        assert time.monotonic() < deadline, f"no compaction: {[p.name for p in seq]}"
        time.sleep(0.2)


def _send(sender: Sender, dep: Deployment) -> None:
    sent = sender.send()
    assert sent.returncode == 0, f"{sender.name}: {sent.stderr}\n{dep.log()}"


def _cpp_table_file(folder: Path, database: str) -> str:
    """A table-model file of the ``tsfile`` package (its C++ writer), sealed beside a
    ``.resource`` as a 2.x edge would keep it; its relative name."""
    rel = f"sequence/{database}/1/0/1700000000000-1-0-0.tsfile"
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame({"time": [1, 2], "device": ["north", "south"], "temp": [1.5, 2.5]})
    tsfile.dataframe_to_tsfile(frame, str(path), table_name="weather", tag_column=["device"])
    Path(f"{path}.resource").write_bytes(resource.serialize({f"{database}.north": (1, 2)}))
    return rel


def _held_lines(dep: Deployment) -> list[str]:
    text = (dep.root / "receiver.log").read_text(errors="replace")
    return [line for line in text.splitlines() if HELD in line]


def test_a_2x_data_centre_answers_as_the_edge_across_a_compaction_and_a_new_type(
    v2: tuple[IoTDBServer, IoTDBServer], tmp_path: Path
) -> None:
    edge, dc = v2
    with edge.client() as client:
        # root.w6: a sequence file, then an unsequence one overwriting t=5
        client.insert([("root.w6.d1", t, ["s1"], ["INT64"], [t]) for t in range(1, 11)])
        client.sql("FLUSH")
        client.insert([("root.w6.d1", 5, ["s1"], ["INT64"], [104])])
        client.sql("FLUSH")
        # root.w7: a series that will be deleted and created again with another type
        client.insert([("root.w7.d2", t, ["s3", "s1"], ["INT64"] * 2, [t, t]) for t in (1, 2, 3)])
        client.sql("FLUSH")
    dep = make_deployment(tmp_path / "site")
    receiver_on_iotdb(dep, dc)
    point_sender_at(dep, edge.data_dir)
    dep.start_receiver()
    try:
        _send(dep.senders[0], dep)
        assert _answer(dc, "root.w6")[("root.w6.d1", 5)] == {"s1": 104}
        with edge.client() as client:
            # a second sequence file: the edge compacts both, the target keeps the
            # first one's version, below the unsequence overwrite
            client.insert([("root.w6.d1", t, ["s1"], ["INT64"], [t]) for t in range(11, 21)])
            client.sql("FLUSH")
            client.sql("DELETE TIMESERIES root.w7.d2.s3")
            client.sql("CREATE TIMESERIES root.w7.d2.s3 WITH DATATYPE=DOUBLE, ENCODING=GORILLA")
            client.insert(
                [("root.w7.d2", t, ["s3", "s1"], ["DOUBLE", "INT64"], [t + 0.5, t]) for t in (4, 5)]
            )
            client.sql("FLUSH")
        target = _wait_compacted(edge, "root.w6")
        _send(dep.senders[0], dep)
        _send(dep.senders[0], dep)  # nothing new: a held file would be tried again
    finally:
        assert dep.stop_receiver() == 0, dep.log()
    print(f"compaction target {target}; receiver log:\n{dep.log()}")
    for database in ("root.w6", "root.w7"):
        want = _answer(edge, database)
        assert _answer(dc, database) == want, database
    assert _answer(dc, "root.w6")[("root.w6.d1", 5)] == {"s1": 104}
    assert _answer(dc, "root.w7")[("root.w7.d2", 4)] == {"s3": 4.5, "s1": 4}
    assert _held_lines(dep) == []
    assert "Traceback" not in dep.log()


def test_table_model_files_go_into_a_table_database_and_a_refused_one_is_held_aside(
    v2: tuple[IoTDBServer, IoTDBServer], tmp_path: Path
) -> None:
    edge, dc = v2
    # the edge's own table-model files (IoTDB 2.0.1-beta writes them)
    _table(
        edge,
        [
            "CREATE DATABASE db6",
            "USE db6",
            "CREATE TABLE weather (region STRING TAG, temp DOUBLE FIELD)",
            "INSERT INTO weather(time, region, temp) VALUES (1, 'north', 1.5), (2, 'south', 2.5)",
            "FLUSH",
        ],
    )
    with edge.client() as client:
        client.insert([("root.s6.d1", t, ["s1"], ["INT64"], [t]) for t in range(1, 6)])
        client.sql("FLUSH")
    dep = make_deployment(tmp_path / "site", senders=2)
    first, second = dep.senders
    files = sealed_files(edge.data_dir)
    copy_files({r: p for r, p in files.items() if "/db6/" in r}, first.edge.data_dirs[0])
    refused = _cpp_table_file(first.edge.data_dirs[0], "db7")  # 2.0.1-beta cannot read it
    copy_files({r: p for r, p in files.items() if "/root.s6/" in r}, second.edge.data_dirs[0])
    receiver_on_iotdb(dep, dc)
    dep.start_receiver()
    try:
        _send(first, dep)
        _send(second, dep)
        # more of both senders' files after the refusal: neither is told busy
        _table(edge, ["USE db6", "INSERT INTO weather(time, region, temp) VALUES (3, 'east', 3.5)"])
        _table(edge, ["FLUSH"])
        with edge.client() as client:
            client.insert([("root.s6.d1", t, ["s1"], ["INT64"], [t]) for t in range(6, 9)])
            client.sql("FLUSH")
        files = sealed_files(edge.data_dir)
        copy_files({r: p for r, p in files.items() if "/db6/" in r}, first.edge.data_dirs[0])
        copy_files({r: p for r, p in files.items() if "/root.s6/" in r}, second.edge.data_dirs[0])
        _send(first, dep)
        _send(second, dep)
    finally:
        assert dep.stop_receiver() == 0, dep.log()
    held = _held_lines(dep)
    print("\n".join(held))
    assert len(held) == 1 and refused in held[0]
    assert "Index 3 out of bounds" in held[0]
    state = (dep.receiver_schema / "iotdb-loaded.log").read_text()
    assert f"held {first.uuid} {refused}" in state
    assert refused in dep.loaded_hashes(first)  # its copy: the Spark loader reads it
    query = ["USE db6", "SELECT time, region, temp FROM weather"]
    edge_rows = _table(edge, query)
    assert len(edge_rows[0]) == 3  # north, south, then east in the second round
    assert _table(dc, query) == edge_rows
    assert _answer(dc, "root.s6") == _answer(edge, "root.s6")
    assert len(_answer(dc, "root.s6")) == 8
    assert "busy" not in dep.log() and "Traceback" not in dep.log()


def test_the_edges_table_model_deletion_and_tag_tuples_read_as_select_answers(
    v2: tuple[IoTDBServer, IoTDBServer], spark: Any, tmp_path: Path
) -> None:
    """Tag tuples one dotted string would merge, a NULL tag beside the string 'null', and
    after the flush ``DELETE FROM t1 WHERE time <= 3 AND region='north'`` and ``DELETE
    FROM t1 WHERE region IS NULL AND site = 'x'`` (``.mods2`` table deletions): the
    loader's Java read path gives the rows ``SELECT`` answers."""
    edge, _ = v2
    values = [
        "(1, 'a.b', 'c', 1.0)",
        "(2, 'a', 'b.c', 2.0)",
        "(3, NULL, 'x', 3.0)",
        "(4, 'null', 'x', 4.0)",
        "(1, 'north', 'x', 5.0)",
        "(3, 'north', NULL, 6.0)",
        "(5, 'north', NULL, 7.0)",
        "(2, 'south', 'x', 8.0)",
    ]
    query = ["USE db8", "SELECT time, region, site, v FROM t1"]
    answers = _table(
        edge,
        [
            "CREATE DATABASE db8",
            "USE db8",
            "CREATE TABLE t1 (region STRING TAG, site STRING TAG, v DOUBLE FIELD)",
            f"INSERT INTO t1(time, region, site, v) VALUES {', '.join(values)}",
            "FLUSH",
            *query,
            "DELETE FROM t1 WHERE time <= 3 AND region='north'",
            "DELETE FROM t1 WHERE region IS NULL AND site = 'x'",
            *query[1:],
        ],
    )
    before, after = answers
    # the two north points up to 3 gone, and the NULL region's (not the 'null' one's)
    assert len(before) == 8 and len(after) == 5

    def keyed(rows: list[list[str]]) -> list[tuple[str, int, float]]:
        # the client prints a NULL tag as None (no tag here is the text 'None'), the
        # time as a date
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        out = []
        for t0, r, s, v in rows:
            tags = (None if t == "None" else t for t in (r, s))
            ms = (dt.datetime.fromisoformat(t0) - epoch) // dt.timedelta(milliseconds=1)
            out.append((table_device.name(["t1", *tags]), ms, float(v)))
        return sorted(out)

    files = sealed_files(edge.data_dir)
    data = [p for r, p in files.items() if "/db8/" in r and r.endswith(".tsfile")]
    got, deletions = [], []
    for path in data:  # a file per data region the devices went to
        mods = path.with_name(path.name + ".mods2")
        entries = mods.read_bytes() if mods.is_file() else b""
        deletions += mods2.parse(entries)
        rows = _java_rows(spark, path, entries)
        # the receiver's ownership keys name the devices as the loader's rows do
        assert {d for d, _, _ in rows} <= set(tsfile_meta.read(path).devices)
        got += rows
    # IoTDB writes one tag condition alone, SegmentExactMatch('north', 1), two as an And
    # of them, IS NULL as a null string; every field
    assert deletions and {
        (d.table, d.start, d.end, d.segments, d.devices, d.measurements)
        for d in deletions
        if isinstance(d, TableDeletion)
    } == {
        ("t1", MIN_TIME, 3, ((1, "north"),), (), ()),
        ("t1", MIN_TIME, MAX_TIME, ((1, None), (2, "x")), (), ()),
    }, deletions
    assert sorted(got) == keyed(after)
    # ('a.b','c') and ('a','b.c') apart, NULL and 'null' apart; ('north','x') and
    # (NULL,'x') all deleted
    assert len({d for d, _, _ in got}) == 5


def test_a_0_12_data_centre_answers_after_a_series_is_created_again_with_another_type(
    v012: tuple[IoTDBServer, IoTDBServer], tmp_path: Path
) -> None:
    edge, dc = v012
    with edge.client() as client:
        client.sql("SET STORAGE GROUP TO root.w3")
        client.sql("CREATE TIMESERIES root.w3.d2.s3 WITH DATATYPE=INT64, ENCODING=RLE")
        client.sql("CREATE TIMESERIES root.w3.d2.s1 WITH DATATYPE=INT64, ENCODING=RLE")
        client.insert([("root.w3.d2", t, ["s3", "s1"], ["INT64"] * 2, [t, t]) for t in range(1, 6)])
        client.sql("FLUSH")
    dep = make_deployment(tmp_path / "site")
    (tmp_path / "edge-data").mkdir()
    point_sender_at(dep, tmp_path / "edge-data")
    copy_files(sealed_files(edge.data_dir), tmp_path / "edge-data")
    refused = _cpp_table_file(tmp_path / "edge-data", "root.t3")  # 0.12 reads no format 4
    receiver_on_iotdb(dep, dc)
    dep.start_receiver()
    try:
        _send(dep.senders[0], dep)
        with edge.client() as client:
            client.sql("DELETE TIMESERIES root.w3.d2.s3")
            client.sql("CREATE TIMESERIES root.w3.d2.s3 WITH DATATYPE=DOUBLE, ENCODING=GORILLA")
            client.insert(
                [("root.w3.d2", t, ["s3", "s1"], ["DOUBLE", "INT64"], [t + 0.5, t]) for t in (6, 7)]
            )
            client.sql("FLUSH")
        copy_files(sealed_files(edge.data_dir), tmp_path / "edge-data")
        _send(dep.senders[0], dep)
        _send(dep.senders[0], dep)
    finally:
        assert dep.stop_receiver() == 0, dep.log()
    print(dep.log())
    want = _answer(edge, "root.w3")
    assert want[("root.w3.d2", 6)] == {"s3": 6.5, "s1": 6}
    assert _answer(dc, "root.w3") == want  # the query failed: ClassCastException
    held = _held_lines(dep)
    assert len(held) == 1 and refused in held[0], held
    shutil.rmtree(tmp_path / "edge-data")


def test_the_table_answers_as_the_edge_under_a_ttl(
    v2: tuple[IoTDBServer, IoTDBServer], tmp_path: Path, spark: Any
) -> None:
    """A TTL expires part of a sealed file: the edge stops answering those points, the
    file stays whole on the receiver, and the table (told the edge's rule) answers what
    the edge answers, at the same moment."""
    edge, _ = v2
    minute, hour = 60_000, 3_600_000
    now_ms = int(time.time() * 1000)
    # every 10 minutes from now-2h, 5 minutes off the cutoff's path while the test runs
    times = range(now_ms - 2 * hour + 5 * minute, now_ms, 10 * minute)
    with edge.client() as client:
        for device in ("root.w8.d1", "root.w8.d2"):
            client.insert([(device, t, ["s1"], ["INT64"], [t % 997]) for t in times])
        client.sql("FLUSH")
    files = {rel: p for rel, p in sealed_files(edge.data_dir).items() if "/root.w8/" in rel}
    assert files, sealed_files(edge.data_dir)
    recv, sender = Receiver(tmp_path), str(uuid.UUID(int=0xE))
    for rel, path in files.items():  # the receiver's copy, taken before the TTL is set
        data, _, sidecar = rel.partition(".tsfile")
        target = recv.storage.target(recv.data_dirs[0], sender, data + ".tsfile")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, f"{target}{sidecar}")
    with edge.client() as client:
        client.sql("SET TTL TO root.w8.d1 3600000")
    want = _answer(edge, "root.w8")
    asked = time.time()
    config = recv.config(tmp_path)
    rules = TtlRules.of([Rule("root.w8.d1", hour)])

    report = run_load(replace(config, ttl=rules), spark=spark, sync=False, now=asked)

    assert report.ok, report.skipped
    devices = [device for device, _ in want]
    assert devices.count("root.w8.d2") == len(times)  # no TTL: every point
    assert 5 <= devices.count("root.w8.d1") <= 7  # the last hour's
    assert table_rows(Path(str(config.table_path))) == want


def test_a_table_model_edge_s_table_ttls_answer_as_the_edge(
    v2: tuple[IoTDBServer, IoTDBServer], tmp_path: Path, spark: Any
) -> None:
    """Table model: each table's TTL property, as ``SHOW TABLES DETAILS`` lists it. A
    table takes its database's TTL when it is created, not when the database's changes
    (t11 stays INF). The receiver's copies are taken before the TTLs are set (IoTDB
    refuses to insert a point already expired); the table, told the rules the edge
    lists, answers what ``SELECT`` on the edge answers at the same moment."""
    edge, _ = v2
    minute, hour = 60_000, 3_600_000
    tables = ("t9", "t10", "t11")
    now_ms = int(time.time() * 1000)
    times = list(range(now_ms - 2 * hour + 5 * minute, now_ms, 10 * minute))
    rows = ", ".join(f"({t}, '{r}', {t % 997})" for t in times for r in ("north", "south"))
    _table(
        edge,
        [
            "CREATE DATABASE db9",
            "USE db9",
            *(f"CREATE TABLE {t} (region STRING TAG, s1 INT64 FIELD)" for t in tables),
            *(f"INSERT INTO {t}(time, region, s1) VALUES {rows}" for t in tables),
            "FLUSH",
        ],
    )
    files = {rel: p for rel, p in sealed_files(edge.data_dir).items() if "/db9/" in rel}
    assert files, sealed_files(edge.data_dir)
    recv, sender = Receiver(tmp_path), str(uuid.UUID(int=0xF))
    for rel, path in files.items():
        data, _, sidecar = rel.partition(".tsfile")
        target = recv.storage.target(recv.data_dirs[0], sender, data + ".tsfile")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, f"{target}{sidecar}")
    listed, *answers = _table(
        edge,
        [
            "USE db9",
            "ALTER TABLE t9 SET PROPERTIES TTL=3600000",
            "ALTER DATABASE db9 SET PROPERTIES TTL=5400000",
            "ALTER TABLE t10 SET PROPERTIES TTL=5400000",
            "SHOW TABLES DETAILS",
            *(f"SELECT time, region, s1 FROM {t}" for t in tables),
        ],
    )
    asked = time.time()
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    want = {}
    for table, answer in zip(tables, answers, strict=True):
        for t0, region, value in answer:
            ms = (dt.datetime.fromisoformat(t0) - epoch) // dt.timedelta(milliseconds=1)
            want[(table_device.name([table, region]), ms)] = {"s1": int(value)}
    # the rules as the edge lists them: table, TTL(ms), status
    assert sorted((name, ttl) for name, ttl, _ in listed) == [
        ("t10", "5400000"),
        ("t11", "INF"),
        ("t9", "3600000"),
    ]
    rules = TtlRules.of(Rule(f"db9.{name}", parse_duration(ttl)) for name, ttl, _ in listed)
    config = recv.config(tmp_path)

    report = run_load(replace(config, ttl=rules), spark=spark, sync=False, now=asked)

    assert report.ok, report.skipped
    counts = {t: sum(1 for d, _ in want if d.startswith(f"{t}.")) for t in tables}
    assert 2 * 5 <= counts["t9"] <= 2 * 7  # the last hour's, of two devices
    assert 2 * 8 <= counts["t10"] <= 2 * 10  # 90 minutes'
    assert counts["t11"] == 2 * len(times)  # INF: every point
    assert table_rows(Path(str(config.table_path))) == want

    # half an hour on, a run removes what expired since, each table by its own rule
    later = run_load(replace(config, ttl=rules), spark=spark, sync=False, now=asked + 1800)
    assert later.ok and later.expired, later.to_dict()
    limit = {"t9": hour, "t10": 90 * minute, "t11": None}
    alive = {
        (device, t): v
        for (device, t), v in want.items()
        if (ttl := limit[device.split(".")[0]]) is None or t >= int((asked + 1800) * 1000) - ttl
    }
    assert len(alive) < len(want)
    assert table_rows(Path(str(config.table_path))) == alive
