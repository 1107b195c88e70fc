"""The loader reads every TsFile IoTDB's own writers wrote exactly as IoTDB's Java reader does.

The differential test of the loader's TsFile read path: every file of the generated corpus
(``tests/tsfile_corpus.py``: formats 3 and 4, IoTDB 0.13, 1.3 and TsFile 2.x, tree and
table model, every type, encoding and compressor the writers accept, aligned devices,
overlapping chunk groups, NaN, int64 past 2**53, bytes with NUL, dates) goes through the
Spark job that reads TsFiles (the schema pass, then the data pass, as ``job.py`` runs them),
and the rows must be exactly ``expected_rows(entry)``: the Java reader's points with a
repeated (device, measurement, time) resolved to the later chunk. One value off fails the
test, NaN equals only NaN, -0.0 is not 0.0, integers compare exactly and bytes byte for byte.
A real ``run_load`` on a few files checks the same through the table.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest
import tsfile_corpus
import tsfile_corpus as corpus_module
from tsfile_read_helpers import Rows, differences, loader_read, plain

from spark_loader import jvm

pytestmark = pytest.mark.slow  # Maven, Java and Spark


def _read(spark: Any, entries: list[Any], tmp: Path) -> dict[str, tuple[Rows, int] | str]:
    """Each file through the loader's read path: file id -> its rows, or its error."""
    got = loader_read(spark, [e.path for e in entries], tmp)
    return {f"f{i:03x}": result for i, result in enumerate(got)}


@pytest.fixture(scope="module")
def read_back(spark: Any, tsfile_corpus: list[Any], tmp_path_factory: Any) -> Any:
    assert jvm.tsfile_reader(spark), "the loader's session lacks the Java TsFile reader"
    return tsfile_corpus, _read(spark, tsfile_corpus, tmp_path_factory.mktemp("corpus"))


def test_the_corpus_covers_what_the_loader_must_read(tsfile_corpus: list[Any]) -> None:
    kinds = {(e.line, e.format_version, e.model) for e in tsfile_corpus}
    assert kinds >= {
        ("iotdb-0.13", 3, "tree"),
        ("iotdb-1.3", 3, "tree"),
        ("tsfile-2", 4, "tree"),
        ("tsfile-2", 4, "table"),
    }
    cases = {e.case for e in tsfile_corpus}
    assert {"aligned", "overwrite", "special-values", "names", "empty"} <= cases


def test_every_corpus_file_loads_exactly_the_java_readers_answer(read_back: Any) -> None:
    entries, got = read_back
    wrong = []
    refused = 0
    for i, entry in enumerate(entries):
        name = f"{entry.line}/{entry.case}/{entry.path.name}"
        result = got[f"f{i:03x}"]
        cause = corpus_module.refused_because(entry)
        if cause is not None:
            refused += 1
            if not isinstance(result, str) or cause not in result:
                wrong.append(f"{name}: must be refused for {cause}, got {str(result)[:200]}")
            continue
        if isinstance(result, str):
            wrong.append(f"{name}: refused: {result}")
            continue
        rows, count = result
        want = tsfile_corpus.expected_rows(entry)
        if count != len(rows):
            wrong.append(f"{name}: {count} rows for {len(rows)} (device, time) pairs")
        diffs = differences(rows, want)
        if diffs:
            wrong.append(f"{name}: " + "; ".join(diffs))
    assert not wrong, f"{len(wrong)} of {len(entries)} files:\n" + "\n".join(wrong)
    assert refused <= 8, "the refusals must stay the exception"


def test_the_hard_values_arrive_exactly(read_back: Any) -> None:
    """Not only equal to the oracle: the values that readers get wrong are there."""
    entries, got = read_back
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        result = got[f"f{i:03x}"]
        if entry.case != "special-values" or isinstance(result, str):
            continue
        for values in result[0].values():
            for v in values.values():
                if isinstance(v, float) and v != v:
                    seen.add("NaN")
                elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**53:
                    seen.add("int64 > 2**53")
                elif isinstance(v, bytes | str) and (
                    "\0" in v if isinstance(v, str) else b"\0" in v
                ):
                    seen.add("NUL")
                elif isinstance(v, dt.date):
                    seen.add("DATE")
    assert seen >= {"NaN", "int64 > 2**53", "NUL", "DATE"}, seen


def test_a_repeated_point_is_read_once_with_the_later_value(read_back: Any) -> None:
    entries, got = read_back
    checked = 0
    for i, entry in enumerate(entries):
        if "overwrite" not in entry.case:
            continue
        points = tsfile_corpus.expected_points(entry)
        keys = [(p.device, p.measurement, p.time) for p in points]
        assert len(set(keys)) < len(keys), f"{entry.path}: no repeated point"
        rows, count = got[f"f{i:03x}"]
        assert count == len({(d, t) for d, _, t in keys})
        checked += 1
    assert checked >= 3


_END_TO_END = {
    ("iotdb-0.13", "special-values"),
    ("iotdb-1.3", "overwrite"),
    ("iotdb-1.3", "enc-FLOAT"),  # refused: RLBE in format 3
    ("tsfile-2", "aligned"),
    ("tsfile-2", "table"),
}


def test_a_load_puts_exactly_the_java_readers_answer_in_the_table(
    tmp_path: Path, spark: Any, tsfile_corpus: list[Any]
) -> None:
    """``run_load`` over a receiver holding a corpus file (one table each: files of different
    cases may give one measurement different types): its partition holds exactly its
    expected rows, and a file that must be refused is, in one line."""
    from spark_loader_helpers import SENDER_A, Receiver

    from spark_loader import read_arrow, run_load
    from spark_loader.table_layout import FILE_ID_COLUMN, SENDER_COLUMN, SOURCE_COLUMN

    chosen = [e for e in tsfile_corpus if (e.line, e.case) in _END_TO_END]
    assert len(chosen) == len(_END_TO_END)
    provenance = {"time", "device", SENDER_COLUMN, SOURCE_COLUMN, FILE_ID_COLUMN}
    refused = 0
    for i, entry in enumerate(chosen):
        recv = Receiver(tmp_path / f"r{i}")
        rel = f"sequence/root.sg/0/0/{entry.path.name}"
        target = recv.storage.target(recv.data_dirs[0], SENDER_A, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry.path, target)
        config = recv.config(tmp_path / f"r{i}")

        report = run_load(config, spark=spark)

        if corpus_module.refused_because(entry):
            refused += 1
            assert report.ingested == 0 and list(report.skipped) == [str(target)]
            reason = report.skipped[str(target)]
            assert corpus_module.refused_because(entry) in reason and "\n" not in reason
            table = Path(config.table_path)
            assert not table.exists() or not list(table.rglob("*.parquet"))
            continue
        assert report.ingested == 1 and not report.skipped, report.skipped
        loaded: Rows = {}
        for row in read_arrow(config.table_path).to_pylist():
            values = {k: plain(v) for k, v in row.items() if k not in provenance and v is not None}
            assert (row["device"], row["time"]) not in loaded, "a row loaded twice"
            loaded[(row["device"], row["time"])] = values
        assert not differences(loaded, corpus_module.expected_rows(entry)), entry.path
    assert refused == 1
