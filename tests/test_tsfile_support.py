"""The table of what the loader reads exactly, and the receiver refusing by it.

The loader's Java reader gets the same table (``java_table``); the slow tests
``test_tsfile_writers_differential.py`` hold both to one verdict on every writer's files.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tsfile
from tsfile import Compressor, TSDataType, TSEncoding

from sealsync.errors import FormatError
from sealsync.formats import tsfile as tsfile_format
from sealsync.formats import tsfile_meta
from sealsync.formats import tsfile_support as support


def _write(path: Path, kind: TSDataType, encoding: TSEncoding) -> Path:
    writer = tsfile.TsFileWriter(str(path))
    writer.register_timeseries(
        "root.sg.d1", tsfile.TimeseriesSchema("s1", kind, encoding, Compressor.SNAPPY)
    )
    tablet = tsfile.Tablet(["s1"], [kind], 3)
    tablet.set_table_name("root.sg.d1")
    tablet.set_timestamp_list([1, 2, 3])
    tablet.data_list[0] = [1.5, 2.5, -3.0]
    writer.write_tablet(tablet)
    writer.close()
    return path


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("kind", [support.FLOAT, support.DOUBLE])
def test_rlbe_floats_are_refused_in_every_format(version: int, kind: int) -> None:
    line = support.chunk_refusal(version, kind, support.RLBE, "s'1")
    assert line is not None and line.startswith('series "s\'1" (')
    assert "RLBE on" in line and "\n" not in line
    assert support.chunk_refusal(version, support.INT64, support.RLBE, "s") is None


def test_the_common_encodings_are_read_in_both_formats() -> None:
    for version in (3, 4):
        for kind, encoding in (
            (support.DOUBLE, support.GORILLA),
            (support.FLOAT, support.TS_2DIFF),
            (support.INT64, support.TS_2DIFF),
            (support.VECTOR, support.TS_2DIFF),
            (support.BOOLEAN, support.RLE),
            (support.TEXT, support.DICTIONARY),
            (support.INT32, support.CHIMP),
        ):
            assert support.chunk_refusal(version, kind, encoding, "s") is None


def test_sprintz_is_refused_in_format_4_only() -> None:
    assert support.chunk_refusal(3, support.INT32, support.SPRINTZ, "s") is None
    refused = support.chunk_refusal(4, support.INT32, support.SPRINTZ, "s")
    assert refused is not None and "C++ writer" in refused


def test_no_decoder_is_a_refusal_naming_type_and_encoding() -> None:
    line = support.chunk_refusal(4, support.BOOLEAN, support.GORILLA, "flag")
    assert line == (
        "series 'flag' (BOOLEAN, GORILLA): the loader's reader decodes no BOOLEAN encoded "
        "GORILLA in a format-4 file"
    )


def test_an_encrypted_file_is_refused() -> None:
    assert support.file_refusal(4, {"encryptLevel": "0"}, []) is None
    line = support.file_refusal(4, {"encryptLevel": "2"}, [])
    assert line is not None and line.startswith("encrypted (encryptLevel 2)")


def test_the_java_table_lists_every_code_triple_once() -> None:
    lines = support.java_table().splitlines()
    assert lines[0].startswith("encrypted\t")
    keys = [ln.split("\t")[0] for ln in lines[1:]]
    assert len(keys) == len(set(keys)) == 2 * len(support.TYPE_NAMES) * 15
    refused = dict(ln.split("\t") for ln in lines[1:] if "\t" in ln)
    assert "3 4 13" in refused and "{series}" in refused["3 4 13"]  # DOUBLE, RLBE
    assert "4 2 4" not in refused  # INT64, TS_2DIFF


def test_the_receiver_refuses_a_file_the_loader_cannot_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "rlbe.tsfile", TSDataType.DOUBLE, TSEncoding.RLBE)
    assert tsfile_meta.read(path).codecs == ((support.DOUBLE, support.RLBE, "s1"),)
    with pytest.raises(FormatError) as caught:
        tsfile_format.verify(path)
    assert str(caught.value) == (
        f"{path}: TsFile series 's1' (DOUBLE, RLBE): "
        + support.REASONS[4, support.DOUBLE, support.RLBE]
        + "; the loader cannot read it"
    )
    good = _write(tmp_path / "gorilla.tsfile", TSDataType.DOUBLE, TSEncoding.GORILLA)
    assert tsfile_format.verify(good).devices == ("root.sg.d1",)
