"""TsFiles through the loader's own read path, and rows compared value by value.

The read path is the one ``job.py`` runs: the Java schema pass (``java_schema``), the
schema the driver merges, the Java data pass (``java_data``), both with the receiver's
table of what is read exactly (``sealsync.formats.tsfile_support``). A file comes back as
its rows, or as the one line the loader reports when it refuses or fails on it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from tsfile_corpus import values_equal

from sealsync.errors import FormatError
from sealsync.formats import tsfile as tsfile_format
from spark_loader import schema as schemas
from spark_loader.failure import describe
from spark_loader.table_layout import KEY_COLUMN
from spark_loader.tsfile_read import FILES_DDL, java_data, java_schema, series_of

Rows = dict[tuple[str, int], dict[str, Any]]
"""(device, time) -> {measurement: value} of the non-null values."""


def java_main(cls: str, lines: list[str]) -> list[str]:
    """The answer lines of a class of the loader's jar whose ``main`` answers each line
    of stdin with one line (the shared case tables' Java side)."""
    from spark_loader.jvm import JAR

    java = shutil.which("java")
    assert java is not None, "the loader's tests need a Java"
    run = subprocess.run(
        [java, "-cp", str(JAR), cls],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split("\n")[:-1]


def plain(value: Any) -> Any:
    """A value as references hold it (PySpark gives BLOBs as bytearray)."""
    return bytes(value) if isinstance(value, bytearray) else value


def receiver_verdict(path: Path) -> str | None:
    """The receiver's one line refusing ``path`` (``formats.tsfile.check``), or None."""
    try:
        tsfile_format.check(path)
    except FormatError as exc:
        return str(exc)
    return None


def differences(got: Rows, want: Rows, limit: int = 5) -> list[str]:
    """The first ``limit`` rows that differ, each in one line."""
    out = []
    for key in sorted(set(got) | set(want), key=repr):
        g, w = got.get(key), want.get(key)
        if g is None or w is None or set(g) != set(w):
            out.append(f"row {key}: loaded {g!r}, reference {w!r}")
        elif not all(values_equal(g[m], w[m]) for m in w):
            out.append(f"row {key}: loaded {g!r}, reference {w!r}")
        if len(out) >= limit:
            break
    return out


def differing_series(got: Rows, want: Rows) -> dict[str, int]:
    """Per measurement, how many of its values differ (missing or extra ones too)."""
    out: dict[str, int] = {}
    for key in set(got) | set(want):
        g, w = got.get(key, {}), want.get(key, {})
        for m in set(g) | set(w):
            if m not in g or m not in w or not values_equal(g[m], w[m]):
                out[m] = out.get(m, 0) + 1
    return out


def _rows(records: list[Any], measurements: dict[str, str]) -> tuple[Rows, int]:
    """The rows by measurement (``measurements``: column -> the measurement it holds)."""
    out: Rows = {}
    for r in records:
        values = {m: plain(r[c]) for c, m in measurements.items() if r[c] is not None}
        assert values, f"a row with every measurement null: {r}"
        out[(r["device"], r["time"])] = values
    return out, len(records)


def loader_read(spark: Any, paths: list[Path], tmp: Path) -> list[tuple[Rows, int] | str]:
    """Each file through the loader's read path: its rows and row count, or its one line.

    Each file is read alone in the data pass, so one file's refusal names that file."""
    files = []
    for i, path in enumerate(paths):
        copy = tmp / f"f{i:03x}.tsfile"
        shutil.copyfile(path, copy)
        files.append((str(copy), f"f{i:03x}", i, None))
    df = spark.createDataFrame(files, FILES_DDL)
    found = series_of(java_schema(spark, df).collect())
    out: list[tuple[Rows, int] | str] = []
    for path, fid, key, _ in files:
        series = found.get(fid, [])
        if isinstance(series, str):
            out.append(series)
            continue
        target, mapping = schemas.new_table_target(series)
        one = spark.createDataFrame([(path, fid, key, None)], FILES_DDL)
        try:
            records = java_data(spark, one, target).collect()
        except Exception as exc:  # the file's one line, as the loader reports it
            out.append(f"data pass failed: {describe(exc).reason}")
            continue
        assert all(r[KEY_COLUMN] == key for r in records)
        out.append(_rows(records, {c: m for (m, _), c in mapping.items()}))
    return out
