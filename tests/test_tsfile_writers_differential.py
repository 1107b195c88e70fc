"""Every writer's files, the loader's reading against the values written; one verdict.

Writers here: the C++ writer of the ``tsfile`` package (``tests/tsfile_cpp_writers.py``:
tree model, every data type with every encoding and compressor it accepts; table model
through ``dataframe_to_tsfile``) and the Java TsFile libraries of the generated corpus
(``tests/tsfile_corpus.py``: IoTDB 0.13's, TsFile 1.1's and 2.x's writers, each type,
encoding and compressor they accept, tree and table model). IoTDB's servers are in
``test_iotdb_encodings_differential.py``.

Each file goes through the loader's Java read path (``tests/tsfile_read_helpers.py``) and
through the receiver's check (``formats.tsfile.check``). Both must give one verdict: the
receiver refuses exactly the files the loader refuses, each with one line, and a file
both accept loads with zero values differing from the reference (the written values for
the C++ writer; for the Java libraries, what the writer's own release reads back, which is
what IoTDB returns, since some encodings are lossy by design).
"""

from __future__ import annotations

from typing import Any

import pytest
import tsfile_corpus
from tsfile_cpp_writers import REFUSED_FILES
from tsfile_cpp_writers import build as build_cpp
from tsfile_read_helpers import differences, differing_series, loader_read, receiver_verdict

pytestmark = pytest.mark.slow  # Spark, Maven and Java


@pytest.fixture(scope="module")
def cpp(spark: Any, tmp_path_factory: Any) -> Any:
    corpus = build_cpp(tmp_path_factory.mktemp("cpp"))
    read = loader_read(spark, [f.path for f in corpus.files], tmp_path_factory.mktemp("read"))
    return corpus, read


def test_the_cpp_corpus_covers_every_type_encoding_and_compressor_it_writes(cpp: Any) -> None:
    corpus, _ = cpp
    covered = {c for f in corpus.files for c in f.covers}
    types = {t for t, _, _ in covered if t != "*"}
    encodings = {e for _, e, _ in covered}
    compressors = {c for _, _, c in covered}
    assert len(types) == 10  # every type the package has but VECTOR's time column
    assert {"PLAIN", "DICTIONARY", "RLE", "TS_2DIFF", "GORILLA", "ZIGZAG"} <= encodings
    assert {"CHIMP", "SPRINTZ", "RLBE", "CAMEL"} <= encodings
    assert {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZ4", "ZSTD", "LZMA2"} <= compressors
    assert ("DOUBLE", "RLBE", "SNAPPY") in covered and ("FLOAT", "RLBE", "SNAPPY") in covered
    assert any(f.model == "table" for f in corpus.files)


def test_cpp_files_load_exactly_as_written_or_are_refused_by_both(cpp: Any) -> None:
    corpus, read = cpp
    wrong = []
    refused = set()
    for written, got in zip(corpus.files, read, strict=True):
        name = written.path.name
        at_receiver = receiver_verdict(written.path)
        if isinstance(got, str) or at_receiver is not None:
            refused.add(name)
            if not (isinstance(got, str) and at_receiver is not None):
                wrong.append(f"{name}: receiver {at_receiver!r}, loader {str(got)[:300]!r}")
            elif "\n" in got or "\n" in at_receiver:
                wrong.append(f"{name}: a refusal of more than one line")
            continue
        rows, count = got
        if count != len(rows):
            wrong.append(f"{name}: {count} rows for {len(rows)} (device, time) pairs")
        diffs = differences(rows, written.rows, limit=2)
        if diffs:
            series = differing_series(rows, written.rows)
            wrong.append(f"{name}: {series} " + "; ".join(diffs))
    assert not wrong, "\n".join(wrong)
    assert refused == set(REFUSED_FILES)


def test_rlbe_floats_are_refused_in_one_line_naming_the_series(cpp: Any) -> None:
    corpus, read = cpp
    (at,) = [i for i, f in enumerate(corpus.files) if f.path.name == "tree-RLBE.tsfile"]
    line = read[at]
    assert isinstance(line, str) and "RLBE on" in line and "_rlbe'" in line, line
    assert "RLBE on" in str(receiver_verdict(corpus.files[at].path))


def test_the_table_model_file_of_dataframe_to_tsfile_loads(cpp: Any) -> None:
    """TsFile 2.1's reader failed on it (TableSchema.deserialize, index 3 of 3)."""
    corpus, read = cpp
    (at,) = [i for i, f in enumerate(corpus.files) if f.model == "table"]
    got = read[at]
    assert not isinstance(got, str), got
    assert got[1] == len(corpus.files[at].rows) > 0
    assert not differences(got[0], corpus.files[at].rows)


# ---------------------------------------------------------------- the Java libraries


@pytest.fixture(scope="module")
def java(spark: Any, tsfile_corpus: list[Any], tmp_path_factory: Any) -> Any:
    read = loader_read(spark, [e.path for e in tsfile_corpus], tmp_path_factory.mktemp("java"))
    return tsfile_corpus, read


def test_java_library_files_load_as_their_writer_reads_them_or_are_refused_by_both(
    java: Any,
) -> None:
    entries, read = java
    wrong = []
    refused = []
    for entry, got in zip(entries, read, strict=True):
        name = f"{entry.line}/{entry.case}/{entry.path.name}"
        at_receiver = receiver_verdict(entry.path)
        if isinstance(got, str) or at_receiver is not None:
            refused.append(name)
            if not (isinstance(got, str) and at_receiver is not None):
                wrong.append(f"{name}: receiver {at_receiver!r}, loader {str(got)[:300]!r}")
            continue
        rows, count = got
        want = tsfile_corpus.expected_rows(entry)
        if count != len(rows):
            wrong.append(f"{name}: {count} rows for {len(rows)} (device, time) pairs")
        diffs = differences(rows, want)
        if diffs:
            wrong.append(f"{name}: " + "; ".join(diffs))
    assert not wrong, "\n".join(wrong)
    must = [f"{e.line}/{e.case}/{e.path.name}" for e in entries if _refusable(e)]
    assert sorted(refused) == sorted(must) and len(must) >= 4


def _refusable(entry: Any) -> bool:
    """A file with a series of RLBE on FLOAT or DOUBLE, or (format 4) of SPRINTZ: the
    generator names each series of the encoding cases after its encoding."""
    for p in tsfile_corpus.expected_points(entry):
        name = p.measurement.lower()
        if "rlbe" in name and p.type in ("FLOAT", "DOUBLE"):
            return True
        if "sprintz" in name and entry.format_version == 4:
            return True
    return False
