"""IoTDB's deletion files: the text ``.mods`` (0.11-1.x), the binary ``.mods2`` (2.x),
the path patterns they name and the deletions applied to a file's rows."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sealsync.errors import FormatError
from sealsync.formats import deletion, mods, mods2
from sealsync.formats.deletion import MAX_TIME, MIN_TIME, SeriesDeletion, TableDeletion

CASES = json.loads((Path(__file__).parent / "path_pattern_cases.json").read_text())["cases"]

# The four lines IoTDB 0.12.0 wrote for four DELETE statements (docs/iotdb.md).
REAL_012 = (
    "DELETION,root.sg.d1.s1,823,-9223372036854775808,4\n"
    "DELETION,root.sg.d2.*,823,5,6\n"
    "DELETION,root.sg.d2.s4,823,9,9223372036854775807\n"
    "DELETION,root.sg.*.*,823,-9223372036854775808,1\n"
)


def _d(
    path: str, start: int, end: int, offset: int | None, where: str, rules: str = deletion.RULES_12
) -> SeriesDeletion:
    return SeriesDeletion(
        deletion.check_pattern(path, where, rules), start, end, offset, where, rules
    )


def _triples(found: list[SeriesDeletion]) -> list[tuple[str, int, int, int | None]]:
    return [(d.path, d.start, d.end, d.below_offset) for d in found]


# ---------------------------------------------------------------- .mods


def test_the_lines_a_real_iotdb_wrote() -> None:
    old = deletion.RULES_012  # no ** and no .resource: read as 0.12 reads it
    assert mods.parse(REAL_012) == [
        _d("root.sg.d1.s1", MIN_TIME, 4, 823, ".mods line 1", old),
        _d("root.sg.d2.*", 5, 6, 823, ".mods line 2", old),
        _d("root.sg.d2.s4", 9, MAX_TIME, 823, ".mods line 3", old),
        _d("root.sg.*.*", MIN_TIME, 1, 823, ".mods line 4", old),
    ]


def test_four_fields_start_at_long_min_and_the_version_is_the_offset() -> None:
    assert _triples(mods.parse("DELETION,root.sg.d1.s1,7,100\n")) == [
        ("root.sg.d1.s1", MIN_TIME, 100, 7)
    ]


def test_a_path_may_hold_commas_and_trailing_empty_fields_drop_as_in_java() -> None:
    text = "DELETION,root.sg.`a,b`.s1,9,1,2\nDELETION,root.sg.d1.s1,9,3,4,,\n"
    assert _triples(mods.parse(text)) == [
        ("root.sg.`a,b`.s1", 1, 2, 9),
        ("root.sg.d1.s1", 3, 4, 9),
    ]
    # a comma in a 4-field line too: the third field from the end is no integer
    assert _triples(mods.parse("DELETION,root.sg.`a,b`.s1,9,2\n")) == [
        ("root.sg.`a,b`.s1", MIN_TIME, 2, 9)
    ]


def test_patterns_with_one_and_any_level_wildcards_anywhere() -> None:
    text = "".join(
        mods.line(p, 5, 0, 1)
        for p in ("root.sg.**", "root.**.s1", "root.sg.*.s1", "root.*.d1.**", "root.sg.d*.s1")
    )
    assert [d.pattern for d in mods.parse(text)] == [
        ("root", "sg", "**"),
        ("root", "**", "s1"),
        ("root", "sg", "*", "s1"),
        ("root", "*", "d1", "**"),
        ("root", "sg", "d*", "s1"),
    ]


def test_long_bounds_and_a_windows_line_end() -> None:
    text = f"DELETION,root.sg.d1.s1,{MAX_TIME},{MIN_TIME},{MAX_TIME}\r\n"
    assert _triples(mods.parse(text)) == [("root.sg.d1.s1", MIN_TIME, MAX_TIME, MAX_TIME)]


@pytest.mark.parametrize(
    ("text", "left"),
    [
        (REAL_012 + "aborted\n", ["root.sg.d1.s1", "root.sg.d2.*", "root.sg.d2.s4"]),
        ("DELETION,root.a.b.c,1,0,1\naborted\nDELETION,root.a.b.d,1,0,1\n", ["root.a.b.d"]),
        (REAL_012 + "aborted\naborted\n", ["root.sg.d1.s1", "root.sg.d2.*"]),
        ("DELETION,root.a.b.c,1,0,1\naborted\n", []),
    ],
)
def test_aborted_cancels_the_modification_just_before_it(text: str, left: list[str]) -> None:
    assert [d.path for d in mods.parse(text)] == left


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("aborted\nDELETION,root.a.b,1,0,1\n", "line 1: 'aborted' with no modification"),
        ("DELETION,root.a.b,1,0,1\naborted\naborted\n", "line 3: 'aborted' with no modif"),
        ("DELETE,root.d1,5,1,2\n", "line 1: unknown modification type 'DELETE'"),
        ("DELETION,root.a.b,1,0,1\n\n", "line 2: unknown modification type ''"),
        ("DELETION,root.a.b,1,0,1\nDELETION,5,6\n", "line 2: 3 fields"),
        ("DELETION,root.d1.s1,1,five\n", "line 1: time 'five' is not a long"),
        ("DELETION,root.d1.s1,x,y\n", "line 1: version 'x' is not a long"),
        ("DELETION,root.d1.s1,1,2,z\n", "line 1: time 'z' is not a long"),
        (f"DELETION,root.d1.s1,1,0,{1 << 63}\n", "line 1: time '9223372036854775808'"),
        ("DELETION,root.d1.s1,1, 2,3\n", "line 1: time ' 2' is not a long"),
        ("DELETION,,1,0,1\n", "line 1: path '': an empty node"),
        ("DELETION,root..s1,1,0,1\n", "line 1: path 'root..s1': an empty node"),
        ("DELETION,root.`a.s1,1,0,1\nDELETION,root.**,1,0,1\n", "line 1: path 'root.`a.s1': unclo"),
        ('DELETION,root."a.s1,1,0,1\n', "line 1: path 'root.\"a.s1': a double quote not closed"),
        ("DELETION,root.a'b,1,0,1\n", 'line 1: path "root.a\'b": a single quote'),
        ("DELETION,sg.d1.s1,1,0,1\n", "line 1: path 'sg.d1.s1' does not start with root"),
        ("DELETION,root.a.b,1,0,1\nDELETION,root.a.b,1,0", "line 2 has no line end"),
    ],
)
def test_a_line_that_does_not_read_refuses_the_file_naming_it(text: str, why: str) -> None:
    with pytest.raises(FormatError) as caught:
        mods.parse(text)
    assert str(caught.value).startswith(f".mods {why}"), str(caught.value)


def test_read_missing_is_none_and_bad_utf8_names_its_line(tmp_path: Path) -> None:
    assert mods.read_version(tmp_path / "absent.mods") == ([], None)
    (tmp_path / "x.mods").write_bytes(b"DELETION,root.a.b,1,0,1\nDELETION,root.\xff,1,0,1\n")
    with pytest.raises(FormatError, match=r"^\.mods line 2: not UTF-8"):
        mods.read(tmp_path / "x.mods")
    (tmp_path / "y.mods").write_text(REAL_012)
    st = (tmp_path / "y.mods").stat()
    got, version = mods.read_version(tmp_path / "y.mods")
    assert len(got) == 4 and version == (st.st_size, st.st_mtime_ns)


# ---------------------------------------------------------------- .mods2


def test_the_bytes_a_real_iotdb_2_wrote() -> None:
    real = bytes.fromhex("01" + "8000000000000000" + "0000000000000004" + "1a") + b"root.sg.d1.s1"
    assert mods2.tree_entry("root.sg.d1.s1", MIN_TIME, 4) == real
    data = real + mods2.tree_entry("root.sg.**", 3, 5)
    assert mods2.parse(data) == [
        _d("root.sg.d1.s1", MIN_TIME, 4, None, ".mods2 entry at byte 0"),
        _d("root.sg.**", 3, 5, None, ".mods2 entry at byte 31"),
    ]
    assert mods2.tree_entry("root.sg.**", 0, 0)[17] == 0x14  # zigzag(10)


def test_a_long_path_takes_a_two_byte_varint() -> None:
    path = "root.sg." + "d" * 100 + ".s1"
    entry = mods2.tree_entry(path, 1, 2)
    assert entry[17:19] == bytes([(len(path) * 2) & 0x7F | 0x80, (len(path) * 2) >> 7])
    assert [d.path for d in mods2.parse(entry) if isinstance(d, SeriesDeletion)] == [path]


def _varstr(text: str) -> bytes:
    return mods2.tree_entry(text, 0, 0)[17:]


def test_a_table_deletion_reads_as_iotdb_writes_it_and_is_applied() -> None:
    # bytes as DeletionPredicate.serialize / IDPredicate.SegmentExactMatch write them
    entry = (
        bytes([0x00])
        + (1).to_bytes(8, "big")
        + (9).to_bytes(8, "big")
        + _varstr("t1")
        + bytes([2])
        + _varstr("dev7")
        + bytes([2])  # segment index 1, zigzag
        + bytes([4])  # 2 measurements
        + _varstr("m1")
        + _varstr("m2")
    )
    data = mods2.tree_entry("root.sg.d1.s1", 0, 1) + entry
    found = mods2.parse(data)
    assert found[1] == TableDeletion(
        "t1", 1, 9, ((1, "dev7"),), (), ("m1", "m2"), ".mods2 entry at byte 31"
    )
    assert found[1].predicate == "segment 1 = 'dev7'"
    table = pa.table(
        {
            "device": ["root.sg.d1", "t1.dev7", "t1.dev7", "t1.dev8"],
            "time": [0, 5, 5, 5],
            "m1": [1.0, 2.0, None, 4.0],
            "m3": [None, None, 3.0, None],
        }
    )
    got = deletion.apply(table, found)
    assert got.to_pylist() == [  # the tree device untouched; t1.dev7's m1 in [1, 9] gone
        {"device": "root.sg.d1", "time": 0, "m1": 1.0, "m3": None},
        {"device": "t1.dev7", "time": 5, "m1": None, "m3": 3.0},
        {"device": "t1.dev8", "time": 5, "m1": 4.0, "m3": None},
    ]


@pytest.mark.parametrize(
    ("cut", "why"),
    [
        (1, "byte 1 (entry at byte 0): the file ends inside a start time"),
        (9, "byte 9 (entry at byte 0): the file ends inside an end time"),
        (17, "byte 17 (entry at byte 0): the file ends inside a path pattern"),
        (20, "byte 18 (entry at byte 0): the file ends inside a path pattern"),
    ],
)
def test_a_truncated_entry_names_its_byte(cut: int, why: str) -> None:
    data = mods2.tree_entry("root.sg.d1.s1", 0, 1)
    with pytest.raises(FormatError) as caught:
        mods2.parse(data[:cut])
    assert str(caught.value) == f".mods2 {why}"
    with pytest.raises(FormatError, match=r"entry at byte 31\): the file ends"):
        mods2.parse(data + data[:cut])


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x02" + bytes(16), "byte 0 (entry at byte 0): unknown entry type 0x02"),
        (b"\x01" + bytes(16) + b"\x01", "byte 17 (entry at byte 0): a path pattern: length -1"),
        (b"\x01" + bytes(16) + b"\x04\xff\xfe", "byte 17 (entry at byte 0): a path pattern is not"),
        (b"\x01" + bytes(16) + b"\xff" * 6, "byte 22 (entry at byte 0): a path pattern: a varint"),
        (b"\x00" + bytes(16) + _varstr("t") + b"\x01", "byte 20 (entry at byte 0): the file ends"),
        (
            b"\x00" + bytes(16) + _varstr("t") + b"\x01\x00",  # FullExactMatch of no segment
            "byte 21 (entry at byte 0): the file ends inside a measurement count",
        ),
        (
            b"\x00" + bytes(16) + _varstr("t") + b"\x01\x02\x01\x01",  # segments null, null
            "byte 20 (entry at byte 0): a device id whose every segment is null",
        ),
        (
            b"\x00" + bytes(16) + _varstr("t") + b"\x02\x01\x01",  # segment index -1
            "byte 21 (entry at byte 0): an id predicate's segment index -1",
        ),
        (b"\x00" + bytes(16) + _varstr("t") + b"\x09", "byte 19 (entry at byte 0): unknown id"),
    ],
)
def test_bytes_that_are_no_entry_refuse_the_file(data: bytes, why: str) -> None:
    with pytest.raises(FormatError) as caught:
        mods2.parse(data)
    assert str(caught.value).startswith(f".mods2 {why}"), str(caught.value)


def test_mods2_bad_path_and_read_version(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"^\.mods2 entry at byte 0: path 'sg\.d1'"):
        mods2.parse(mods2.tree_entry("sg.d1", 0, 1))
    path = tmp_path / "x.tsfile.mods2"
    assert mods2.read_version(path) == ([], None)
    path.write_bytes(mods2.tree_entry("root.sg.**", 0, 1))
    st = path.stat()
    got, version = mods2.read_version(path)
    assert len(got) == 1 and version == (st.st_size, st.st_mtime_ns)


def _plain_resource(mod_file: str | None, *, block: bool) -> bytes:
    """A ``.resource`` as IoTDB 0.12-1.x write one (plain device time index, one device);
    1.2 and later write the modification file's field always and a block after it."""
    device = b"root.w3.d1"
    out = bytes([1, 1]) + struct.pack(">iqqi", 1, 1, 9, len(device)) + device
    out += struct.pack(">iqq", 0, MIN_TIME, MAX_TIME)
    if mod_file is not None:
        out += struct.pack(">i", len(mod_file)) + mod_file.encode()
    elif block:
        out += struct.pack(">i", -1)
    return out + (b"\x00" if block else b"")


@pytest.mark.parametrize(
    ("resource_bytes", "text", "rules"),
    [
        (None, "DELETION,root.w3.d*.s1,99,1,2\n", deletion.RULES_012),
        (_plain_resource(None, block=False), "DELETION,root.w3.d*.s1,99,1,2\n", "0.12"),
        (_plain_resource("x.tsfile.mods", block=False), "DELETION,root.w3,99,1,2\n", "0.12"),
        (None, "DELETION,root.w3.d*.s1,99,1,2\nDELETION,root.**,99,5,5\n", "0.13"),
        (_plain_resource("x.tsfile.mods", block=True), "DELETION,root.w3.d*.s1,99,1,2\n", "1.2"),
        (_plain_resource(None, block=True), "DELETION,root.w3,99,1,2\n", "1.2"),
        (b"not a resource", "DELETION,root.w3,99,1,2\n", "0.12"),
    ],
)
def test_a_mods_is_read_by_the_rules_of_the_release_that_wrote_it(
    tmp_path: Path, resource_bytes: bytes | None, text: str, rules: str
) -> None:
    data = tmp_path / "1-1-0-0.tsfile"
    Path(f"{data}.mods").write_text(text)
    if resource_bytes is not None:
        Path(f"{data}.resource").write_bytes(resource_bytes)
    got = mods.read(f"{data}.mods")
    assert {d.rules for d in got} == {rules}
    covers = deletion.matches(got[0], "root.w3.d1", "s1")
    # 0.12: root.w3 is a prefix and d* a name; 0.13 and 1.2: the reverse
    assert covers is (("d*" in text) is (rules != deletion.RULES_012))
    if resource_bytes is None:  # the text alone decides as the file does
        assert mods.parse(text) == got


# ---------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: f"{c.get('rules', '1.2')}:{c['pattern']}~{c['device']}.{c['measurement']}",
)
def test_pattern_cases_shared_with_the_java_matcher(case: dict[str, Any]) -> None:
    rules = case.get("rules", deletion.RULES_12)
    d = SeriesDeletion(
        deletion.check_pattern(case["pattern"], "here", rules), 0, 1, None, "here", rules
    )
    if case["expect"] == "refuse":
        with pytest.raises(FormatError, match="regular expression|series .* single quote"):
            deletion.matches(d, case["device"], case["measurement"])
    else:
        assert deletion.matches(d, case["device"], case["measurement"]) is case["expect"]


def test_the_case_table_covers_every_kind_of_node_under_each_rules() -> None:
    for rules in deletion.RULES:
        cases = [c for c in CASES if c.get("rules", deletion.RULES_12) == rules]
        assert {c["expect"] for c in cases} == {True, False, "refuse"}, rules
        patterns = " ".join(c["pattern"] for c in cases)
        for needle in (".*", "d*", "`", '"'):
            assert needle in patterns, (rules, needle)
    patterns = " ".join(c["pattern"] for c in CASES)
    for needle in (".**", "**.", ".*.", "*1", "``", "a*b"):
        assert needle in patterns


def test_the_rules_cross_to_the_readers_and_back() -> None:
    for rules in deletion.RULES:
        d = SeriesDeletion(("root", "sg", "d*"), 0, 1, None, "here", rules)
        wire = deletion.to_wire(d)
        assert deletion.from_wire(wire, 0, 1, "here") == d
        assert (wire == list(d.pattern)) is (rules == deletion.RULES_12)
    with pytest.raises(FormatError, match="unknown rules '9'"):
        deletion.from_wire([deletion.WIRE_RULES + "9", "root"], 0, 1, "here")


# ---------------------------------------------------------------- apply


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True))


def test_apply_deletes_per_series_over_a_closed_range_and_drops_emptied_rows() -> None:
    table = pa.table(
        {
            "device": ["root.sg.d1"] * 4 + ["root.sg.d2"] * 2,
            "time": [1, 2, 3, 4, 1, 2],
            "s1": [1.0, 2.0, 3.0, 4.0, 5.0, None],
            "s2": [10, 20, None, 40, 50, 60],
        }
    )
    gone = mods.parse("DELETION,root.sg.d1.s1,99,2,3\nDELETION,root.sg.*.s2,99,1,2\n")
    kept = deletion.apply(table, gone, 99)
    # d1 t=2 lost both values, t=3 its only one; d2 t=2 its only one: those rows go
    assert _rows(kept) == [
        ("root.sg.d1", 1, 1.0, None),
        ("root.sg.d1", 4, 4.0, 40),
        ("root.sg.d2", 1, 5.0, None),
    ]


def test_apply_refuses_an_offset_inside_the_file_and_keeps_null_keys() -> None:
    table = pa.table({"device": ["root.sg.d1", None], "time": pa.array([1, 1], pa.int64())})
    table = table.append_column("s1", pa.array([1.0, 2.0]))
    gone = mods.parse("DELETION,root.sg.d1.s1,5,0,9\n")
    with pytest.raises(FormatError, match="line 1: deletes only from chunks below offset 5"):
        deletion.apply(table, gone, 6)
    assert _rows(deletion.apply(table, gone, 5)) == [(None, 1, 2.0)]
    assert deletion.apply(table, [], 5).equals(table)
