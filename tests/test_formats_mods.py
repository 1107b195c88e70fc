"""The ``X.mods`` format: parsing, refusing what does not parse, applying deletions."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from sealsync.errors import FormatError
from sealsync.formats import mods


def test_parses_lines_and_devices_with_commas() -> None:
    text = "DELETION,root.sg.d1,100\n\nDELETION,root.sg.`a,b`,-5\n"
    assert mods.parse(text) == [
        mods.Deletion("root.sg.d1", 100),
        mods.Deletion("root.sg.`a,b`", -5),
    ]
    assert mods.parse("".join(d.line() for d in mods.parse(text))) == mods.parse(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("DELETE,root.d1,5\n", "line 1: not DELETION"),
        ("DELETION,root.d1,5\nDELETION,5\n", "line 2: not DELETION"),
        ("DELETION,,5\n", "line 1: not DELETION"),
        ("DELETION,root.d1,five\n", "line 1: time 'five' is not an integer"),
        (f"DELETION,root.d1,{1 << 63}\n", "line 1: time 9223372036854775808 out of range"),
    ],
)
def test_a_line_that_does_not_parse_refuses_the_file(text: str, why: str) -> None:
    with pytest.raises(FormatError) as caught:
        mods.parse(text)
    assert str(caught.value).startswith(f".mods {why}")


def test_read_missing_is_none_and_binary_is_refused(tmp_path: Path) -> None:
    assert mods.read(tmp_path / "absent.mods") == []
    (tmp_path / "x.mods").write_bytes(b"DELETION,\xff,1\n")
    with pytest.raises(FormatError, match="not UTF-8"):
        mods.read(tmp_path / "x.mods")


def test_apply_removes_exactly_the_deleted_points() -> None:
    table = pa.table(
        {"time": [1, 2, 3, 1, 2], "device": ["a", "a", "a", "b", "b"], "s1": [10, 20, 30, 40, 50]}
    )
    kept = mods.apply(table, [mods.Deletion("a", 2), mods.Deletion("b", 0)])
    assert kept.to_pydict() == {"time": [3, 1, 2], "device": ["a", "b", "b"], "s1": [30, 40, 50]}
    assert mods.apply(table, []).equals(table)
    batch = table.to_batches()[0]
    assert mods.apply(batch, [mods.Deletion("b", 9)]).num_rows == 3


def test_apply_never_removes_a_row_without_time_or_device() -> None:
    """No deletion names a point whose time or device is null (the loader's Spark filter
    on Parquet scans keeps such rows too)."""
    table = pa.table(
        {"time": pa.array([1, None, 1, 5], pa.int64()), "device": ["a", "a", None, "a"]}
    )
    kept = mods.apply(table, [mods.Deletion("a", 2), mods.Deletion("z", 9)])
    assert kept.to_pydict() == {"time": [None, 1, 5], "device": ["a", None, "a"]}


def test_read_version_names_the_file_it_read(tmp_path: Path) -> None:
    path = tmp_path / "x.mods"
    assert mods.read_version(path) == ([], None)
    path.write_text("DELETION,root.d1,5\n")
    st = path.stat()
    assert mods.read_version(path) == ([mods.Deletion("root.d1", 5)], (st.st_size, st.st_mtime_ns))
