"""The corpus of TsFiles IoTDB's own Java writers generate (tests/tsfile_corpus.py): it
builds, each file has the format version its writer line writes, and the Java reader's
answers hold the values the generators put in on purpose. Readers of this project are
tested against the corpus elsewhere; this only checks the corpus itself."""

from __future__ import annotations

import datetime as dt
import math
import os
import struct
import time
from collections import Counter
from pathlib import Path

import pytest
import tsfile_corpus as tc
from tsfile_corpus import Entry, expected_points, expected_rows, values_equal

pytestmark = pytest.mark.slow

WANTED_VERSION = {"iotdb-0.13": 3, "iotdb-1.3": 3, "tsfile-2": 4}


def _one(corpus: list[Entry], line: str, case: str) -> Entry:
    found = [e for e in corpus if e.line == line and e.case == case]
    assert len(found) == 1, f"{line}/{case}: {len(found)} files"
    return found[0]


def test_every_line_and_model_is_there(tsfile_corpus: list[Entry]) -> None:
    lines = Counter((e.line, e.model) for e in tsfile_corpus)
    assert set(lines) == {
        ("iotdb-0.13", "tree"),
        ("iotdb-1.3", "tree"),
        ("tsfile-2", "tree"),
        ("tsfile-2", "table"),
    }
    assert all(n >= 2 for n in lines.values()), lines


def test_format_version_byte_is_the_lines(tsfile_corpus: list[Entry]) -> None:
    for e in tsfile_corpus:
        assert e.format_version == WANTED_VERSION[e.line], e.path
        assert tc.format_version_of(e.path) == e.format_version, e.path


def test_names_are_iotdbs(tsfile_corpus: list[Entry]) -> None:
    for e in tsfile_corpus:
        parts = e.path.name.removesuffix(".tsfile").split("-")
        assert len(parts) == 4 and all(p.isdigit() for p in parts), e.path.name


def test_expected_answers_are_complete(tsfile_corpus: list[Entry]) -> None:
    for e in tsfile_corpus:
        points = expected_points(e)
        assert len(points) == e.points, e.path
        if e.case == "empty":
            assert points == [] and e.path.stat().st_size > 0
        else:
            assert points, f"{e.path}: no expected points"
            assert {p.device for p in points} == set(e.devices)


def test_every_type_compressor_and_aligned_is_covered(tsfile_corpus: list[Entry]) -> None:
    for line in WANTED_VERSION:
        entries = [e for e in tsfile_corpus if e.line == line]
        types = {p.type for e in entries for p in expected_points(e)}
        base = {"BOOLEAN", "INT32", "INT64", "FLOAT", "DOUBLE", "TEXT"}
        new = {"STRING", "BLOB", "DATE", "TIMESTAMP"}
        assert types == (base if line == "iotdb-0.13" else base | new), line
        comps = {e.case for e in entries if e.case.startswith("comp-")}
        assert {"comp-UNCOMPRESSED", "comp-SNAPPY", "comp-GZIP", "comp-LZ4"} <= comps
        if line != "iotdb-0.13":
            assert {"comp-ZSTD", "comp-LZMA2"} <= comps
        aligned = [p for p in expected_points(_one(tsfile_corpus, line, "aligned")) if p.aligned]
        assert aligned


def test_encodings_iotdb_never_writes_are_apart(tsfile_corpus: list[Entry]) -> None:
    lines = tc.manifest(tsfile_corpus[0].path.parents[2])["lines"]
    for e in tsfile_corpus:
        if not e.case.startswith("enc-"):
            assert e.iotdb_writes, e.path
            continue
        type_ = e.case.rsplit("-", 1)[1]
        allowed = set(lines[e.line]["iotdb_encodings"][type_])
        used = {p.measurement.removeprefix("s_").upper() for p in expected_points(e)}
        assert used and (used <= allowed) == e.iotdb_writes, e.path
        if not e.iotdb_writes:
            assert not used & allowed


def test_one_page_and_many_page_chunks(tsfile_corpus: list[Entry]) -> None:
    for line in WANTED_VERSION:
        one = _one(tsfile_corpus, line, "pages-one")
        assert one.chunks > 0 and one.one_page_chunks == one.chunks
        many = _one(tsfile_corpus, line, "pages-many")
        assert many.one_page_chunks == 0 and many.max_pages_per_chunk >= 10


def test_iotdb_flushes_leave_plan_index_markers(tsfile_corpus: list[Entry]) -> None:
    marked = [e for e in tsfile_corpus if e.plan_indices]
    assert {e.case for e in marked} >= {"aligned", "overwrite", "special-values"}
    for e in marked:
        first = b"\x04" + (1).to_bytes(8, "big") + (100).to_bytes(8, "big")
        assert first in e.path.read_bytes(), e.path


def test_wide_files_outgrow_one_index_node(tsfile_corpus: list[Entry]) -> None:
    for line in WANTED_VERSION:
        e = _one(tsfile_corpus, line, "wide")
        assert len(e.devices) == 301
        wide = {p.measurement for p in expected_points(e) if p.device == "root.sg.wide"}
        assert len(wide) == 300


def test_aligned_columns_without_values(tsfile_corpus: list[Entry]) -> None:
    for line in WANTED_VERSION:
        e = _one(tsfile_corpus, line, "aligned-sparse")
        rows = expected_rows(e)
        assert sorted(t for _, t in rows) == list(range(12))
        assert rows[("root.sg.sparse", 0)] == {"a": 0}
        assert rows[("root.sg.sparse", 7)] == {"a": 7, "b": 0.5}


def test_spot_values_round_trip(tsfile_corpus: list[Entry]) -> None:
    for line in WANTED_VERSION:
        e = _one(tsfile_corpus, line, "special-values")
        by_series: dict[tuple[str, str], list[object]] = {}
        for p in expected_points(e):
            by_series.setdefault((p.device, p.measurement), []).append(p.value)
        for device in ("root.sg.sp", "root.sg.sp_al"):
            d = by_series[(device, "s_double")]
            assert math.isnan(d[0]) and d[1] == math.inf and d[2] == -math.inf  # type: ignore[arg-type]
            assert math.copysign(1.0, d[3]) == -1.0  # type: ignore[arg-type]
            f32 = by_series[(device, "s_float")]
            assert math.isnan(f32[0])  # type: ignore[arg-type]
            assert f32[6] == struct.unpack("<f", struct.pack("<f", 0.1))[0] != 0.1
            i64 = by_series[(device, "s_int64")]
            assert i64[:4] == [-(2**63), 2**63 - 1, 2**53 + 1, -(2**53) - 1]
            assert by_series[(device, "s_text")][1] == "a\x00b"
            assert by_series[(device, "s_text")][2] == "温度°C"
            if line != "iotdb-0.13":
                assert by_series[(device, "s_blob")][1] == b"\x00"
                assert by_series[(device, "s_blob")][3] == "温度\x00".encode()
                assert by_series[(device, "s_date")][1] == dt.date(2024, 2, 29)
                assert by_series[(device, "s_timestamp")][2] == 2**63 - 1
        neg = [p.time for p in expected_points(e) if p.device == "root.sg.sp_neg"]
        assert min(neg) == -5


def test_repeated_points_resolve_to_the_later_chunk(tsfile_corpus: list[Entry]) -> None:
    cases = [(line, "overwrite", "root.sg.ow") for line in WANTED_VERSION]
    cases.append(("tsfile-2", "table-overwrite", "t.a"))
    for line, case, device in cases:
        e = _one(tsfile_corpus, line, case)
        points = [p for p in expected_points(e) if p.device == device]
        seen = Counter((p.measurement, p.time) for p in points)
        assert seen[("v", 5)] == 2 and max(seen.values()) == 2, (line, case)
        rows = expected_rows(e)
        assert sorted(t for d, t in rows if d == device) == list(range(15))
        assert rows[(device, 5)]["v"] == 1005 and rows[(device, 4)]["v"] == 4
        assert rows[(device, 6)] == {"v": 1006, "x": 6.5}, "a null does not hide the value"
        assert rows[(device, 7)]["x"] == 1002.25


def test_all_null_rows_are_not_rows(tsfile_corpus: list[Entry]) -> None:
    for line in WANTED_VERSION:
        e = _one(tsfile_corpus, line, "aligned")
        times = {p.time for p in expected_points(e) if p.device == "root.sg.al1"}
        rows = expected_rows(e)
        all_null_time = 1_700_000_000_000 + 40 * 100 + 7 * 100
        assert all_null_time not in times
        assert ("root.sg.al1", all_null_time) not in rows
        assert ("root.sg.al1", all_null_time - 100) in rows


def test_values_equal() -> None:
    assert values_equal(math.nan, math.nan)
    assert not values_equal(0.0, -0.0)
    assert not values_equal(1, True)
    assert values_equal(b"\x00", b"\x00")


def test_second_build_reuses_the_cache(tsfile_corpus: list[Entry]) -> None:
    folder = tsfile_corpus[0].path.parents[2]
    assert folder.parent == tc.cache_root() and folder.name == tc.source_hash()
    before = (folder / "manifest.json").stat().st_mtime_ns
    assert tc.build() == folder
    assert (folder / "manifest.json").stat().st_mtime_ns == before


def test_bench_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tc.main(["--bench", "4000", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split()
    v3, v4 = (Path(p) for p in printed[1:])
    assert (tc.format_version_of(v3), tc.format_version_of(v4)) == (3, 4)
    assert v3.parent == v4.parent == tmp_path


def test_prune_removes_only_old_corpora(tmp_path: Path) -> None:
    names = ["0123456789abcdef", "fedcba9876543210", "fedcba9876543210.x1.tmp"]
    names += ["aaaaaaaaaaaaaaaa", "not-a-corpus"]
    for name in names:
        (tmp_path / name).mkdir()
    week_ago = time.time() - tc.STALE_SECONDS - 60
    for name in names[:3] + names[4:]:
        os.utime(tmp_path / name, (week_ago, week_ago))
    tc._prune(tmp_path, keep=tmp_path / names[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names[0], names[3], names[4]])
