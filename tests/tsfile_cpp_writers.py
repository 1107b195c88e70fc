"""TsFiles written by the C++ writer of the ``tsfile`` package, with the values written.

Every data type with every encoding and every compressor the writer accepts, tree model
(one device per data type, its own encoding and compressor per series) and table model
(``dataframe_to_tsfile``, as users write a DataFrame, and ``TsFileTableWriter`` with the
per-type default encodings of ``set_tsfile_config``). What the writer refuses is recorded,
not written. The reference for each file is what was written: the loader must load exactly
these values, or refuse the file.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import tsfile
from tsfile import Compressor, TSDataType, TSEncoding
from tsfile_read_helpers import Rows

from sealsync.formats import table_device as table_devices

ROWS = 40
_INT32 = [0, -1, 2**31 - 1, -(2**31), 7, 7, 7, -100, 3, 1_000_000]
_INT64 = [0, -1, 2**63 - 1, -(2**63), 2**53 + 1, 9_007_199_254_740_993, 7, -100, 3, 2**40]
_FLOAT = [0.0, -0.0, 1.5, math.nan, math.inf, -3.25, 2.2, 1e-40, 3.4e38, -math.inf]
_DOUBLE = [0.0, -0.0, 1.1, math.nan, -math.inf, -3.25, 912.0000001, 5e-324, 1.7e308, 1e-300]
_TEXT = ["a", "", "é中", "x" * 300, "nul\0inside", "b", "b", "b", "c", "\U0001f600"]
_BLOB = [b"\x00\x01", b"", b"\xff" * 10, b"a", b"\x00", b"b", b"b", b"c", b"d", b"e" * 100]
_DATE = [dt.date(2024, 1, 1), dt.date(1970, 1, 1), dt.date(1000, 1, 1), dt.date(9999, 12, 31)]
_TIMESTAMP = [0, -1, 2**62, 1_700_000_000_000, 5, 5, 5, -(2**62), 10, 11]


def _f32(x: float) -> float:
    return x if math.isnan(x) else float(struct.unpack("<f", struct.pack("<f", x))[0])


def values(kind: TSDataType, n: int = ROWS) -> list[Any]:
    """``n`` values of a type: its edge values first, then a run that compresses."""
    base: dict[TSDataType, list[Any]] = {
        TSDataType.BOOLEAN: [True, False, False, True, True, True, False],
        TSDataType.INT32: _INT32,
        TSDataType.INT64: _INT64,
        TSDataType.FLOAT: _FLOAT,
        TSDataType.DOUBLE: _DOUBLE,
        TSDataType.TEXT: _TEXT,
        TSDataType.STRING: _TEXT,
        TSDataType.BLOB: _BLOB,
        TSDataType.DATE: _DATE,
        TSDataType.TIMESTAMP: _TIMESTAMP,
    }
    edge = base[kind]
    out = list(edge)
    for i in range(n - len(edge)):  # a slowly changing tail: what RLE and deltas are for
        if kind == TSDataType.BOOLEAN:
            out.append(i % 5 == 0)
        elif kind in (TSDataType.INT32, TSDataType.INT64, TSDataType.TIMESTAMP):
            out.append(1000 + 3 * i)
        elif kind in (TSDataType.FLOAT, TSDataType.DOUBLE):
            out.append(20.5 + 0.25 * i)
        elif kind in (TSDataType.TEXT, TSDataType.STRING):
            out.append(f"v{i % 4}")
        elif kind == TSDataType.BLOB:
            out.append(bytes([i % 7]) * 3)
        else:
            out.append(dt.date(2020, 1, 1) + dt.timedelta(days=i))
    return out[:n]


#: Digits after the point that RLE and TS_2DIFF keep of a FLOAT or DOUBLE: the precision
#: the writer puts in each page (``max_point_number``, 2 unless configured); these
#: encodings store ``round(value * 10**2)`` by design, and IoTDB answers that.
PRECISION = 2
_SCALED = ("RLE", "TS_2DIFF")


def _scaled(kind: TSDataType, value: float) -> float:
    """A value as RLE and TS_2DIFF store it (Java's ``FloatEncoder``: ``Math.round`` of
    the value times 10**PRECISION, divided back; a value whose product leaves the
    integer's range, NaN and infinities are kept as their bits)."""
    scale = 10.0**PRECISION
    limit = 2**31 if kind == TSDataType.FLOAT else 2**63
    product = value * scale
    if math.isnan(value) or not -limit <= product < limit:
        return value
    stored = math.floor(product + 0.5)
    return stored / scale


def expected(kind: TSDataType, value: Any, encoding: str = "PLAIN") -> Any:
    """A written value as the table holds it (a FLOAT as the float32 it is; see
    :func:`_scaled` for RLE and TS_2DIFF)."""
    if kind in (TSDataType.FLOAT, TSDataType.DOUBLE) and encoding in _SCALED:
        value = _scaled(kind, _f32(value) if kind == TSDataType.FLOAT else value)
    return _f32(value) if kind == TSDataType.FLOAT else value


TYPES = (
    TSDataType.BOOLEAN,
    TSDataType.INT32,
    TSDataType.INT64,
    TSDataType.FLOAT,
    TSDataType.DOUBLE,
    TSDataType.TEXT,
    TSDataType.STRING,
    TSDataType.BLOB,
    TSDataType.DATE,
    TSDataType.TIMESTAMP,
)


#: The files of :func:`build` the receiver and the loader refuse, each for what its line
#: names: RLBE on FLOAT and DOUBLE, SPRINTZ and CAMEL (format 4: C++ and Java encode them
#: apart), LZO (no Java reader decompresses it); every other file loads.
REFUSED_FILES = {f"tree-{x}.tsfile": x for x in ("RLBE", "SPRINTZ", "CAMEL", "LZO")}


@dataclass
class Written:
    """One file the writer wrote, and what it was given."""

    path: Path
    model: str
    covers: list[tuple[str, str, str]]  # (data type, encoding, compressor) of its series
    rows: Rows = field(default_factory=dict)


@dataclass
class Corpus:
    files: list[Written]
    refused: list[tuple[str, str, str, str]]  # (type, encoding, compressor, writer's error)


def _tree_file(path: Path, series: list[tuple[TSDataType, TSEncoding, Compressor]]) -> Written:
    """One device per series, ``root.cpp.<type>``, measurement ``<type>_<encoding>``."""
    out = Written(path, "tree", [])
    writer = tsfile.TsFileWriter(str(path))
    try:
        for kind, encoding, compressor in series:
            device = f"root.cpp.{kind.name.lower()}"
            name = f"{kind.name.lower()}_{encoding.name.lower()}"
            writer.register_timeseries(
                device, tsfile.TimeseriesSchema(name, kind, encoding, compressor)
            )
            tablet = tsfile.Tablet([name], [kind], ROWS)
            tablet.set_table_name(device)
            times = list(range(-3, ROWS - 3))  # times before 1970 too
            tablet.set_timestamp_list(times)
            written = values(kind)
            tablet.data_list[0] = written
            writer.write_tablet(tablet)
            out.covers.append((kind.name, encoding.name, compressor.name))
            for t, v in zip(times, written, strict=True):
                out.rows.setdefault((device, t), {})[name] = expected(kind, v, encoding.name)
    finally:
        writer.close()
    return out


def _accepts(folder: Path, kind: TSDataType, encoding: TSEncoding, compressor: Compressor) -> str:
    """The writer's error for one series so encoded, or '' if it writes it."""
    probe = folder / f"probe-{kind.name}-{encoding.name}-{compressor.name}.tsfile"
    try:
        _tree_file(probe, [(kind, encoding, compressor)])
    except Exception as exc:  # the package raises its own error classes
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        probe.unlink(missing_ok=True)
    return ""


def build(folder: Path) -> Corpus:
    """Tree-model files (one per encoding, every type that takes it; one per compressor,
    every type PLAIN) and table-model files; what the writer refused."""
    folder.mkdir(parents=True, exist_ok=True)
    refused: list[tuple[str, str, str, str]] = []
    files: list[Written] = []
    for encoding in TSEncoding:
        series = []
        for kind in TYPES:
            error = _accepts(folder, kind, encoding, Compressor.SNAPPY)
            if error:
                refused.append((kind.name, encoding.name, Compressor.SNAPPY.name, error))
            else:
                series.append((kind, encoding, Compressor.SNAPPY))
        if series:
            files.append(_tree_file(folder / f"tree-{encoding.name}.tsfile", series))
    for compressor in Compressor:
        if _accepts(folder, TSDataType.INT64, TSEncoding.PLAIN, compressor):
            refused.append(("*", TSEncoding.PLAIN.name, compressor.name, "compressor refused"))
            continue
        series = [(kind, TSEncoding.PLAIN, compressor) for kind in TYPES]
        files.append(_tree_file(folder / f"tree-{compressor.name}.tsfile", series))
    files.append(_dataframe_file(folder / "table-dataframe.tsfile"))
    return Corpus(files, refused)


def table_device(table: str, tags: list[str | None]) -> str:
    """The device the loader names a table-model row's (docs/formats.md)."""
    return table_devices.name([table, *tags])


def _dataframe_file(path: Path) -> Written:
    """``dataframe_to_tsfile`` as users call it: a tag column, a field of each dtype."""
    n = ROWS
    frame = pd.DataFrame(
        {
            "time": list(range(n)) + list(range(n)),
            "device": ["north"] * n + ["south"] * n,
            "b": values(TSDataType.BOOLEAN, n) * 2,
            "i32": pd.array(values(TSDataType.INT32, n) * 2, dtype="int32"),
            "i64": pd.array(values(TSDataType.INT64, n) * 2, dtype="int64"),
            "f32": pd.array(values(TSDataType.FLOAT, n) * 2, dtype="float32"),
            "f64": pd.array(values(TSDataType.DOUBLE, n) * 2, dtype="float64"),
            "s": [v.replace("\0", "") for v in values(TSDataType.STRING, n)] * 2,
        }
    )
    tsfile.dataframe_to_tsfile(frame, str(path), table_name="weather", tag_column=["device"])
    out = Written(path, "table", [("*", "default", "default")])
    for record in frame.to_dict("records"):
        device = table_device("weather", [record["device"]])
        row = {
            "b": bool(record["b"]),
            "i32": int(record["i32"]),
            "i64": int(record["i64"]),
            "f32": _f32(float(record["f32"])),
            "f64": float(record["f64"]),
            "s": record["s"],
        }
        # pandas' NaN is its null: the writer writes no value there
        row = {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
        out.rows[(device, int(record["time"]))] = row
    return out
