"""The tree-model TsFile benchmarks run and measure what they say (tiny sizes: not timings)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # each starts a process; the loader one starts Spark


def _run(script: str, *args: str, timeout: int) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_reader_benchmark_reads_both_ways_and_reports_the_load(tmp_path: Path) -> None:
    out = _run(
        "bench_tsfile_read.py",
        *("--files", "2", "--rows", "3000", "--repeat", "2", "--workdir", str(tmp_path)),
        timeout=600,
    )
    assert "generated 2 tree-model TsFiles x 3000 rows" in out
    runs = re.findall(
        r"^run (\d) \((as listed below|in reverse)\): .* \(6000 rows each\)$", out, re.M
    )
    assert runs == [("1", "as listed below"), ("2", "in reverse")]
    for name in (
        "C++ alone, v4 package",
        "Java alone, v4 package",
        "Java alone, v3 IoTDB 1.3",
        "C++ Spark, v4 package",
        "Java Spark, v4 package",
        "Java Spark, v3 IoTDB 1.3",
    ):
        rate = re.search(rf"^{re.escape(name)}:\s+([\d,]+) rows/s \(median of 2; ", out, re.M)
        assert rate and int(rate.group(1).replace(",", "")) > 0, name
    assert re.search(r"^ratio Java/C\+\+ alone, v4 package: [\d.]+ \(target >= 1.00\)$", out, re.M)
    assert re.search(r"^ratio Java alone v3 IoTDB 1.3 / C\+\+ alone v4 package: [\d.]+", out, re.M)
    assert re.search(r"^load average \(1/5/15 min\): before [\d./]+, after [\d./]+", out, re.M)


def test_loader_benchmark_loads_the_same_rows_as_tree_and_format_3_tsfiles(
    tmp_path: Path,
) -> None:
    """One run with both TsFile cases: each costs a Spark session otherwise."""
    out = _run(
        "bench_loader.py",
        *("--rows", "4000", "--files", "4", "--tree", "--v3", "--repeat", "1"),
        *("--workdir", str(tmp_path)),
        timeout=600,
    )
    assert "generated 4000 Parquet rows in 4 files (+0 TsFiles)" in out
    assert "the same rows as 4 tree-model TsFiles" in out
    assert len(list((tmp_path / "receiver-tree").rglob("*.tsfile"))) == 4
    assert len(list((tmp_path / "receiver-v3").rglob("*.tsfile"))) == 4
    assert "4000 rows as 4 format 3 TsFiles (IoTDB 1.3)" in out
    assert re.search(
        r"run 1: plain [\d.]+s, loader [\d.]+s \(4000 rows\), plain\+fsync [\d.]+s, "
        r"loader on TsFiles [\d.]+s \(4000 rows\), loader on v3 TsFiles [\d.]+s \(4000 rows\)",
        out,
    )
    assert re.search(r"^ratio loader TsFile/Parquet: [\d.]+ \(target >= 0.50\)$", out, re.M)
    assert re.search(r"^ratio loader v3 TsFile/Parquet: [\d.]+$", out, re.M)
    assert re.search(r"^ratio loader v3 TsFile/tree TsFile: [\d.]+ \(target >= 0.50\)$", out, re.M)


def test_loader_benchmark_refuses_tree_with_extra_tsfiles() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_loader.py"), "--tree", "--tsfiles", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "--tree compares TsFiles with the same rows as Parquet" in result.stderr
    assert "Traceback" not in result.stderr
