"""The simulator (``sealsync demo``'s edge, sealsync/simulator.py) writes what a real IoTDB
2.0 writes: the same folders and names, the same sidecars, the same ``.mods2`` entries and
``.resource`` for the same statements, TsFiles of the same format version holding the
same rows, and compaction targets named as 2.0 names them.

One real 2.0.1-beta (one ConfigNode and one DataNode, started once for this file) and the
simulator each get one device of ten points with the simulator's values, then a ``DELETE``
of every series of the device up to a time and a device-wide one (``**``) up to a later
time; what each wrote is read with sealsync's own readers and compared field by field.
The name's time is the clock when the file was made on both, so it is checked as such.
The server then ``LOAD``s a simulated file with its ``.mods2`` and answers its rows
without the deleted points. Last, the server compacts two sequence and two unsequence
files on its own schedule (a short one here); the targets' names must be the ones
:func:`sealsync.simulator.compacted_name` gives the sources' names.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iotdb_server import RELEASES, V4_RELEASE, IoTDBServer

from sealsync.formats import deletion, mods2, resource, tsfile, tsfile_meta
from sealsync.formats.common import TIME_COLUMN
from sealsync.simulator import DEFAULT_MEASUREMENTS, EdgeInstance, compacted_name, point_value

DEVICE = "root.sg.d1"
POINTS = 10
UNTIL = 4  # DELETE FROM root.sg.d1.* WHERE time <= UNTIL
DEVICE_UNTIL = 6  # DELETE FROM root.sg.d1.** WHERE time <= DEVICE_UNTIL
# <space>/<database>/<region>/<partition>/<time>-<version>-<inner>-<cross>.tsfile
LAYOUT = re.compile(
    r"(sequence|unsequence)/(root\.\w+)/(\d+)/(\d+)/(\d+)-(\d+)-(\d+)-(\d+)\.tsfile"
)
# Compaction on 2.0's own schedule, every second, of any two files of a space; no
# cross-space compaction, so that each space compacts its own two files.
COMPACTING = {
    "compaction_schedule_interval_in_ms": "1000",
    "inner_compaction_candidate_file_num": "2",
    "enable_seq_space_compaction": "true",
    "enable_unseq_space_compaction": "true",
    "enable_cross_space_compaction": "false",
}
COMPACTION_WAIT = 90.0


def _written(data_dir: Path) -> dict[str, list[str]]:
    """Each data file's relative name -> the suffixes of the sidecars beside it."""
    out: dict[str, list[str]] = {}
    for path in sorted(data_dir.rglob("*.tsfile")):
        rel = path.relative_to(data_dir).as_posix()
        out[rel] = sorted(
            p.name[len(path.name) :]
            for p in path.parent.iterdir()
            if p.name.startswith(path.name) and p.name != path.name
        )
    return out


def _fields(rel: str, began_ms: int) -> tuple[str, ...]:
    """What the layout and name say, the clock field checked and left out."""
    match = LAYOUT.fullmatch(rel)
    assert match, f"{rel} is not <space>/<database>/<region>/<partition>/<4-field name>"
    space, database, region, partition, made, version, inner, cross = match.groups()
    assert began_ms <= int(made) <= time.time_ns() // 1_000_000, (rel, began_ms)
    return space, database, region, partition, version, inner, cross


def _entries(path: Path) -> list[tuple[str, int, int]]:
    """A ``.mods2``'s entries as sealsync reads them: (pattern, start, end)."""
    out = []
    for entry in mods2.read(path):
        assert isinstance(entry, deletion.SeriesDeletion), entry
        assert entry.below_offset is None
        out.append((entry.path, entry.start, entry.end))
    return out


def _rows(path: Path) -> pa.Table:
    """A TsFile's rows as sealsync's reader gives them, without the points its
    ``.mods2`` deletes."""
    return deletion.apply(tsfile.to_arrow(path), mods2.read(f"{path}.mods2"))


def _answer(server: IoTDBServer, device: str) -> list[tuple[Any, ...]]:
    with server.client() as client:
        result = client.query(f"SELECT {', '.join(DEFAULT_MEASUREMENTS)} FROM {device}")
    assert result.columns == ["Time", *(f"{device}.{m}" for m in DEFAULT_MEASUREMENTS)]
    return [tuple(row) for row in result.rows]


def _table_answer(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = [TIME_COLUMN, *DEFAULT_MEASUREMENTS]
    return [tuple(r[c] for c in columns) for r in table.to_pylist()]


def _create(client: Any, device: str) -> None:
    database = device.rsplit(".", 1)[0]
    client.sql(f"CREATE DATABASE {database}")
    for m in DEFAULT_MEASUREMENTS:
        client.sql(f"CREATE TIMESERIES {device}.{m} WITH DATATYPE=INT64")


def _insert(client: Any, device: str, times: range) -> None:
    ms = list(DEFAULT_MEASUREMENTS)
    client.insert(
        [
            (device, t, ms, ["INT64"] * len(ms), [point_value(device, m, t) for m in ms])
            for t in times
        ]
    )
    client.sql("FLUSH")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IoTDBServer]:
    """One 2.0.1-beta for the file, compacting on a short schedule."""
    home = tmp_path_factory.mktemp("iotdb")
    running = IoTDBServer(RELEASES[V4_RELEASE], home, properties=dict(COMPACTING))
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.slow
def test_the_simulator_writes_what_iotdb_2_0_writes(tmp_path: Path, server: IoTDBServer) -> None:
    began = time.time_ns() // 1_000_000
    with server.client() as client:
        _create(client, DEVICE)
        _insert(client, DEVICE, range(POINTS))
        client.sql(f"DELETE FROM {DEVICE}.* WHERE time <= {UNTIL}")
        client.sql(f"DELETE FROM {DEVICE}.** WHERE time <= {DEVICE_UNTIL}")
    real = _written(server.data_dir)

    edge = EdgeInstance(tmp_path / "simulated")
    rel = edge.write_file("root.sg", 0, devices=[DEVICE], rows_per_device=POINTS, step_ms=1)
    edge.add_mods(rel, DEVICE, UNTIL)
    edge.add_mods(rel, DEVICE, DEVICE_UNTIL, levels="**")
    simulated = _written(edge.data_dirs[0])
    print(f"IoTDB {V4_RELEASE}: {real}\nsimulator: {simulated}")

    assert len(real) == 1 and len(simulated) == 1
    (real_rel, real_sidecars), (sim_rel, sim_sidecars) = *real.items(), *simulated.items()
    real_path, sim_path = server.data_dir / real_rel, edge.path(sim_rel)
    # folders (space, database, region, partition) and the name's version and compactions
    assert _fields(sim_rel, began) == _fields(real_rel, began)
    assert sim_sidecars == real_sidecars == [".mods2", ".resource"]

    # .mods2: the same entries, byte for byte
    real_entries = _entries(Path(f"{real_path}.mods2"))
    print(f".mods2: {real_entries}")
    assert _entries(Path(f"{sim_path}.mods2")) == real_entries
    assert real_entries == [
        (f"{DEVICE}.*", deletion.MIN_TIME, UNTIL),
        (f"{DEVICE}.**", deletion.MIN_TIME, DEVICE_UNTIL),
    ]
    assert Path(f"{sim_path}.mods2").read_bytes() == Path(f"{real_path}.mods2").read_bytes()

    # .resource: every field, then every byte
    real_res = resource.read(f"{real_path}.resource")
    sim_res = resource.read(f"{sim_path}.resource")
    print(f".resource: {real_res}")
    assert (sim_res.version, sim_res.time_index_type) == (real_res.version, 3)
    assert sim_res.devices == real_res.devices == {DEVICE: (0, POINTS - 1)}
    assert sim_res.device_ids == real_res.device_ids == (("root.sg", "d1"),)
    assert (sim_res.max_plan_index, sim_res.min_plan_index) == (
        real_res.max_plan_index,
        real_res.min_plan_index,
    )
    assert (sim_res.mod_file, sim_res.mod_file_offset) == (real_res.mod_file, None)
    assert sim_res.progress_index == real_res.progress_index is not None
    assert Path(f"{sim_path}.resource").read_bytes() == Path(f"{real_path}.resource").read_bytes()

    # the TsFile: format version 4 on both, the same devices, series and points, rows
    real_head, sim_head = real_path.read_bytes()[:7], sim_path.read_bytes()[:7]
    assert real_head == sim_head == b"TsFile\x04"
    real_meta, sim_meta = tsfile_meta.read(real_path), tsfile_meta.read(sim_path)
    assert (sim_meta.devices, sim_meta.series, sim_meta.points) == (
        real_meta.devices,
        real_meta.series,
        real_meta.points,
    )
    assert tsfile.to_arrow(sim_path).equals(tsfile.to_arrow(real_path))
    kept = _rows(real_path)
    assert _rows(sim_path).equals(kept)
    assert kept.column(TIME_COLUMN).to_pylist() == list(range(DEVICE_UNTIL + 1, POINTS))
    assert _answer(server, DEVICE) == _table_answer(kept)  # IoTDB's own answer

    # IoTDB loads a simulated file: its .resource and .mods2 read as its own
    loaded = "root.sim.d1"
    with server.client() as client:
        _create(client, loaded)
    sim_rel = edge.write_file("root.sim", 0, devices=[loaded], rows_per_device=POINTS, step_ms=1)
    edge.add_mods(sim_rel, loaded, UNTIL)
    with server.client() as client:
        client.sql(f"LOAD '{edge.path(sim_rel)}' WITH ('on-success'='none')")
    assert _answer(server, loaded) == _table_answer(_rows(edge.path(sim_rel)))
    assert len(_answer(server, loaded)) == POINTS - UNTIL - 1


def _tsfiles(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.tsfile")} if folder.is_dir() else set()


@pytest.mark.slow
def test_iotdb_2_0_names_compaction_targets_as_the_simulator_does(server: IoTDBServer) -> None:
    """Two sequence files, then two unsequence files overwriting points of both; each
    file's name is taken as it appears, before the compaction takes it away."""
    device = "root.cp.d1"
    seen: dict[str, list[str]] = {"sequence": [], "unsequence": []}
    folders: dict[str, Path] = {}
    with server.client() as client:
        _create(client, device)
        for space, times in (
            ("sequence", range(100, 105)),
            ("sequence", range(200, 205)),
            ("unsequence", range(102, 104)),
            ("unsequence", range(201, 204)),
        ):
            _insert(client, device, times)
            (new,) = [
                p
                for p in server.data_dir.glob(f"{space}/root.cp/*/*/*.tsfile")
                if p.name not in seen[space]
            ]
            seen[space].append(new.name)
            folders[space] = new.parent
    print(f"sources: {seen}")
    deadline = time.monotonic() + COMPACTION_WAIT
    while any(_tsfiles(folders[s]) & set(seen[s]) for s in seen):
        assert time.monotonic() < deadline, (
            f"no compaction: {[_tsfiles(f) for f in folders.values()]}"
        )
        time.sleep(0.5)
    for space, sources in seen.items():
        (target,) = _tsfiles(folders[space])
        print(f"{space}: {sources} -> {target}")
        folder = folders[space].relative_to(server.data_dir).as_posix()
        rels = [f"{folder}/{name}" for name in sources]
        assert compacted_name(rels, ".tsfile") == target, (space, sources, target)
        assert (folders[space] / target).read_bytes()[:7] == b"TsFile\x04"
        assert Path(f"{folders[space] / target}.resource").exists()
