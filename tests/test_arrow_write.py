"""The Arrow copy of Parquet files into a load's staging folder (spark_loader/arrow_write.py).

The body Spark's Python workers run is called here directly on Arrow batches of file
rows; the loader's tests run it through Spark (tests/test_spark_loader.py and the
crash tests), and this file also checks, with a real session, which write a session's
codec gets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_loader_helpers import Receiver, table_rows

from sealsync.formats.deletion import MIN_TIME, SeriesDeletion
from sealsync.simulator import EdgeInstance
from spark_loader import arrow_write, run_load
from spark_loader.table_layout import KEY_COLUMN, part_files
from spark_loader.tsfile_read import FILE_ERROR, FILES_DDL, deletion_records

TARGET = pa.schema(
    [
        ("time", pa.int64()),
        ("device", pa.string()),
        ("s1", pa.float64()),
        ("s2", pa.int64()),
        ("s3", pa.string()),
    ]
)


_FIELDS = ("pattern", "since", "until", "below", "where")
_FILE_ROW = pa.schema(
    [
        ("path", pa.string()),
        ("file_id", pa.string()),
        ("key", pa.int32()),
        (
            "deletions",
            pa.list_(
                pa.struct(
                    [
                        ("pattern", pa.list_(pa.string())),
                        ("since", pa.int64()),
                        ("until", pa.int64()),
                        ("below", pa.int64()),
                        ("where", pa.string()),
                    ]
                )
            ),
        ),
    ]
)


def _rows(files: list[tuple[Path, int, list[SeriesDeletion]]]) -> pa.RecordBatch:
    """File rows as the loader's DataFrame of files (``FILES_DDL``) hands them over."""
    assert [c.split()[0] for c in FILES_DDL.split(", ")] == _FILE_ROW.names
    return pa.RecordBatch.from_pylist(
        [
            {
                "path": str(path),
                "file_id": f"f{key:02x}",
                "key": key,
                "deletions": [dict(zip(_FIELDS, d, strict=True)) for d in deletion_records(deleted)]
                or None,
            }
            for path, key, deleted in files
        ],
        schema=_FILE_ROW,
    )


def _write(
    tmp_path: Path, files: list[tuple[Path, int, list[SeriesDeletion]]]
) -> list[dict[str, Any]]:
    staging = tmp_path / "staging"
    out = arrow_write.written_batches(iter([_rows(files)]), TARGET, str(staging), "zstd")
    return [r for batch in out for r in batch.to_pylist()]


def test_a_file_is_copied_as_the_table_holds_it(tmp_path: Path) -> None:
    """Cast (int32 and float32 widened), a missing column null, an extra one dropped,
    every row group, the codec asked for, dictionaries only where values repeat."""
    source = tmp_path / "in.parquet"
    table = pa.table(
        {
            "time": pa.array(range(10), pa.int64()),
            "device": ["root.sg.d1"] * 10,
            "s1": pa.array([i / 2 for i in range(10)], pa.float32()),
            "s2": pa.array(range(10), pa.int32()),
            "extra": pa.array(range(10), pa.int8()),
        }
    )
    pq.write_table(table, source, row_group_size=3)  # four row groups

    (written,) = _write(tmp_path, [(source, 7, [])])

    path = Path(written["path"])
    assert path.parent == tmp_path / "staging" / f"{KEY_COLUMN}=7"
    assert (written["key"], written["rows"]) == (7, 10)
    got = pq.read_table(path)
    assert got.schema == TARGET
    assert got.column("s1").to_pylist() == [i / 2 for i in range(10)]
    assert got.column("s2").to_pylist() == list(range(10))
    assert got.column("s3").null_count == 10
    meta = pq.read_metadata(path)
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    chunks = {names[i]: meta.row_group(0).column(i) for i in range(meta.num_columns)}
    assert {c.compression for c in chunks.values()} == {"ZSTD"}
    with_dictionary = {n for n, c in chunks.items() if "RLE_DICTIONARY" in c.encodings}
    assert with_dictionary == {"device", "s2", "s3"}
    assert chunks["time"].statistics.min == 0 and chunks["time"].statistics.max == 9


def test_deletions_apply_per_series_and_a_file_left_empty_writes_nothing(tmp_path: Path) -> None:
    source = tmp_path / "in.parquet"
    pq.write_table(
        pa.table(
            {
                "time": pa.array([1, 2, 3, 1], pa.int64()),
                "device": ["root.sg.d1"] * 3 + ["root.sg.d2"],
                "s1": pa.array([1.0, 2.0, 3.0, 4.0]),
                "s2": pa.array([10, 20, 30, 40]),
            }
        ),
        source,
    )
    s1_upto_2 = SeriesDeletion(("root", "sg", "d1", "s1"), MIN_TIME, 2, None, "line 1")
    d1_at_3 = SeriesDeletion(("root", "sg", "d1", "*"), 3, 3, None, "line 2")
    everything = SeriesDeletion(("root", "**"), MIN_TIME, 10, None, "line 1")
    other = tmp_path / "other.parquet"
    other.write_bytes(source.read_bytes())

    written = _write(tmp_path, [(source, 0, [s1_upto_2, d1_at_3]), (other, 1, [everything])])

    assert [(r["key"], r["rows"]) for r in written] == [(0, 3)]
    got = pq.read_table(written[0]["path"]).to_pylist()
    assert [(r["device"], r["time"], r["s1"], r["s2"]) for r in got] == [
        ("root.sg.d1", 1, None, 10),
        ("root.sg.d1", 2, None, 20),
        ("root.sg.d2", 1, 4.0, 40),
    ]
    assert not (tmp_path / "staging" / f"{KEY_COLUMN}=1").exists()


def test_a_file_that_does_not_read_names_itself(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not a parquet file PAR1")
    with pytest.raises(RuntimeError, match=rf"{FILE_ERROR}\[f03\]: "):
        _write(tmp_path, [(bad, 3, [])])


def test_only_the_files_the_job_returned_stay(tmp_path: Path) -> None:
    """A failed or repeated task attempt's files are removed; another write's folders
    (Spark's, for the batch's TsFiles) are not the Arrow copy's to touch."""
    staging = tmp_path / "staging"
    kept, stray = (
        staging / f"{KEY_COLUMN}=0" / "part-a.parquet",
        staging / f"{KEY_COLUMN}=0" / "part-b.parquet",
    )
    other = staging / f"{KEY_COLUMN}=5" / "part-c.parquet"
    for path in (kept, stray, other):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")

    arrow_write.keep_returned(staging, [0, 1], [{"key": 0, "path": str(kept), "rows": 1}])

    assert part_files(staging / f"{KEY_COLUMN}=0") == [kept]
    assert other.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("codec", "writer"), [("zstd", "arrow"), ("lz4", "spark")])
def test_the_session_codec_decides_the_writer(
    tmp_path: Path, spark: Any, codec: str, writer: str
) -> None:
    """A codec Arrow writes as Spark does is written by Arrow; Hadoop's ``lz4`` framing,
    which Arrow does not write, by Spark. Either way the table holds the files' rows."""
    edge = EdgeInstance(tmp_path / "edge")
    recv = Receiver(tmp_path)
    table = pa.table(
        {"time": pa.array(range(5), pa.int64()), "device": ["root.sg.d1"] * 5, "s1": range(5)}
    )
    recv.place(edge, edge.write_table(table, "root.sg", 0, fmt="parquet"))
    config = recv.config(tmp_path)
    before = spark.conf.get("spark.sql.parquet.compression.codec")
    spark.conf.set("spark.sql.parquet.compression.codec", codec)
    try:
        report = run_load(config, spark=spark, sync=False)
    finally:
        spark.conf.set("spark.sql.parquet.compression.codec", before)

    assert report.ok and report.rows_written == 5
    (data,) = [p for p in Path(config.table_path).rglob("part-*.parquet")]
    meta = pq.read_metadata(data)
    assert meta.created_by.startswith("parquet-cpp-arrow" if writer == "arrow" else "parquet-mr")
    written = meta.row_group(0).column(0).compression
    # Arrow names Hadoop's LZ4 framing, which it cannot write, "UNKNOWN"
    assert written == {"zstd": "ZSTD", "lz4": "UNKNOWN"}[codec]
    assert [(r[2], r[3], r[4]) for r in table_rows(config.table_path)] == [
        (t, "root.sg.d1", (("s1", t),)) for t in range(5)
    ]
