"""The table model: a device is its table plus its tag tuple, and table-model deletions
(``.mods2`` with tag predicates) are applied exactly.

Files come from the ``tsfile`` package's own writer (``dataframe_to_tsfile``) with tag
tuples IoTDB keeps apart and its library's device string does not: ``('a.b', 'c')``
beside ``('a', 'b.c')``, a NULL tag beside the string ``'null'``. Deletions are the bytes
IoTDB 2.x writes (``TableDeletionEntry``/``DeletionPredicate``/``IDPredicate``
``serialize`` in apache/iotdb's ``iotdb-core/datanode/.../dataregion/modification/``),
made by :mod:`sealsync.formats.mods2`'s writers and checked here against hand-written
bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import tsfile as native

from sealsync.formats import deletion, mods2, table_device, tsfile, tsfile_meta
from sealsync.formats.deletion import MAX_TIME, MIN_TIME, TableDeletion

CASES = json.loads((Path(__file__).parent / "table_device_cases.json").read_text())["cases"]

#: (time, region, site, v): tag tuples that collide in ``IDeviceID.toString``
ROWS = [
    (1, "a.b", "c", 1.0),
    (2, "a.b", "c", 2.0),
    (1, "a", "b.c", 3.0),
    (1, None, "x", 4.0),
    (2, None, "x", 5.0),
    (1, "null", "x", 6.0),
    (3, "null", "x", 7.0),
    (1, "north", None, 8.0),
    (5, "north", None, 9.0),
]


def write_colliding(path: Path) -> Path:
    """A table ``t3`` (tags region, site; field v) of :data:`ROWS`, as the package writes it."""
    frame = pd.DataFrame(
        {
            "time": [r[0] for r in ROWS],
            "region": [r[1] for r in ROWS],
            "site": [r[2] for r in ROWS],
            "v": [r[3] for r in ROWS],
        }
    )
    native.dataframe_to_tsfile(frame, str(path), table_name="t3", tag_column=["region", "site"])
    return path


def expected_rows() -> list[dict[str, object]]:
    rows = [
        {"time": t, "device": table_device.name(["t3", region, site]), "v": v}
        for t, region, site, v in ROWS
    ]
    return sorted(rows, key=lambda r: (str(r["device"]), int(str(r["time"]))))


def test_every_shared_case_names_its_device_and_splits_back() -> None:
    for case in CASES:
        segments = tuple(case["segments"])
        assert table_device.name(segments) == case["name"], case
        assert table_device.segments(case["name"]) == table_device.trimmed(segments), case
        assert table_device.is_table_device(case["name"]), case
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len({table_device.trimmed(tuple(c["segments"])) for c in CASES})


def test_tree_devices_are_never_table_devices() -> None:
    assert not table_device.is_table_device("root.sg.d1")
    assert not table_device.is_table_device("root")
    assert table_device.is_table_device("rooted.x")


def test_colliding_tag_tuples_are_distinct_devices_with_their_own_rows(tmp_path: Path) -> None:
    path = write_colliding(tmp_path / "t3.tsfile")
    devices = tsfile_meta.read(path).devices  # the receiver's ownership keys
    assert devices == (
        "t3.`a.b`.c",
        "t3.`null`.x",
        "t3.a.`b.c`",
        "t3.north",
        "t3.null.x",
    )
    got = tsfile.to_arrow(path)
    assert got.num_rows == len(ROWS) == 9  # IoTDB's count; one string per device lost rows
    assert sorted(got.to_pylist(), key=lambda r: (r["device"], r["time"])) == expected_rows()
    assert tsfile.inspect(path).devices == devices


def _deleted(path: Path, entries: bytes) -> list[tuple[str, int]]:
    found = mods2.parse(entries)
    kept = deletion.apply(tsfile.to_arrow(path), found)
    devices, times = kept.column("device").to_pylist(), kept.column("time").to_pylist()
    return sorted(zip(devices, times, strict=True))


def test_a_segment_predicate_deletes_that_tag_value_only(tmp_path: Path) -> None:
    path = write_colliding(tmp_path / "t3.tsfile")
    # DELETE FROM t3 WHERE time <= 3 AND region = 'north'
    north = mods2.table_entry("t3", MIN_TIME, 3, mods2.segment_match("north", 1))
    assert _deleted(path, north) == sorted(
        (r["device"], r["time"])
        for r in expected_rows()
        if (r["device"], r["time"]) != ("t3.north", 1)
    )
    # region IS NULL: the NULL tag, not the string 'null'
    null = mods2.table_entry("t3", MIN_TIME, MAX_TIME, mods2.segment_match(None, 1))
    assert {d for d, _ in _deleted(path, null)} == {
        "t3.`a.b`.c",
        "t3.`null`.x",
        "t3.a.`b.c`",
        "t3.north",
    }
    # region = 'null': the string only
    text = mods2.table_entry("t3", MIN_TIME, MAX_TIME, mods2.segment_match("null", 1))
    assert "t3.`null`.x" not in {d for d, _ in _deleted(path, text)}
    assert "t3.null.x" in {d for d, _ in _deleted(path, text)}
    # site IS NULL: a trailing NULL tag, dropped from the device id, is still null
    site = mods2.table_entry("t3", MIN_TIME, MAX_TIME, mods2.segment_match(None, 2))
    assert "t3.north" not in {d for d, _ in _deleted(path, site)}


def test_and_full_match_measurements_and_other_tables(tmp_path: Path) -> None:
    path = write_colliding(tmp_path / "t3.tsfile")
    everything = sorted((str(r["device"]), int(str(r["time"]))) for r in expected_rows())
    both = mods2.and_match(mods2.segment_match("a.b", 1), mods2.segment_match("c", 2))
    assert _deleted(path, mods2.table_entry("t3", 2, 2, both)) == [
        k for k in everything if k != ("t3.`a.b`.c", 2)
    ]
    full = mods2.full_match(("t3", "a", "b.c"))
    assert _deleted(path, mods2.table_entry("t3", 0, 10, full)) == [
        k for k in everything if k[0] != "t3.a.`b.c`"
    ]
    # a whole device with a trailing null: the id drops it, so it is t3.north
    full_null = mods2.full_match(("t3", "north", None))
    assert {d for d, _ in _deleted(path, mods2.table_entry("t3", 0, 10, full_null))} == {
        d for d, _ in everything
    } - {"t3.north"}
    assert _deleted(path, mods2.table_entry("t4", MIN_TIME, MAX_TIME, mods2.nop())) == everything
    assert _deleted(path, mods2.table_entry("t3", 0, 10, mods2.nop(), ("w",))) == everything
    assert _deleted(path, mods2.table_entry("t3", 0, 10, mods2.nop(), ("v",))) == []
    # a tree deletion never reaches a table-model device
    tree = mods2.tree_entry("root.**", MIN_TIME, MAX_TIME)
    assert _deleted(path, tree) == everything


def test_the_writers_write_the_bytes_iotdb_writes() -> None:
    """``DeletionPredicate.serialize``: writeVar(table), the predicate (a type byte, then
    ``SegmentExactMatch``: writeVar(pattern), writeVarInt(index); ``And``:
    writeVarInt(count), each), writeVarInt(measurement count), each writeVar; a null
    string is the zigzag varint of -1 (``01``)."""
    entry = mods2.table_entry(
        "t1",
        MIN_TIME,
        3,
        mods2.and_match(mods2.segment_match("north", 1), mods2.segment_match(None, 2)),
    )
    assert entry == (
        b"\x00"
        + bytes.fromhex("8000000000000000")
        + bytes.fromhex("0000000000000003")
        + b"\x04t1"
        + b"\x03\x04"
        + b"\x02\x0anorth\x02"
        + b"\x02\x01\x04"
        + b"\x00"
    )
    # FullExactMatch: StringArrayDeviceID.serialize, an unsigned varint count
    assert mods2.full_match(("t1", None)) == b"\x01\x02\x04t1\x01"
    assert mods2.parse(entry) == [
        TableDeletion(
            "t1", MIN_TIME, 3, ((1, "north"), (2, None)), (), (), ".mods2 entry at byte 0"
        )
    ]


def test_table_deletions_cross_to_the_readers_and_back() -> None:
    d = TableDeletion("t3", 1, 2, ((1, None), (2, "x")), (("t3", "a", None),), ("v", "w"), "here")
    wire = deletion.to_wire(d)
    assert wire[0] == deletion.WIRE_TABLE
    assert deletion.from_wire(wire, 1, 2, "here") == d
    with pytest.raises(Exception, match="does not read back"):
        deletion.from_wire([deletion.WIRE_TABLE, "t3", "1"], 1, 2, "here")


def test_an_and_of_too_many_conditions_is_refused() -> None:
    many = mods2.and_match(*[mods2.segment_match("x", 1)] * 300)
    with pytest.raises(Exception, match="more than 256 conditions"):
        mods2.parse(mods2.table_entry("t", 0, 1, many))
    nested = mods2.nop()
    for _ in range(70):
        nested = mods2.and_match(nested)
    with pytest.raises(Exception, match="nested more than 64 deep"):
        mods2.parse(mods2.table_entry("t", 0, 1, nested))


def test_a_file_of_more_conditions_than_the_bound_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mods2, "MAX_CONDITIONS", 10)
    entry = mods2.table_entry("t", 0, 1, mods2.and_match(*[mods2.segment_match("x", 1)] * 4))
    assert len(mods2.parse(entry * 2)) == 2
    with pytest.raises(Exception, match="more than 10 id predicate conditions in one file"):
        mods2.parse(entry * 3)


def test_apply_on_an_empty_or_tree_only_table_is_unchanged() -> None:
    table = pa.table({"time": [1], "device": ["root.sg.d1"], "s": [1.0]})
    entry = mods2.table_entry("root", MIN_TIME, MAX_TIME, mods2.nop())
    assert deletion.apply(table, mods2.parse(entry)).to_pylist() == table.to_pylist()
