"""The name gate: every hostile shape is refused, ordinary IoTDB names pass."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sealsync.errors import BadName
from sealsync.names import check_data_name, check_relative

GOOD = [
    "sequence/root.sg1/0/1700000000000-1-0.tsfile",
    "unsequence/root.sg1/3/1-2-0.tsfile",
    "sequence/g/a.parquet",
    "sequence/a/b/c/d/e/f.tsfile",
    "sequence/grüppe/0/ünïcode.tsfile",
]
BAD = [
    "",
    "/sequence/g/0/a.tsfile",
    "sequence/../sequence/g/a.tsfile",
    "sequence/g/./a.tsfile",
    "sequence//a.tsfile",
    "sequence/g/a.tsfile/",
    "sequence/g/a\x00.tsfile",
    "sequence/g/a\n.tsfile",
    "sequence/g/a\r.tsfile",
    "sequence\\g\\a.tsfile",
    "sequence/g/a\x1b.tsfile",
    "sequence/" + "x" * 256 + ".tsfile",
    "sequence/" + "/".join(["d"] * 600) + "/a.tsfile",
    "a.tsfile",
    "other/g/a.tsfile",
    "sync-sender/x/a.tsfile",
    "sequence/g/a.tsfile.resource",
    "sequence/g/a",
]


@pytest.mark.parametrize("name", GOOD)
def test_good_names_pass(name: str) -> None:
    assert check_data_name(name) == name


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(BadName):
        check_data_name(name)


@given(st.text(max_size=64))
def test_any_accepted_name_is_relative_and_never_climbs(name: str) -> None:
    try:
        check_relative(name)
    except BadName:
        return
    parts = name.split("/")
    assert not name.startswith("/")
    assert ".." not in parts and "." not in parts and "" not in parts
    assert "\x00" not in name and "\n" not in name
