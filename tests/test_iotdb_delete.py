"""A sender's deletion entries become IoTDB statements over its own devices only
(receiver/storage/iotdb_delete.py); the real servers: tests/security/test_iotdb_deletions.py."""

from __future__ import annotations

import pytest

from receiver.storage.iotdb_delete import OwnedDevices, scoped_statements
from sealsync.formats.deletion import (
    MAX_TIME,
    MIN_TIME,
    RULES_012,
    RULES_12,
    SeriesDeletion,
    check_pattern,
)

MINE = ["root.h.d1", "root.h.d2", "root.h.a.d3"]
THEIRS = ["root.victim.d0", "root.victim.d1", "root.h2.d1"]


def _entry(
    path: str, start: int = MIN_TIME, end: int = MAX_TIME, rules: str = RULES_12
) -> SeriesDeletion:
    return SeriesDeletion(check_pattern(path, "line 1", rules), start, end, None, "line 1", rules)


def _scoped(
    path: str,
    dialect: str = "2.0",
    mine: list[str] = MINE,
    theirs: list[str] = THEIRS,
    rules: str = RULES_12,
) -> tuple[list[str], list[str]]:
    out = scoped_statements(_entry(path, 5, 9, rules), dialect, OwnedDevices(mine, theirs))
    return out.statements, out.refused


def test_root_star_star_reaches_every_device_of_the_sender_and_no_other() -> None:
    statements, refused = _scoped("root.**")
    assert statements == [
        "DELETE FROM root.`h`.`a`.`d3`.* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`d1`.* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`d2`.* WHERE time >= 5 AND time <= 9",
    ]
    assert refused == []
    assert _scoped("root.**", "0.12")[0] == [
        "DELETE FROM root.h.a.d3.* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.h.d1.* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.h.d2.* WHERE time >= 5 AND time <= 9",
    ]
    assert _scoped("root.victim.**") == ([], [])


@pytest.mark.parametrize("dialect", ["2.0", "0.12"])
def test_a_comma_in_a_pattern_is_one_node_never_a_second_path(dialect: str) -> None:
    assert _scoped("root.h.d1,root.victim.**", dialect) == ([], [])
    # a device of its own named so, to make the comma reach a statement
    mine = ["root.h.d1,root.victim"]
    statements, refused = _scoped("root.h.d1,root.victim.**", dialect, mine)
    if dialect == "2.0":
        assert statements == [
            "DELETE FROM root.`h`.`d1,root`.`victim`.* WHERE time >= 5 AND time <= 9"
        ]
    else:
        assert statements == []
        assert refused == [
            "device root.h.d1,root.victim: the node d1,root cannot be written in a DELETE"
        ]


def test_series_wildcards_and_globs_keep_to_the_device() -> None:
    assert _scoped("root.h.d1.s1")[0] == [
        "DELETE FROM root.`h`.`d1`.`s1` WHERE time >= 5 AND time <= 9"
    ]
    assert _scoped("root.h.*.s1")[0] == [
        "DELETE FROM root.`h`.`d1`.`s1` WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`d2`.`s1` WHERE time >= 5 AND time <= 9",
    ]
    assert _scoped("root.*.d*.s*")[0] == [
        "DELETE FROM root.`h`.`d1`.s* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`d2`.s* WHERE time >= 5 AND time <= 9",
    ]
    assert _scoped("root.**.d3.*")[0] == [
        "DELETE FROM root.`h`.`a`.`d3`.* WHERE time >= 5 AND time <= 9"
    ]
    # a quoted last node is a name, whatever it holds
    assert _scoped("root.h.d1.`s.1*`")[0] == [
        "DELETE FROM root.`h`.`d1`.`s.1*` WHERE time >= 5 AND time <= 9"
    ]
    # a glob that is not one run of plain characters cannot be written
    statements, refused = _scoped("root.h.d1.*a-b*")
    assert statements == []
    assert refused == ["device root.h.d1: the glob *a-b* cannot be written in a DELETE"]


def test_names_are_quoted_backquotes_doubled_and_control_characters_refused() -> None:
    mine = ["root.h.`x``y`", "root.h.`a b`", 'root.h."q.r"', "root.h.`c\x01`", "plain-parquet-id"]
    statements, refused = _scoped("root.h.**", "2.0", mine)
    assert statements == [
        "DELETE FROM root.`h`.`q.r`.* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`a b`.* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`x``y`.* WHERE time >= 5 AND time <= 9",
    ]
    assert refused == ["device root.h.`c\\x01`: the name c\\x01 cannot be written in a DELETE"]
    statements, refused = _scoped("root.h.**", "0.12", ['root.h."q.r"', "root.h.dev-1:a@b#c"])
    assert statements == [
        'DELETE FROM root.h."q.r".* WHERE time >= 5 AND time <= 9',
        "DELETE FROM root.h.dev-1:a@b#c.* WHERE time >= 5 AND time <= 9",
    ]


def test_an_edge_0_12_entry_reads_as_a_prefix_of_the_senders_devices() -> None:
    # 0.12 deleted every series under DELETE FROM root.h; here per device of the sender
    assert _scoped("root.h", "0.12", rules=RULES_012)[0] == [
        "DELETE FROM root.h.a.d3 WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.h.d1 WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.h.d2 WHERE time >= 5 AND time <= 9",
    ]
    assert _scoped("root.h", "2.0", rules=RULES_012)[0] == [
        "DELETE FROM root.`h`.`a`.`d3`.* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`d1`.* WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`d2`.* WHERE time >= 5 AND time <= 9",
    ]
    # a pattern one node longer names the series; * one node, and d* or s* no series
    assert _scoped("root.h.*.s1", "2.0", rules=RULES_012)[0] == [
        "DELETE FROM root.`h`.`d1`.`s1` WHERE time >= 5 AND time <= 9",
        "DELETE FROM root.`h`.`d2`.`s1` WHERE time >= 5 AND time <= 9",
    ]
    assert _scoped("root.h.d*.s1", "2.0", rules=RULES_012) == ([], [])
    assert _scoped("root.h.d1.s*", "2.0", rules=RULES_012) == ([], [])
    # an entry written by 1.x or 2.x reads whole: the series root.h, of no device
    assert _scoped("root.h", "2.0") == ([], [])
    assert _scoped("root.h", "0.12") == ([], [])


def test_a_glob_a_0_12_data_centre_would_read_as_a_name_is_not_sent() -> None:
    statements, refused = _scoped("root.h.d1.s*", "0.12")
    assert statements == []
    assert refused == ["device root.h.d1: the glob s* cannot be written in a DELETE"]
    # a glob IoTDB reads as a regular expression: in the device's nodes or its last one
    for pattern, glob in (("root.h.d{1}*.s1", "d{1}*"), ("root.h.d1.s{2}*", "s{2}*")):
        assert _scoped(pattern, "2.0") == (
            [],
            [f"any device: IoTDB reads the glob {glob} as a regular expression"],
        )


def test_0_12_statements_that_would_reach_another_senders_device_below_are_not_sent() -> None:
    theirs = ["root.h.d1.sub", "root.h.d2.x.y"]
    statements, refused = _scoped("root.h.**", "0.12", theirs=theirs)
    assert statements == ["DELETE FROM root.h.a.d3.* WHERE time >= 5 AND time <= 9"]
    assert refused == [
        "device root.h.d1: IoTDB 0.12 reads DELETE FROM root.h.d1.* as a prefix, which "
        "reaches root.h.d1.sub of another sender",
        "device root.h.d2: IoTDB 0.12 reads DELETE FROM root.h.d2.* as a prefix, which "
        "reaches root.h.d2.x.y of another sender",
    ]
    # one measurement's prefix reaches only the devices below that node
    assert _scoped("root.h.d2.s1", "0.12", theirs=theirs) == (
        ["DELETE FROM root.h.d2.s1 WHERE time >= 5 AND time <= 9"],
        [],
    )
    assert _scoped("root.h.d2.x", "0.12", theirs=theirs)[0] == []
    # 2.x reads D.* as the device's own series: nothing below is reached
    assert len(_scoped("root.h.**", "2.0", theirs=theirs)[0]) == 3


def test_the_range_is_written_as_the_entry_bounds_it() -> None:
    devices = OwnedDevices(["root.h.d1"], [])
    for (start, end), where in {
        (MIN_TIME, MAX_TIME): "",
        (MIN_TIME, 4): " WHERE time <= 4",
        (3, MAX_TIME): " WHERE time >= 3",
        (-2, 7): " WHERE time >= -2 AND time <= 7",
    }.items():
        out = scoped_statements(_entry("root.h.d1.s1", start, end), "2.0", devices)
        assert out.statements == [f"DELETE FROM root.`h`.`d1`.`s1`{where}"]
