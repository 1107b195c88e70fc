"""``sealsync inspect``: the receiver's format check on files an operator names, with
what each file's metadata says; a refused file is one line and exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from sealsync.app.cli import cli
from sealsync.formats import parquet, tsfile


def _table() -> pa.Table:
    return pa.table(
        {
            "time": pa.array([1, 2, 3, 1], pa.int64()),
            "device": ["root.sg.d1", "root.sg.d1", "root.sg.d1", "root.sg.d2"],
            "s1": pa.array([1.0, None, 3.0, 4.0], pa.float64()),
            "s2": pa.array([10, 20, None, None], pa.int64()),
        }
    )


def _run(*args: str) -> Any:
    return CliRunner().invoke(cli, ["inspect", *args])


@pytest.mark.slow  # a worker process: each file is checked in one
def test_a_whole_tsfile_is_accepted_with_its_version_devices_and_points(tmp_path: Path) -> None:
    path = tmp_path / "1-1-0-0.tsfile"
    tsfile.write_arrow(path, _table())
    result = _run(str(path))
    assert result.exit_code == 0, result.output
    first, *devices = result.stdout.splitlines()
    assert first.startswith(f"{path}: TsFile format 4 (TsFile 2.x, IoTDB 2.x), 2 devices")
    assert first.endswith("5 points: accepted")  # the non-null values, not rows
    assert devices == ["  root.sg.d1", "  root.sg.d2"]


@pytest.mark.slow  # a worker process: each file is checked in one
def test_json_names_every_finding_and_parquet_counts_rows(tmp_path: Path) -> None:
    ts, pq = tmp_path / "a.tsfile", tmp_path / "b.parquet"
    tsfile.write_arrow(ts, _table())
    parquet.write_arrow(pq, _table())
    result = _run("--json", str(ts), str(pq))
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert [f["accepted"] for f in found] == [True, True]
    assert found[0]["version"] == 4 and found[0]["points"] == 5
    assert found[0]["devices"] == ["root.sg.d1", "root.sg.d2"]
    assert found[1]["format"] == "Parquet" and found[1]["rows"] == 4


@pytest.mark.slow  # a worker process: each file is checked in one
def test_a_cut_file_and_an_old_format_are_refused_one_line_each_exit_1(tmp_path: Path) -> None:
    whole = tmp_path / "whole.tsfile"
    tsfile.write_arrow(whole, _table())
    cut = tmp_path / "cut.tsfile"
    cut.write_bytes(whole.read_bytes()[:-20])
    old = tmp_path / "old.tsfile"
    old.write_bytes(b"TsFile000002" + bytes(40) + b"TsFile")
    result = _run(str(whole), str(cut), str(old))
    assert result.exit_code == 1
    refused = [line for line in result.stdout.splitlines() if line.startswith("refused: ")]
    assert len(refused) == 2
    assert str(cut) in refused[0] and "not a complete TsFile" in refused[0]
    assert str(old) in refused[1] and "format version 2 (written by IoTDB 0.10–0.11)" in refused[1]
    assert "Traceback" not in result.output
    assert cut.exists() and old.exists()  # looked at, never touched


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = _run(str(tmp_path / "nope.tsfile"))
    assert result.exit_code == 2
    assert "does not exist" in result.output


@pytest.mark.slow  # the corpus is built with Maven on first use
def test_every_file_iotdb_writes_is_accepted_with_the_java_readers_devices_and_points(
    tsfile_corpus: list[Any],
) -> None:
    result = _run("--json", *(str(e.path) for e in tsfile_corpus))
    assert result.exit_code == 0, result.output
    found = {f["file"]: f for f in json.loads(result.stdout)}
    for entry in tsfile_corpus:
        item = found[str(entry.path)]
        assert item["version"] == entry.format_version
        assert item["devices"] == sorted(entry.devices)
        assert item["points"] == entry.points, entry.path


@pytest.mark.slow  # a fresh interpreter: this one has every library loaded
def test_the_command_line_loads_no_format_library_until_inspect_runs() -> None:
    """Every ``sealsync send`` from cron starts this command line: the format libraries
    (pyarrow, numpy: a third of a second and tens of MB) load only when a command
    needs them."""
    heavy = ("pyarrow", "numpy", "pyspark", "tsfile")
    code = (
        "import sys; import sealsync.app.cli; "
        f"print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == []
