"""The data-file formats on real files: complete, truncated and corrupted ones."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tsfile as native

from sealsync import formats
from sealsync.errors import FormatError
from sealsync.formats import FileInfo, parquet, tsfile, tsfile_meta
from sealsync.simulator import expected_table

DEVICES = ["root.sg1.d2", "root.sg1.d1", "root.sg2.x.d3"]
ROWS = 40
FORMATS = {"tsfile": tsfile, "parquet": parquet}


def _expected() -> pa.Table:
    return expected_table(DEVICES, ROWS, start_ms=1_700_000_000_000, step_ms=10)


PIECES = "tsfile, mapped"


@pytest.fixture(params=[*sorted(FORMATS), PIECES])
def written(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, Path]:
    if request.param == PIECES:
        read_in_pieces(monkeypatch)
    module = FORMATS["tsfile" if request.param == PIECES else request.param]
    path = tmp_path / f"f{module.SUFFIX}"
    module.write_arrow(path, _expected())
    return module, path


def read_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TsFile metadata check as for a large file: mapped, its metadata copied out,
    not the whole file read at once."""
    monkeypatch.setattr(tsfile_meta, "_SMALL_FILE", 0)


@pytest.fixture(params=["read whole", "mapped"])
def end_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "mapped":
        read_in_pieces(monkeypatch)


def _mutated(path: Path, data: bytes) -> Path:
    bad = path.with_name("bad" + path.suffix)
    bad.write_bytes(data)
    return bad


def _assert_rejected(module: object, path: Path) -> None:
    assert module.is_complete(path) is False
    assert formats.is_complete(path) is False
    with pytest.raises(FormatError) as info:
        module.inspect(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    with pytest.raises(FormatError):
        formats.inspect(path)
    for read in (module.devices, module.row_count, module.to_arrow, module.verify, formats.verify):
        with pytest.raises(FormatError):
            read(path)


# --------------------------------------------------------------------------- complete files


def test_complete_file_reads_back_exactly(written: tuple[object, Path]) -> None:
    module, path = written
    expected = _expected()
    assert module.is_complete(path) is True
    assert formats.is_complete(path) is True
    assert module.devices(path) == sorted(DEVICES)
    assert module.row_count(path) == len(DEVICES) * ROWS
    info = FileInfo(devices=tuple(sorted(DEVICES)), rows=len(DEVICES) * ROWS)
    assert module.inspect(path) == info
    assert formats.inspect(path) == info
    # verify: the receiver's cheap check; TsFile leaves rows uncounted (-1)
    rows = -1 if module is tsfile else info.rows
    assert module.verify(path) == FileInfo(devices=info.devices, rows=rows)
    assert formats.verify(path) == module.verify(path)
    table = module.to_arrow(path)
    assert table.column_names == ["time", "device", "s1", "s2"]
    assert table.schema.field("time").type == pa.int64()
    assert table.schema.field("device").type == pa.string()
    sort = [("device", "ascending"), ("time", "ascending")]
    assert table.sort_by(sort).equals(expected.sort_by(sort))


def test_tsfile_rows_are_the_union_of_measurement_timestamps(tmp_path: Path) -> None:
    """A row is a (time, device); measurements missing at that time are null."""
    table = pa.table(
        {
            "time": pa.array([1, 2, 3, 1, 5], pa.int64()),
            "device": ["root.a.d1", "root.a.d1", "root.a.d1", "root.a.d2", "root.a.d2"],
            "s1": pa.array([10, None, 30, None, None], pa.int64()),
            "s2": pa.array([None, 2.5, 3.5, 1.5, None], pa.float64()),
            "flag": pa.array([None, None, None, True, False], pa.bool_()),
            "name": pa.array(["a", "b", None, None, "e"], pa.string()),
        }
    )
    path = tmp_path / "mixed.tsfile"
    tsfile.write_arrow(path, table)
    assert tsfile.inspect(path) == FileInfo(devices=("root.a.d1", "root.a.d2"), rows=5)
    got = tsfile.to_arrow(path)
    assert got.column_names == ["time", "device", "flag", "name", "s1", "s2"]
    assert got.to_pylist() == table.select(got.column_names).to_pylist()


def test_tsfile_table_model_devices_are_table_plus_tags(tmp_path: Path) -> None:
    path = tmp_path / "table.tsfile"
    schema = native.TableSchema(
        "trains",
        [
            native.ColumnSchema("line", native.TSDataType.STRING, native.ColumnCategory.TAG),
            native.ColumnSchema("car", native.TSDataType.STRING, native.ColumnCategory.TAG),
            native.ColumnSchema("speed", native.TSDataType.DOUBLE, native.ColumnCategory.FIELD),
        ],
    )
    rows = [(0, "L1", "c1", 1.0), (1, "L1", "c1", 2.0), (0, "L2", None, 3.0)]
    with native.TsFileTableWriter(str(path), schema) as writer:
        tablet = native.Tablet(
            ["line", "car", "speed"],
            [native.TSDataType.STRING, native.TSDataType.STRING, native.TSDataType.DOUBLE],
            len(rows),
        )
        for i, (t, line, car, speed) in enumerate(rows):
            tablet.add_timestamp(i, t)
            tablet.add_value_by_name("line", i, line)
            if car is not None:
                tablet.add_value_by_name("car", i, car)
            tablet.add_value_by_name("speed", i, speed)
        writer.write_table(tablet)
    assert tsfile.is_complete(path) is True
    # a trailing NULL tag is dropped, as IoTDB's device id (StringArrayDeviceID) drops it
    assert tsfile.inspect(path) == FileInfo(devices=("trains.L1.c1", "trains.L2"), rows=3)
    assert tsfile.to_arrow(path).to_pylist() == [
        {"time": 0, "device": "trains.L1.c1", "speed": 1.0},
        {"time": 1, "device": "trains.L1.c1", "speed": 2.0},
        {"time": 0, "device": "trains.L2", "speed": 3.0},
    ]


def test_tsfile_without_devices_is_complete_and_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.tsfile"
    writer = native.TsFileWriter(str(path))
    writer.close()
    assert tsfile.is_complete(path) is True
    assert tsfile.inspect(path) == FileInfo(devices=(), rows=0)
    assert tsfile.to_arrow(path).column_names == ["time", "device"]


def test_tsfile_measurement_named_like_a_reserved_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "clash.tsfile"
    writer = native.TsFileWriter(str(path))
    schema = native.TimeseriesSchema("device", native.TSDataType.INT64)
    writer.register_timeseries("root.a.d1", schema)
    tablet = native.Tablet(["device"], [native.TSDataType.INT64], 1)
    tablet.set_table_name("root.a.d1")
    tablet.add_timestamp(0, 5)
    tablet.add_value_by_index(0, 0, 7)
    writer.write_tablet(tablet)
    writer.close()
    assert tsfile.devices(path) == ["root.a.d1"]
    with pytest.raises(FormatError, match="reserved column"):
        tsfile.to_arrow(path)


def test_tsfile_writer_refuses_duplicate_rows_and_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "dup.tsfile"
    table = pa.table(
        {
            "time": pa.array([1, 1], pa.int64()),
            "device": ["root.a.d", "root.a.d"],
            "s1": pa.array([1, 2], pa.int64()),
        }
    )
    with pytest.raises(ValueError, match="same time"):
        tsfile.write_arrow(path, table)
    assert not path.exists()


@pytest.mark.parametrize("module", [tsfile, parquet], ids=["tsfile", "parquet"])
def test_writers_refuse_to_overwrite(module: object, tmp_path: Path) -> None:
    path = tmp_path / f"x{module.SUFFIX}"
    path.write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        module.write_arrow(path, _expected())
    assert path.read_bytes() == b"keep"


# --------------------------------------------------------------------------- truncation


def _cuts(size: int) -> dict[str, int]:
    return {
        "empty": 0,
        "one byte": 1,
        "magic only": 4,
        "head only": 16,
        "half": size // 2,
        "tail magic missing": size - 6,
        "last byte missing": size - 1,
    }


@pytest.mark.parametrize("cut", list(_cuts(100)))
def test_truncated_file_is_rejected(written: tuple[object, Path], cut: str) -> None:
    module, path = written
    data = path.read_bytes()
    _assert_rejected(module, _mutated(path, data[: _cuts(len(data))[cut]]))


def test_tail_missing_but_head_intact_is_rejected_by_magic(written: tuple[object, Path]) -> None:
    module, path = written
    data = path.read_bytes()
    bad = _mutated(path, data[: len(data) - 3])
    with pytest.raises(FormatError, match="magic at the tail"):
        module.inspect(bad)


@pytest.mark.usefixtures("end_reads")
def test_tsfile_middle_cut_with_tail_glued_back_never_reaches_native_reader(
    tmp_path: Path,
) -> None:
    """Such files made the C++ reader segfault; the Python metadata check must catch
    every one of them (only ``tsfile_meta`` runs here: no native code at all)."""
    path = tmp_path / "f.tsfile"
    tsfile.write_arrow(path, _expected())
    data = path.read_bytes()
    bad = tmp_path / "bad.tsfile"
    for tail_len in (6, 10):  # magic only; metadata length + magic
        for cut in range(7, len(data) - tail_len, 11):
            bad.write_bytes(data[:cut] + data[-tail_len:])
            with pytest.raises(FormatError):
                tsfile_meta.read(bad)


# --------------------------------------------------------------------------- corruption


def test_corrupted_head_magic_is_rejected(written: tuple[object, Path]) -> None:
    module, path = written
    data = bytearray(path.read_bytes())
    data[0:2] = b"XX"
    _assert_rejected(module, _mutated(path, bytes(data)))


def test_corrupted_tail_magic_is_rejected(written: tuple[object, Path]) -> None:
    module, path = written
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    _assert_rejected(module, _mutated(path, bytes(data)))


def _footer_span(module: object, data: bytes) -> tuple[int, int]:
    """Start and end of the metadata/footer body, read from the file's tail."""
    if module is tsfile:
        (length,) = struct.unpack(">i", data[-10:-6])
        return len(data) - 10 - length, len(data) - 10
    (length,) = struct.unpack("<i", data[-8:-4])
    return len(data) - 8 - length, len(data) - 8


@pytest.mark.parametrize("where", ["start", "middle"])
def test_garbage_in_metadata_is_rejected(written: tuple[object, Path], where: str) -> None:
    module, path = written
    data = bytearray(path.read_bytes())
    start, end = _footer_span(module, bytes(data))
    at = start if where == "start" else (start + end) // 2
    data[at : at + 8] = b"\xff" * 8
    _assert_rejected(module, _mutated(path, bytes(data)))


def test_metadata_length_pointing_outside_the_file_is_rejected(
    written: tuple[object, Path],
) -> None:
    module, path = written
    data = bytearray(path.read_bytes())
    if module is tsfile:
        data[-10:-6] = struct.pack(">i", len(data))
    else:
        data[-8:-4] = struct.pack("<i", len(data))
    _assert_rejected(module, _mutated(path, bytes(data)))


@pytest.mark.usefixtures("end_reads")
def test_tsfile_meta_offset_not_at_separator_is_rejected(tmp_path: Path) -> None:
    """Garbage where the footer says the index starts: caught before the native reader."""
    path = tmp_path / "f.tsfile"
    tsfile.write_arrow(path, _expected())
    data = path.read_bytes()
    start, _ = _footer_span(tsfile, data)
    meta_offset = None
    for pos in range(start, len(data) - 10 - 8):  # find the i64 that points at the separator
        (value,) = struct.unpack(">q", data[pos : pos + 8])
        if 7 <= value < start and data[value] == tsfile_meta.SEPARATOR and pos > start + 8:
            meta_offset = value
    assert meta_offset is not None
    corrupt = bytearray(data)
    corrupt[meta_offset] = 0x55
    bad = _mutated(path, bytes(corrupt))
    with pytest.raises(FormatError, match="index separator"):
        tsfile.inspect(bad)
    assert tsfile.is_complete(bad) is False


def test_missing_file_is_not_complete(tmp_path: Path) -> None:
    for module in (tsfile, parquet):
        path = tmp_path / f"absent{module.SUFFIX}"
        assert module.is_complete(path) is False
        with pytest.raises(FormatError, match="absent"):
            module.inspect(path)


# --------------------------------------------------------------------------- parquet schema


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"time": pa.array([1], pa.int64()), "s1": pa.array([1])}, "'device'"),
        ({"device": ["d"], "s1": pa.array([1])}, "'time'"),
        ({"time": pa.array([1.5]), "device": ["d"]}, "not int64"),
        ({"time": pa.array([1], pa.int64()), "device": pa.array([7])}, "not string"),
        ({"time": pa.array([1, 2], pa.int64()), "device": ["d", None]}, "nulls"),
    ],
    ids=["no device", "no time", "float time", "int device", "null device"],
)
def test_parquet_with_wrong_columns_is_refused(
    tmp_path: Path,
    columns: dict[str, object],
    message: str,
) -> None:
    path = tmp_path / "odd.parquet"
    pq.write_table(pa.table(columns), path)
    assert parquet.is_complete(path) is True  # whole, but not a sealsync data file
    with pytest.raises(FormatError, match=message):
        parquet.inspect(path)
    with pytest.raises(FormatError, match=message):
        parquet.to_arrow(path)


def test_parquet_dictionary_device_reads_as_string(tmp_path: Path) -> None:
    path = tmp_path / "dict.parquet"
    table = pa.table(
        {
            "device": pa.array(["b", "a", "b"]).dictionary_encode(),
            "v": pa.array([1.0, 2.0, 3.0]),
            "time": pa.array([3, 2, 1], pa.int64()),
        }
    )
    pq.write_table(table, path)
    assert parquet.inspect(path) == FileInfo(devices=("a", "b"), rows=3)
    got = parquet.to_arrow(path)
    assert got.column_names == ["time", "device", "v"]
    assert got.column("device").to_pylist() == ["b", "a", "b"]


# --------------------------------------------------------------------------- dispatch


def test_format_for_picks_the_module_by_suffix() -> None:
    assert formats.format_for("sequence/root.sg1/0/1-1-0.tsfile") is tsfile
    assert formats.format_for(Path("unsequence/g/0/x.parquet")) is parquet


@pytest.mark.parametrize(
    "name",
    [
        "a.csv",
        "a.tsfile.resource",
        "a.tsfile.mods",
        "tsfile",
        ".tsfile",
        "a.TSFILE",
        "a.parquet.merge",
        "",
    ],
)
def test_unknown_suffix_is_a_format_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="not a data file"):
        formats.format_for(name)
    path = tmp_path / (name or "blank")
    path.write_bytes(b"TsFile")
    with pytest.raises(FormatError):
        formats.inspect(path)
    with pytest.raises(FormatError):
        formats.is_complete(path)


def test_parquet_page_checksums_catch_a_flipped_data_byte(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    parquet.write_arrow(path, _expected())
    chunk = pq.read_metadata(path).row_group(0).column(0)  # the time column
    assert chunk.path_in_schema == "time"
    end = (chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size
    data = bytearray(path.read_bytes())
    data[end - 2] ^= 0xFF
    bad = _mutated(path, bytes(data))
    assert parquet.is_complete(bad) is True  # the footer is intact
    with pytest.raises(FormatError, match="CRC"):
        parquet.to_arrow(bad)
