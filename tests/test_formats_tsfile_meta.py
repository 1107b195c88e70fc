"""The TsFile metadata check (``sealsync.formats.tsfile_meta``) on real and built files.

Fast tests use format-4 files of the ``tsfile`` package, and format-3 files and the
hostile shapes no writer makes built here byte by byte (:class:`Built`) following the
layout the module's docstring gives. The slow ones take every file IoTDB's own Java
writers make in the generated corpus (``tests/tsfile_corpus.py``), with the Java reader's
answer for each.
"""

from __future__ import annotations

import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import tsfile as native
from tsfile_bytes import INT64, INT64_STATS, i64, string, uvar, var

from sealsync import formats
from sealsync.errors import FormatError
from sealsync.formats import FileInfo, table_device, tsfile, tsfile_meta, tsfile_support
from sealsync.formats.tsfile_meta import Corrupt, OldVersion
from sealsync.simulator import expected_table

# --------------------------------------------------------------------------- a builder


INT64_STATS = INT64_STATS


@dataclass
class Built:
    """A small TsFile of format 3 or 4, built byte by byte, and where its parts are.

    Every device has INT64 series ``measurements``, one chunk each (one page of dummy
    bytes: pages are never decoded). With more devices than ``degree`` the root is an
    internal device node over leaf device nodes, as writers do past 256 devices.
    """

    version: int = 3
    devices: tuple[str, ...] = ("root.sg.d1", "root.sg.d2")
    measurements: tuple[str, ...] = ("s1", "s2")
    degree: int = 256
    data: bytes = b""
    meta_offset: int = 0
    chunks: dict[tuple[str, str], int] = field(default_factory=dict)
    series_at: dict[str, int] = field(default_factory=dict)
    nodes_at: dict[str, int] = field(default_factory=dict)
    meta_start: int = 0

    def __post_init__(self) -> None:
        out = bytearray(b"TsFile" + bytes([self.version]))
        for device in self.devices:
            out += b"\x00" + string(device)
            for m in self.measurements:
                self.chunks[device, m] = len(out)
                page = b"\x01\x02\x03\x04"
                out += b"\x05" + string(m) + uvar(len(page)) + bytes([INT64, 0, 0]) + page
        self.meta_offset = len(out)
        out.append(0x02)
        series = {}
        for device in self.devices:
            series[device] = len(out)
            self.series_at[device] = len(out)
            for m in self.measurements:
                out += b"\x00" + string(m) + bytes([INT64]) + uvar(8) + INT64_STATS
                out += i64(self.chunks[device, m])
        nodes = {}
        first_node = len(out)
        for i, device in enumerate(self.devices):
            nodes[device] = len(out)
            self.nodes_at[device] = len(out)
            end = series[self.devices[i + 1]] if i + 1 < len(self.devices) else first_node
            out += uvar(1) + string(self.measurements[0]) + i64(series[device]) + i64(end) + b"\x03"
        leaves_end = len(out)
        groups = [
            self.devices[i : i + self.degree] for i in range(0, len(self.devices), self.degree)
        ]
        if len(groups) > 1:
            leaf_at = []
            for group in groups:
                leaf_at.append(len(out))
                out += self._node(
                    [(d, nodes[d]) for d in group], self._after(group, nodes, leaves_end), 1
                )
            root = self._node(
                [(g[0], at) for g, at in zip(groups, leaf_at, strict=True)], len(out), 0
            )
        else:
            root = self._node([(d, nodes[d]) for d in self.devices], leaves_end, 1)
        self.meta_start = len(out)
        if self.version == 3:
            meta = root + i64(self.meta_offset) + uvar(2) + b"\xff\x00" + uvar(16) + uvar(5)
        else:
            table = self._segments(self.devices[0])[0] if self.devices else ""
            meta = uvar(1) + string(table) + root + uvar(0) + i64(self.meta_offset)
            meta += uvar(0) + var(1) + string("encryptLevel") + string("0")
        out += meta + struct.pack(">i", len(meta)) + b"TsFile"
        self.data = bytes(out)

    def _after(self, group: tuple[str, ...], nodes: dict[str, int], leaves_end: int) -> int:
        i = self.devices.index(group[-1])
        return nodes[self.devices[i + 1]] if i + 1 < len(self.devices) else leaves_end

    @staticmethod
    def _segments(device: str) -> list[str]:
        parts = device.split(".")
        return [".".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts

    def _device(self, device: str) -> bytes:
        if self.version == 3:
            return string(device)
        segments = self._segments(device)
        return uvar(len(segments)) + b"".join(string(s) for s in segments)

    def _node(self, entries: list[tuple[str, int]], end: int, kind: int) -> bytes:
        body = b"".join(self._device(d) + i64(at) for d, at in entries)
        return uvar(len(entries)) + body + i64(end) + bytes([kind])

    def patched(self, at: int, new: bytes) -> bytes:
        return self.data[:at] + new + self.data[at + len(new) :]


def _corrupt(data: bytes, match: str | None = None) -> str:
    with pytest.raises(Corrupt, match=match) as info:
        tsfile_meta.parse(data)
    return str(info.value)


# --------------------------------------------------------------------------- accepted files


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("degree", [256, 2])
def test_built_files_of_both_versions_are_accepted(version: int, degree: int) -> None:
    built = Built(version=version, devices=("root.sg.a", "root.sg.b", "root.sg.c"), degree=degree)
    summary = tsfile_meta.parse(built.data)
    assert summary == tsfile_meta.Summary(
        version, ("root.sg.a", "root.sg.b", "root.sg.c"), series=6, chunks=6, points=6 * 3
    )  # each series' statistics count 3 points


def test_a_file_with_no_device_is_accepted() -> None:
    assert tsfile_meta.parse(Built(devices=()).data).devices == ()


def _native_devices(path: Path) -> list[str]:
    """The C++ reader's devices, a table-model one named from its segments."""
    reader = native.TsFileReader(str(path))
    try:
        tables = set(reader.get_all_table_schemas() or ())
        return sorted(
            {
                table_device.name(d.segments) if d.table_name in tables else d.path
                for d in reader.get_all_devices()
            }
        )
    finally:
        reader.close()


def _write_table_model(path: Path) -> None:
    schema = native.TableSchema(
        "trains",
        [
            native.ColumnSchema("line", native.TSDataType.STRING, native.ColumnCategory.TAG),
            native.ColumnSchema("car", native.TSDataType.STRING, native.ColumnCategory.TAG),
            native.ColumnSchema("speed", native.TSDataType.DOUBLE, native.ColumnCategory.FIELD),
        ],
    )
    with native.TsFileTableWriter(str(path), schema) as writer:
        tablet = native.Tablet(
            ["line", "car", "speed"],
            [native.TSDataType.STRING, native.TSDataType.STRING, native.TSDataType.DOUBLE],
            3,
        )
        for i, (line, car) in enumerate([("L1", "c1"), ("L1", "c1"), ("L2", None)]):
            tablet.add_timestamp(i, i)
            tablet.add_value_by_name("line", i, line)
            if car is not None:
                tablet.add_value_by_name("car", i, car)
            tablet.add_value_by_name("speed", i, float(i))
        writer.write_table(tablet)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Format-4 files of the ``tsfile`` package: tree and table model, empty, big."""
    base = tmp_path_factory.mktemp("written")
    files = {name: base / f"{name}.tsfile" for name in ("tree", "table", "empty", "wide")}
    devices = ["root.sg1.d2", "root.sg1.d1", "root.sg2.x.d3", "root.ä.`q.x`"]
    tsfile.write_arrow(files["tree"], expected_table(devices, 40, start_ms=0, step_ms=10))
    _write_table_model(files["table"])
    native.TsFileWriter(str(files["empty"])).close()
    wide = [f"root.sg{i % 7}.d{i}" for i in range(600)]  # past 256: internal device nodes
    tsfile.write_arrow(files["wide"], expected_table(wide, 3, start_ms=0, step_ms=10))
    return files


@pytest.mark.parametrize("name", ["tree", "table", "empty", "wide"])
def test_package_files_list_the_devices_the_native_reader_lists(
    written: dict[str, Path], name: str
) -> None:
    path = written[name]
    summary = tsfile_meta.read(path)
    assert summary.version == 4
    assert list(summary.devices) == _native_devices(path)
    assert tsfile.verify(path) == FileInfo(devices=summary.devices, rows=-1)
    assert tsfile.devices(path) == list(summary.devices)
    assert tsfile.is_complete(path) is True


def test_package_file_counts_and_table_model_names(written: dict[str, Path]) -> None:
    assert tsfile_meta.read(written["table"]).devices == ("trains.L1.c1", "trains.L2")
    tree = tsfile_meta.read(written["tree"])
    assert len(tree.devices) == 4 and tree.series == tree.chunks > 0
    assert len(tsfile_meta.read(written["wide"]).devices) == 600


def test_a_mapped_file_reads_like_one_read_whole(
    written: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = {name: tsfile_meta.read(path) for name, path in written.items()}
    monkeypatch.setattr(tsfile_meta, "_SMALL_FILE", 0)
    assert {name: tsfile_meta.read(path) for name, path in written.items()} == whole


# ------------------------------------------------------------------ format 3 through the adaptor


def test_format_3_is_verified_but_its_data_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "1-1-0-0.tsfile"
    path.write_bytes(Built(version=3).data)
    assert tsfile.is_complete(path) is True
    assert formats.verify(path) == FileInfo(devices=("root.sg.d1", "root.sg.d2"), rows=-1)
    for read in (tsfile.to_arrow, tsfile.row_count, tsfile.inspect):
        with pytest.raises(FormatError, match="format version 3 .*reads format 4 only") as info:
            read(path)
        assert "\n" not in str(info.value) and str(path) in str(info.value)


# -------------------------------------------------------------------- old and unknown versions


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"TsFile000001", "TsFile format version 1 (written by IoTDB 0.9) is not supported"),
        (b"TsFile000002", "TsFile format version 2 (written by IoTDB 0.10–0.11) is not supported"),
        (b"TsFilev0.8.0", "TsFile format of IoTDB 0.8 is not supported"),
    ],
)
def test_old_formats_are_refused_naming_version_and_writers(
    tmp_path: Path, head: bytes, expected: str
) -> None:
    path = tmp_path / "old.tsfile"
    path.write_bytes(head + bytes(100) + b"TsFile")
    with pytest.raises(FormatError) as info:
        tsfile.verify(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {expected}; upgrade the data with IoTDB 0.")
    assert "0.12 or 0.13" in message and "not a complete" not in message and "\n" not in message
    assert tsfile.is_complete(path) is False
    with pytest.raises(OldVersion):
        tsfile_meta.parse(head)  # told from the head alone


def test_unknown_version_byte_is_refused() -> None:
    _corrupt(b"TsFile\x05" + bytes(20) + b"TsFile", "unknown TsFile version byte 5")


# --------------------------------------------------------------------------- truncation


@pytest.mark.parametrize("version", [3, 4])
def test_every_truncation_is_refused(version: int) -> None:
    data = Built(version=version).data
    for cut in range(len(data)):
        _corrupt(data[:cut])


def test_every_middle_cut_with_the_tail_glued_back_is_refused(written: dict[str, Path]) -> None:
    data = written["tree"].read_bytes()
    for tail in (6, 10, 64):
        for cut in range(7, len(data) - tail, 7):
            _corrupt(data[:cut] + data[-tail:])


# --------------------------------------------------------------------------- flipped bytes


@pytest.mark.parametrize("version", [3, 4])
def test_flipped_bytes_in_the_metadata_are_refused_or_harmless(version: int) -> None:
    """Every byte from the separator on, flipped: refused as Corrupt, never another
    error; a flip that still parses may only change what statistics and names hold."""
    built = Built(version=version)
    good = tsfile_meta.parse(built.data)
    refused = 0
    for at in range(built.meta_offset, len(built.data)):
        bad = built.patched(at, bytes([built.data[at] ^ 0xFF]))
        try:
            got = tsfile_meta.parse(bad)
        except Corrupt:
            refused += 1
            continue
        assert (got.series, got.chunks) == (good.series, good.chunks)
    # all but statistics values, name bytes, the bloom filter and its sizes
    assert refused > (len(built.data) - built.meta_offset) // 3


@pytest.mark.parametrize(
    ("where", "new", "match"),
    [
        ("marker", b"\x09", "no chunk header"),
        ("marker", b"\x45", "no chunk header"),  # a value chunk where a plain one is listed
        ("name", b"\x04s9", "not of the series that lists it"),
        ("size", b"\x7f", "runs past the data region"),
        ("type", b"\x03", "another data type"),
        ("compression", b"\x03", "unknown compression"),
        ("encoding", b"\x0f", "unknown encoding"),  # 14 is CAMEL (TsFile 2.2)
    ],
)
def test_chunk_headers_are_checked_at_their_offsets(where: str, new: bytes, match: str) -> None:
    built = Built(version=3)
    at = built.chunks["root.sg.d2", "s2"]  # the last chunk: a big size runs past the data
    offset = {"marker": 0, "name": 1, "size": 4, "type": 5, "compression": 6, "encoding": 7}
    _corrupt(built.patched(at + offset[where], new), match)


def test_chunks_that_overlap_are_refused() -> None:
    built = Built(version=3)
    at = built.chunks["root.sg.d1", "s1"]
    _corrupt(built.patched(at + 4, b"\x0c"), "chunks overlap")  # its data runs into s2's


def test_meta_offset_must_point_at_the_separator() -> None:
    built = Built(version=3)
    _corrupt(built.patched(built.meta_offset, b"\x07"), "index separator")


# --------------------------------------------------------------------------- hostile shapes


def _timed(data: bytes, match: str) -> None:
    start = time.perf_counter()
    _corrupt(data, match)
    assert time.perf_counter() - start < 1.0


def test_huge_counts_and_lengths_are_refused_without_allocating() -> None:
    built = Built(version=3)
    root = built.meta_start
    _timed(built.patched(root, b"\xff\xff\xff\xff\x07"), "count")  # 2**31 - 1 entries
    name = built.series_at["root.sg.d1"] + 1
    _timed(built.patched(name, b"\xfe\xff\xff\xff\x0f"), "length")  # a 2**31 - 1 byte name
    _timed(built.patched(name, b"\xff\xff\xff\xff\xff\x01"), "varint")  # 6 bytes long


def test_metadata_length_beyond_the_file_is_refused() -> None:
    data = Built().data
    _corrupt(data[:-10] + struct.pack(">i", len(data)) + b"TsFile", "does not fit")
    _corrupt(data[:-10] + struct.pack(">i", -5) + b"TsFile", "does not fit")


def _chain(depth: int) -> bytes:
    """A device whose measurement index is ``depth`` internal nodes, each the only entry
    of the one after it: a tree far deeper than any writer makes."""
    out = bytearray(b"TsFile\x03\x00" + string("d"))
    chunk = len(out)
    out += b"\x05" + string("s") + uvar(1) + bytes([INT64, 0, 0]) + b"\x00"
    meta_offset = len(out)
    out.append(0x02)
    series = len(out)
    out += b"\x00" + string("s") + bytes([INT64]) + uvar(8) + INT64_STATS + i64(chunk)
    child, end = series, len(out)
    kind = 3
    for _ in range(depth):
        at = len(out)
        out += uvar(1) + string("s") + i64(child) + i64(end) + bytes([kind])
        child, end, kind = at, len(out), 2
    meta = uvar(1) + string("d") + i64(child) + i64(end) + b"\x01" + i64(meta_offset)
    meta += uvar(0) + uvar(0) + uvar(0)
    return bytes(out + meta + struct.pack(">i", len(meta)) + b"TsFile")


def test_a_deep_index_tree_is_refused_and_a_shallow_one_read() -> None:
    assert tsfile_meta.parse(_chain(5)).devices == ("d",)
    _timed(_chain(tsfile_meta.MAX_DEPTH + 5), "deeper")


def test_two_entries_pointing_at_one_region_are_refused() -> None:
    built = Built(version=3, devices=("root.sg.a", "root.sg.b", "root.sg.c"), degree=1)
    a, b = built.nodes_at["root.sg.a"], built.nodes_at["root.sg.b"]
    entry = string("root.sg.b") + i64(b) + i64(built.nodes_at["root.sg.c"])
    at = built.data.index(entry, built.meta_offset)  # the leaf device node of b
    shared = string("root.sg.b") + i64(a) + i64(b)  # now a's region: visited twice
    _corrupt(built.patched(at, shared), "overlap")


def _diamonds(levels: int) -> bytes:
    """A measurement index where each level has two nodes pointing at one node below:
    without a bound, the walk would visit the bottom 2**levels times."""
    out = bytearray(b"TsFile\x03\x00" + string("d"))
    chunk = len(out)
    out += b"\x05" + string("s") + uvar(1) + bytes([INT64, 0, 0]) + b"\x00"
    meta_offset = len(out)
    out.append(0x02)
    series = len(out)
    out += b"\x00" + string("s") + bytes([INT64]) + uvar(8) + INT64_STATS + i64(chunk)
    below = len(out)
    out += uvar(1) + string("s") + i64(series) + i64(below) + b"\x03"
    below_end = len(out)
    for _ in range(levels):
        first = len(out)
        out += uvar(1) + string("s") + i64(below) + i64(below_end) + b"\x02"
        second = len(out)
        out += uvar(1) + string("s") + i64(below) + i64(below_end) + b"\x02"
        top = len(out)
        out += uvar(2) + string("s") + i64(first) + string("s") + i64(second) + i64(top) + b"\x02"
        below, below_end = top, len(out)
    meta = uvar(1) + string("d") + i64(below) + i64(below_end) + b"\x01" + i64(meta_offset)
    meta += uvar(0) + uvar(0) + uvar(0)
    return bytes(out + meta + struct.pack(">i", len(meta)) + b"TsFile")


def test_a_region_reached_more_than_once_stops_the_walk() -> None:
    _timed(_diamonds(tsfile_meta.MAX_DEPTH // 2 - 1), "reached more than once")


def test_an_index_node_of_the_wrong_level_is_refused() -> None:
    """d1's measurement node claims to be a leaf device node (its type is its last byte)."""
    built = Built(version=3)
    _corrupt(built.patched(built.nodes_at["root.sg.d2"] - 1, b"\x01"), "of type 1 at that level")


def test_bytes_left_over_after_the_file_metadata_are_refused() -> None:
    built = Built(version=4)
    data = built.data
    meta_len = len(data) - 10 - built.meta_start
    # one more property byte claimed by the metadata length: the metadata grows by a byte
    grown = data[:-10] + b"\x00" + struct.pack(">i", meta_len + 1) + b"TsFile"
    _corrupt(grown, "left over")


def test_device_names_must_be_utf8() -> None:
    built = Built(version=3, devices=("root.sg.d1",))
    at = built.data.index(b"root.sg.d1", built.meta_start)
    _corrupt(built.patched(at, b"\xff"), "not UTF-8")


def test_a_device_listed_twice_is_refused() -> None:
    built = Built(version=3, devices=("root.sg.d1", "root.sg.d2"))
    at = built.data.index(b"root.sg.d2", built.meta_start)
    _corrupt(built.patched(at, b"root.sg.d1"), "listed twice")


# --------------------------------------------------------------------------- through formats


def test_format_errors_name_the_file_and_fit_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsfile"
    path.write_bytes(Built().data[:-1])
    with pytest.raises(FormatError) as info:
        formats.verify(path)
    assert (
        str(info.value)
        == f"{path}: not a complete TsFile (no TsFile magic at the tail (truncated?))"
    )
    assert formats.is_complete(path) is False
    path.unlink()
    assert formats.is_complete(path) is False
    with pytest.raises(FormatError, match="No such file"):
        formats.verify(path)


def test_the_table_helper_writes_what_the_check_reads(tmp_path: Path) -> None:
    table = pa.table(
        {
            "time": pa.array([1, 2], pa.int64()),
            "device": ["root.a.d1", "root.a.d2"],
            "s1": pa.array([1, None], pa.int64()),
            "s2": pa.array([None, 2.0], pa.float64()),
        }
    )
    path = tmp_path / "t.tsfile"
    tsfile.write_arrow(path, table)
    summary = tsfile_meta.read(path)
    assert summary.devices == ("root.a.d1", "root.a.d2")
    assert (summary.series, summary.chunks) == (2, 2)


# --------------------------------------------------------------------------- IoTDB's own files


@pytest.mark.slow
def test_every_corpus_file_is_accepted_with_the_java_readers_devices(
    tsfile_corpus: list[Any],
) -> None:
    """Every file IoTDB 0.13, 1.3 and TsFile 2.x write (every type, encoding, compressor,
    aligned devices, several chunk groups, one and many pages, odd names, empty, table
    model): accepted, its devices those the Java reader reads points of."""
    lines: Counter[str] = Counter()
    for entry in tsfile_corpus:
        summary = tsfile_meta.read(entry.path)
        assert summary.version == entry.format_version, entry.path
        assert summary.devices == tuple(sorted(set(entry.devices))), entry.path
        if _loader_refuses(summary):  # complete, but a codec the loader does not read
            with pytest.raises(FormatError, match="the loader cannot read it"):
                tsfile.verify(entry.path)
        else:
            assert tsfile.verify(entry.path) == FileInfo(devices=summary.devices, rows=-1)
        assert tsfile.is_complete(entry.path) is True
        lines[entry.line, summary.version] += 1
    assert set(lines) == {("iotdb-0.13", 3), ("iotdb-1.3", 3), ("tsfile-2", 4)}


def _loader_refuses(summary: tsfile_meta.Summary) -> bool:
    return (
        tsfile_support.file_refusal(summary.version, dict(summary.properties), summary.codecs)
        is not None
    )


def _chunk_offsets(entry: Any) -> set[int]:
    import tsfile_corpus

    return {p.chunk for p in tsfile_corpus.expected_points(entry)}


@pytest.mark.slow
def test_corpus_files_cut_or_with_a_chunk_header_flipped_are_refused(
    tsfile_corpus: list[Any],
) -> None:
    """On IoTDB's own files: cut anywhere, refused; a chunk header the Java reader read a
    point from, its marker byte flipped, refused."""
    for entry in tsfile_corpus:
        data = entry.path.read_bytes()
        for cut in sorted({7, len(data) // 3, len(data) // 2, len(data) - 11, len(data) - 1}):
            with pytest.raises(Corrupt):
                tsfile_meta.parse(data[:cut])
        for offset in _chunk_offsets(entry):
            bad = data[:offset] + bytes([data[offset] ^ 0x20]) + data[offset + 1 :]
            with pytest.raises(Corrupt, match="no chunk header"):
                tsfile_meta.parse(bad)


@pytest.mark.slow
def test_flipped_metadata_bytes_of_corpus_files_never_fail_otherwise(
    tsfile_corpus: list[Any],
) -> None:
    """Every metadata byte of one aligned file per line flipped: Corrupt or a parse, no
    other exception, and at least a third of them refused."""
    for entry in [e for e in tsfile_corpus if e.case == "aligned"]:
        data = entry.path.read_bytes()
        (meta_len,) = struct.unpack(">i", data[-10:-6])
        start = len(data) - 10 - meta_len
        refused = 0
        for at in range(start, len(data)):
            try:
                tsfile_meta.parse(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
            except Corrupt:
                refused += 1
        assert refused > (len(data) - start) // 3, entry.path


@pytest.mark.slow
def test_format_3_corpus_files_are_not_read_by_the_python_package(
    tsfile_corpus: list[Any],
) -> None:
    v3 = [e for e in tsfile_corpus if e.format_version == 3 and e.points]
    assert v3
    for entry in v3[:3]:
        with pytest.raises(FormatError, match="reads format 4 only"):
            tsfile.to_arrow(entry.path)


@pytest.mark.slow
def test_the_receivers_worker_pool_accepts_every_corpus_file(tsfile_corpus: list[Any]) -> None:
    """The receiver's own path: ``verify`` in its inspection workers, all files at once."""
    from receiver.inspect_pool import InspectPool, verify_in_worker

    with InspectPool(workers=2, timeout=120.0, target=verify_in_worker) as pool:
        got = pool.inspect_many([entry.path for entry in tsfile_corpus])
    for entry, info in zip(tsfile_corpus, got, strict=True):
        if _loader_refuses(tsfile_meta.read(entry.path)):
            assert isinstance(info, FormatError), entry.path
            continue
        assert info == FileInfo(devices=tuple(sorted(set(entry.devices))), rows=-1), entry.path


@pytest.mark.slow
@pytest.mark.parametrize("release", ["0.12.0", "2.0.1-beta"])
def test_files_a_real_iotdb_seals_are_accepted_with_their_devices(
    release: str, iotdb_server: Any
) -> None:
    """What a running IoTDB server writes and seals (format 3 from 0.12, 4 from 2.x;
    aligned devices where the release has them), not only what its library writes."""
    server = iotdb_server(release)
    standalone = server.release.standalone
    devices = {"root.sg.d1": False, "root.sg.d2": False}
    if not standalone:
        devices["root.sg.a1"] = True
    with server.client() as client:
        client.sql("SET STORAGE GROUP TO root.sg" if standalone else "CREATE DATABASE root.sg")
        for device, aligned in devices.items():
            names, kinds = ["s1", "s2", "s3"], ["INT64", "DOUBLE", "TEXT"]
            if aligned:
                client.sql(f"CREATE ALIGNED TIMESERIES {device}(s1 INT64, s2 DOUBLE, s3 TEXT)")
            records = [(device, t, names, kinds, [t, t + 0.5, f"v{t}"]) for t in range(1, 11)]
            client.insert(records, aligned=aligned)
        client.sql("FLUSH")
    sealed = sorted((server.data_dir / "sequence" / "root.sg").glob("*/*/*.tsfile"))
    assert sealed and all(Path(f"{p}.resource").is_file() for p in sealed)
    found: set[str] = set()
    for path in sealed:
        summary = tsfile_meta.read(path)
        assert summary.version == server.release.tsfile_version
        assert summary.series >= 3 * len(summary.devices) and summary.chunks >= summary.series
        assert tsfile.verify(path) == FileInfo(devices=summary.devices, rows=-1)
        found.update(summary.devices)
    assert found == set(devices)
