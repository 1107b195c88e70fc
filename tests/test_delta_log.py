"""The loader's own reader of a Delta log (spark_loader.delta_log), on logs written here by
hand as the Delta protocol spells them: JSON commits replayed in order, a classic
checkpoint taken as the state of its version, any earlier version readable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sealsync.config.location import parse_location
from spark_loader import delta_log
from spark_loader.delta_log import DeltaLogError, encode_path

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}}
        for n, t in (("time", "long"), ("device", "string"), ("file_id", "string"))
    ],
}
META = {
    "id": "t",
    "format": {"provider": "parquet", "options": {}},
    "schemaString": json.dumps(SCHEMA),
    "partitionColumns": ["file_id"],
    "configuration": {},
}


def _data(table: Path, rel: str, times: list[int]) -> dict[str, Any]:
    path = table / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({"time": pa.array(times, pa.int64()), "device": ["root.a.d1"] * len(times)}),
        path,
    )
    return {
        "add": {
            "path": encode_path(rel),
            "partitionValues": {"file_id": rel.split("/")[0].split("=", 1)[1]},
            "size": path.stat().st_size,
            "modificationTime": 1,
            "dataChange": True,
            "stats": json.dumps({"numRecords": len(times)}),
            "tags": {"k": "v"},
        }
    }


def _commit(table: Path, version: int, actions: list[dict[str, Any]]) -> None:
    folder = table / "_delta_log"
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(a) + "\n" for a in actions)
    (folder / f"{version:020d}.json").write_text(text)


def test_commits_replay_adds_removes_and_transactions(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert delta_log.read(table).version == -1 and not delta_log.is_delta(table)
    a = _data(table, "file_id=a/part-0.parquet", [1, 2])
    b = _data(table, "file_id=b %/part-0.parquet", [3])  # escaped in the log's path
    _commit(table, 0, [{"metaData": META}, {"protocol": {"minReaderVersion": 1}}, a, b])
    _commit(
        table,
        1,
        [{"remove": {"path": a["add"]["path"]}}, {"txn": {"appId": "x", "version": 4}}],
    )

    latest = delta_log.read(table)
    first = delta_log.read(table, 0)

    assert latest.version == 1 and first.version == 0
    assert [f.partition["file_id"] for f in latest.files.values()] == ["b %"]
    (only,) = latest.files.values()
    assert only.path == str(table / "file_id=b %" / "part-0.parquet")
    assert Path(only.path).exists()
    assert (only.rows, only.tags) == (1, {"k": "v"})
    assert latest.transactions == {"x": 4} and first.transactions == {}
    assert len(first.files) == 2
    rows = delta_log.read_arrow(table).to_pylist()
    assert rows == [{"time": 3, "device": "root.a.d1", "file_id": "b %"}]
    assert sorted(r["time"] for r in delta_log.read_arrow(table, 0).to_pylist()) == [1, 2, 3]
    with pytest.raises(DeltaLogError, match="lacks commit 2"):
        delta_log.read(table, 2)


def test_a_checkpoint_is_the_state_of_its_version(tmp_path: Path) -> None:
    """Commits before the checkpoint are not read (here they are gone, as after a log
    cleanup); maps are read back from Parquet's key/value lists."""
    table = tmp_path / "t"
    a = _data(table, "file_id=a/part-0.parquet", [1, 2])
    b = _data(table, "file_id=b/part-0.parquet", [3])
    rows = [
        {"add": None, "metaData": META, "txn": None},
        {"add": a["add"], "metaData": None, "txn": None},
        {"add": None, "metaData": None, "txn": {"appId": "x", "version": 9}},
    ]
    add_type = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", pa.map_(pa.string(), pa.string())),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats", pa.string()),
            ("tags", pa.map_(pa.string(), pa.string())),
        ]
    )
    for row in rows:
        if row["add"] is not None:
            row["add"] = {
                **row["add"],
                "partitionValues": list(row["add"]["partitionValues"].items()),
                "tags": list(row["add"]["tags"].items()),
            }
        if row["metaData"] is not None:
            row["metaData"] = {
                "id": META["id"],
                "schemaString": META["schemaString"],
                "partitionColumns": META["partitionColumns"],
            }
    schema = pa.schema(
        [
            ("add", add_type),
            (
                "metaData",
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("schemaString", pa.string()),
                        ("partitionColumns", pa.list_(pa.string())),
                    ]
                ),
            ),
            ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64())])),
        ]
    )
    folder = table / "_delta_log"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema), folder / f"{10:020d}.checkpoint.parquet")
    _commit(table, 11, [b])

    snap = delta_log.read(table)

    assert snap.version == 11 and snap.transactions == {"x": 9}
    assert sorted(f.partition["file_id"] for f in snap.files.values()) == ["a", "b"]
    assert {f.tags["k"] for f in snap.files.values()} == {"v"}
    assert snap.metadata is not None and snap.metadata["partitionColumns"] == ["file_id"]
    assert sorted(r["time"] for r in delta_log.read_arrow(table).to_pylist()) == [1, 2, 3]


@pytest.mark.parametrize("uri", ["hdfs://nn:8020/lake/t", "s3a://bucket/t", "abfss://c@a/t"])
def test_a_table_on_another_file_system_is_never_read_as_a_local_folder(uri: str) -> None:
    """Without the table's store, a URI is refused with what reads it, never taken as a
    folder name (which would read as an empty table)."""
    for read in (delta_log.read, delta_log.read_arrow, delta_log.is_delta):
        with pytest.raises(delta_log.DeltaLogError, match="read it with deltalake"):
            read(uri)
    with pytest.raises(delta_log.DeltaLogError, match="not a local folder"):
        delta_log.read_arrow(parse_location(uri, Path("/")))


def test_a_file_uri_is_the_local_folder(tmp_path: Path) -> None:
    table = tmp_path / "t"
    (table / "_delta_log").mkdir(parents=True)
    assert delta_log.read(table.as_uri()).version == -1
    assert not delta_log.is_delta(table.as_uri())
