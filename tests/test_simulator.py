"""The simulated edge instance writes what a real one would, where a real one would."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from sealsync import formats
from sealsync.formats import FileInfo, mods2, parquet, resource, tsfile
from sealsync.formats.deletion import MIN_TIME
from sealsync.simulator import EdgeInstance, expected_table, point_value

G = "root.sg1"
D1, D2 = "root.sg1.d1", "root.sg1.d2"
T0 = 1_700_000_000_000
REPO = Path(__file__).resolve().parent.parent


def _fields(rel: str) -> tuple[int, int, int, int]:
    """``<time>-<version>-<inner>-<cross>`` of a data file's name, as integers."""
    a, b, c, d = rel.rsplit("/", 1)[1].split(".", 1)[0].split("-")
    return int(a), int(b), int(c), int(d)


def _files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_instance_creates_schema_and_data_dirs(tmp_path: Path) -> None:
    one = EdgeInstance(tmp_path / "a")
    assert one.schema_dir == tmp_path / "a" / "schema"
    assert one.data_dirs == [tmp_path / "a" / "data"]
    three = EdgeInstance(tmp_path / "b", data_dirs=3)
    assert three.data_dirs == [tmp_path / "b" / f"data{i}" for i in range(3)]
    assert all(d.is_dir() for d in [one.schema_dir, *one.data_dirs, *three.data_dirs])
    with pytest.raises(ValueError):
        EdgeInstance(tmp_path / "c", data_dirs=0)


@pytest.mark.parametrize("fmt", ["tsfile", "parquet"])
def test_write_file_layout_resource_and_content(tmp_path: Path, fmt: str) -> None:
    edge = EdgeInstance(tmp_path)
    rel = edge.write_file(G, 7, devices=[D2, D1], rows_per_device=5, start_ms=T0, fmt=fmt)
    folder, name = rel.rsplit("/", 1)
    assert folder == f"sequence/{G}/1/7"  # <database>/<region>/<partition>, as IoTDB 2.0
    assert re.fullmatch(rf"(\d{{13}})-1-0-0\.{fmt}", name), name  # <time>-<version>-0-0
    assert abs(int(name.split("-")[0]) - time.time() * 1000) < 60_000  # the clock, as IoTDB
    assert _files_under(edge.data_dirs[0]) == {rel, rel + ".resource"}
    sealed = resource.read(edge.data_dirs[0] / (rel + ".resource"))
    assert (sealed.version, sealed.time_index_type) == (1, resource.ARRAY_DEVICE_TIME_INDEX)
    assert sealed.devices == {D1: (T0, T0 + 4000), D2: (T0, T0 + 4000)}
    assert sealed.device_ids == (("root.sg1", "d1"), ("root.sg1", "d2"))
    assert sealed.progress_index == resource.iot_progress_index(1)  # the file's version
    path = edge.path(rel)
    assert formats.inspect(path) == FileInfo(devices=(D1, D2), rows=10)
    table = formats.format_for(rel).to_arrow(path)
    assert table.equals(expected_table([D1, D2], 5, T0))
    assert table.column("s1")[0].as_py() == point_value(D1, "s1", T0)
    assert point_value(D1, "s1", T0) != point_value(D2, "s1", T0)


def test_write_file_options_place_files(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path, data_dirs=2)
    unseq = edge.write_file(
        G,
        0,
        "custom.tsfile",
        devices=[D1],
        rows_per_device=2,
        unsequence=True,
        data_dir=1,
        measurements=("a", "b", "c"),
    )
    assert unseq == f"unsequence/{G}/1/0/custom.tsfile"
    assert _files_under(edge.data_dirs[0]) == set()
    assert _files_under(edge.data_dirs[1]) == {unseq, unseq + ".resource"}
    assert tsfile.to_arrow(edge.path(unseq, 1)).column_names == [
        "time",
        "device",
        "a",
        "b",
        "c",
    ]
    with pytest.raises(ValueError, match="does not end with"):
        edge.write_file(G, 0, "x.parquet", devices=[D1], rows_per_device=1)
    with pytest.raises(ValueError, match="unknown format"):
        edge.write_file(G, 0, devices=[D1], rows_per_device=1, fmt="csv")


def test_default_names_never_collide(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path)
    rels = [edge.write_file(G, 0, devices=[D1], rows_per_device=1, start_ms=T0) for _ in range(3)]
    again = EdgeInstance(tmp_path).write_file(G, 0, devices=[D1], rows_per_device=1, start_ms=T0)
    # versions go on across a restart (a new instance on the same folders), as IoTDB's
    assert [_fields(r)[1:] for r in rels] == [(v, 0, 0) for v in (1, 2, 3)]
    assert _fields(again)[1:] == (4, 0, 0)
    assert len({rel.rsplit("/", 1)[1] for rel in [*rels, again]}) == 4


def test_unsealed_file_then_seal(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path)
    rel = edge.write_file(G, 0, devices=[D1], rows_per_device=3, start_ms=T0, seal=False)
    assert _files_under(edge.data_dirs[0]) == {rel}
    assert edge.data_files() == [rel]
    assert edge.sealed_files() == []
    edge.seal(rel)
    assert edge.sealed_files() == [rel]
    assert resource.read(edge.path(rel + ".resource")).devices == {D1: (T0, T0 + 2000)}


def test_deletions_append_one_mods2_entry_each(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path)
    rel = edge.write_file(G, 0, devices=[D1, D2], rows_per_device=3, start_ms=T0)
    edge.add_mods(rel, D1, T0 + 1000)
    first = edge.path(rel + ".mods2").read_bytes()
    assert first == mods2.tree_entry(f"{D1}.*", MIN_TIME, T0 + 1000)
    edge.add_mods(rel, D2, T0, levels="**")
    assert edge.path(rel + ".mods2").read_bytes().startswith(first)  # appended, not rewritten
    entries = mods2.read(edge.path(rel + ".mods2"))
    assert [(d.path, d.start, d.end) for d in entries] == [  # type: ignore[union-attr]
        (f"{D1}.*", MIN_TIME, T0 + 1000),
        (f"{D2}.**", MIN_TIME, T0),
    ]
    assert not edge.path(rel + ".mods").exists()
    assert edge.sealed_files() == [rel]  # deletions do not unseal a file
    with pytest.raises(ValueError, match="levels"):
        edge.add_mods(rel, D1, T0, levels="s1")


def test_a_compaction_leaves_its_sources_sealed_until_it_ends(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path)
    a = edge.write_file(G, 0, devices=[D1], rows_per_device=2, start_ms=T0)
    b = edge.write_file(G, 0, devices=[D1], rows_per_device=2, start_ms=T0 + 10_000)
    t, v, _, _ = _fields(a)
    folder = f"sequence/{G}/1/0"
    running = edge.start_compaction([a, b], G, 0)
    # the target under its temporary name and the log beside it; no source unsealed
    assert running.temporary == f"{folder}/{t}-{v}-1-0.inner"
    assert running.log == f"{folder}/{t}-{v}-1-0.inner.inner-compaction.log"
    assert edge.path(running.log).read_text() == (
        f"source sequence {G} 1 0 {a.rsplit('/', 1)[1]}\n"
        f"source sequence {G} 1 0 {b.rsplit('/', 1)[1]}\n"
        f"target sequence {G} 1 0 {t}-{v}-1-0.inner\n"
    )
    assert edge.data_files() == edge.sealed_files() == [a, b]
    target = edge.seal_compaction(running)
    # sealed beside its sealed sources, then the sources and the log go
    assert target == f"{folder}/{t}-{v}-1-0.tsfile"
    assert edge.sealed_files() == sorted([a, b, target])
    assert not edge.path(running.temporary).exists() and edge.path(running.log).exists()
    edge.end_compaction(running)
    assert _files_under(edge.data_dirs[0]) == {target, target + ".resource"}
    assert resource.read(edge.path(target + ".resource")).devices == {D1: (T0, T0 + 11_000)}
    # the target's progress is its furthest source's
    assert resource.read(edge.path(target + ".resource")).progress_index == (
        resource.iot_progress_index(_fields(b)[1])
    )


def test_merge_keeps_every_row_and_removes_inputs(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path)
    rels = [
        edge.write_file(G, 0, devices=[D1, D2], rows_per_device=4, start_ms=T0),
        edge.write_file(G, 0, devices=[D1], rows_per_device=6, start_ms=T0 + 10_000),
        edge.write_file(
            G, 0, devices=[D2], rows_per_device=2, start_ms=T0 + 20_000, unsequence=True
        ),
    ]
    total = sum(formats.inspect(edge.path(r)).rows for r in rels)
    expected = pa.concat_tables([tsfile.to_arrow(edge.path(r)) for r in rels])
    new = edge.merge(rels, G, 0)
    # a cross compaction (both spaces): the first sequence input's name, cross + 1
    first = _fields(rels[0])
    assert new == f"sequence/{G}/1/0/{first[0]}-{first[1]}-0-1.tsfile"
    assert _files_under(edge.data_dirs[0]) == {new, new + ".resource"}
    assert edge.sealed_files() == [new]
    assert formats.inspect(edge.path(new)) == FileInfo(devices=(D1, D2), rows=total)
    sort = [("device", "ascending"), ("time", "ascending")]
    assert tsfile.to_arrow(edge.path(new)).equals(expected.sort_by(sort))
    again = edge.merge([new], G, 0)
    # an inner compaction: inner + 1, the rest kept
    assert again == f"sequence/{G}/1/0/{first[0]}-{first[1]}-1-1.tsfile"


def test_merge_applies_mods_and_later_file_wins_ties(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path)
    old = edge.write_file(
        G, 1, devices=[D1, D2], rows_per_device=5, start_ms=T0, unsequence=True, fmt="parquet"
    )
    edge.add_mods(old, D1, T0 + 1000)  # deletes D1 at T0 and T0+1000
    newer = edge.write_table(
        pa.table(
            {
                "time": pa.array([T0 + 4000], pa.int64()),
                "device": [D2],
                "s1": pa.array([-1], pa.int64()),
                "s2": pa.array([-2], pa.int64()),
            }
        ),
        G,
        1,
        unsequence=True,
        fmt="parquet",
    )
    merged = edge.merge([old, newer], G, 1)
    # unsequence inputs: the first in name order (time, then version), inner + 1
    first = min(_fields(old), _fields(newer))
    assert merged == f"unsequence/{G}/1/1/{first[0]}-{first[1]}-1-0.parquet"
    table = parquet.to_arrow(edge.path(merged))
    assert table.num_rows == 10 - 2
    rows = {(r["device"], r["time"]): (r["s1"], r["s2"]) for r in table.to_pylist()}
    assert (D1, T0) not in rows and (D1, T0 + 1000) not in rows
    assert rows[(D1, T0 + 2000)] == (
        point_value(D1, "s1", T0 + 2000),
        point_value(D1, "s2", T0 + 2000),
    )
    assert rows[(D2, T0 + 4000)] == (-1, -2)
    assert edge.data_files() == [merged]


def test_delete_removes_file_and_sidecars_only(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path)
    gone = edge.write_file(G, 0, devices=[D1], rows_per_device=1, start_ms=T0)
    kept = edge.write_file(G, 0, devices=[D1], rows_per_device=1, start_ms=T0 + 1000)
    edge.add_mods(gone, D1, T0)
    edge.delete(gone)
    assert _files_under(edge.data_dirs[0]) == {kept, kept + ".resource"}
    edge.delete(gone)  # TTL twice: nothing left to do, no error


def test_append_schema_appends_lines(tmp_path: Path) -> None:
    edge = EdgeInstance(tmp_path)
    edge.append_schema(["CREATE TIMESERIES root.sg1.d1.s1 INT64"])
    edge.append_schema(["a", "b"])
    assert (edge.schema_dir / "mlog.txt").read_text() == (
        "CREATE TIMESERIES root.sg1.d1.s1 INT64\na\nb\n"
    )
    with pytest.raises(ValueError):
        edge.append_schema(["bad\nline"])


def test_names_from_callers_go_through_the_name_gate(tmp_path: Path) -> None:
    from sealsync.errors import BadName

    edge = EdgeInstance(tmp_path)
    with pytest.raises(BadName):
        edge.delete("../outside.tsfile")
    with pytest.raises(BadName):
        edge.write_file("..", 0, devices=[D1], rows_per_device=1)


@pytest.mark.slow
def test_example_cli_writes_what_it_prints(tmp_path: Path) -> None:
    root = tmp_path / "edge"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "edge_instance.py"),
            str(root),
            "--groups",
            "2",
            "--files",
            "2",
            "--devices",
            "2",
            "--rows",
            "3",
            "--unsequence",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("wrote 6 files, 36 rows")
    printed = {line.split()[0] for line in lines[:-1]}
    data = root / "data"
    written = {str(data / rel) for rel in EdgeInstance(root).data_files()}
    assert printed == written
    assert len(EdgeInstance(root).sealed_files()) == 6
    assert len((root / "schema" / "mlog.txt").read_text().splitlines()) == 2 * 2 * 2
