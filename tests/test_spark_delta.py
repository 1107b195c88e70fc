"""The loader's table is a Delta Lake table: one commit per run, recorded with Delta's
idempotent transaction id, read alike by Spark (Delta), the ``deltalake`` package (no
JVM) and the loader's own log reader, any earlier load readable by ``versionAsOf``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spark_loader_helpers import (
    SENDER_A,
    SENDER_B,
    canonical,
    partition_dirs,
    source_rows,
    table_rows,
    table_versions,
    two_senders,
)

from sealsync.config import LoaderConfig
from spark_loader import delta_commit, delta_log, run, run_load
from spark_loader.table_binding import loader_id

pytestmark = pytest.mark.slow  # Spark


def _load(config: LoaderConfig, spark: Any, **kwargs: Any) -> Any:
    return run_load(config, spark=spark, sync=False, **kwargs)


def _commit_actions(table: Any, version: int) -> list[dict[str, Any]]:
    path = Path(table) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_each_run_is_one_commit_with_the_runs_transaction_id(tmp_path: Path, spark: Any) -> None:
    edge, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)

    first = _load(config, spark)

    assert first.ok and first.notes == []
    assert table_versions(config.table_path) == [0]
    actions = _commit_actions(config.table_path, 0)
    # The loader's application id: the plain one and the id its state dir records.
    app_id = f"{delta_commit.APP_ID}-{loader_id(Path(config.state_dir))}"
    assert [(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a] == [
        (app_id, 0)
    ]
    adds = [a["add"] for a in actions if "add" in a]
    assert len(adds) == 4 and all(json.loads(a["stats"])["numRecords"] > 0 for a in adds)
    assert {tuple(sorted(a["partitionValues"])) for a in adds} == {
        ("file_id", "sender", "source_file")
    }

    assert _load(config, spark).unchanged == 4  # nothing new: no commit
    assert table_versions(config.table_path) == [0]

    gone = [rel for (sender, rel) in recv.placed if sender == SENDER_B][0]
    recv.remove(gone, SENDER_B)
    extra = edge.write_file("root.sg9", 0, devices=["root.sg9.d1"], rows_per_device=9)
    recv.place(edge, extra, SENDER_A)

    second = _load(config, spark, batch_files=1)  # two Spark jobs, still one commit

    assert (second.ingested, second.removed) == (1, 1)
    assert table_versions(config.table_path) == [0, 1]
    actions = _commit_actions(config.table_path, 1)
    assert [a["txn"]["version"] for a in actions if "txn" in a] == [1]
    assert len([a for a in actions if "add" in a]) == 1
    assert len([a for a in actions if "remove" in a]) == 1
    assert delta_log.read(config.table_path).transactions == {app_id: 1}
    assert table_rows(config.table_path) == source_rows(recv)


def test_spark_deltalake_and_time_travel_read_the_same_versions(tmp_path: Path, spark: Any) -> None:
    from deltalake import DeltaTable

    edge, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    _load(config, spark)
    first = table_rows(config.table_path)
    gone = [rel for (sender, rel) in recv.placed if sender == SENDER_A][0]
    recv.remove(gone, SENDER_A)
    _load(config, spark)
    second = table_rows(config.table_path)
    assert len(second) < len(first)
    path = str(config.table_path)

    for version, expected in ((0, first), (1, second)):
        df = spark.read.format("delta").option("versionAsOf", version).load(path)
        assert canonical([r.asDict() for r in df.collect()]) == expected
        rust = DeltaTable(path, version=version).to_pyarrow_table()
        assert canonical(rust.to_pylist()) == expected
        assert canonical(delta_log.read_arrow(path, version).to_pylist()) == expected
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert sorted((r.version, r.userMetadata) for r in history) == [
        (0, "sealsync load run 0: 4 files added, 0 removed"),
        (1, "sealsync load run 1: 0 files added, 1 removed"),
    ]
    assert spark.conf.get(delta_commit.USER_METADATA, None) is None  # the session's again
    assert partition_dirs(config.table_path, version=0) > partition_dirs(config.table_path)


def test_another_writer_s_commit_meanwhile_stays_and_a_conflicting_one_fails_the_run(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's transaction starts at the version it read, and Delta checks what was
    committed since: another writer's commit that touches none of the run's files
    stays beside the run's (the next run puts back rows the record has and the table
    lost); one that removes a file the run removes too fails the run in one line,
    nothing committed, and the rerun loads."""
    edge, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    _load(config, spark)
    extra = edge.write_file("root.sg9", 0, devices=["root.sg9.d1"], rows_per_device=9)
    recv.place(edge, extra, SENDER_A)
    real = run.discover
    path = str(config.table_path)

    def discover_then_someone_deletes(dirs: list[Path]) -> Any:
        spark.sql(f"DELETE FROM delta.`{path}` WHERE sender = '{SENDER_B}'")
        return real(dirs)

    monkeypatch.setattr(run, "discover", discover_then_someone_deletes)
    report = _load(config, spark)

    assert report.ok and report.ingested == 1
    assert table_versions(config.table_path) == [0, 1, 2]  # the DELETE, then the run's
    assert not {r[0] for r in table_rows(config.table_path)} & {SENDER_B}
    monkeypatch.undo()
    report = _load(config, spark)
    assert report.ok and report.ingested == 2  # sender B's two, recorded but gone
    assert report.notes == ["2 recorded files were missing from the table; ingesting them again"]
    assert table_rows(config.table_path) == source_rows(recv)

    gone = next(rel for (sender, rel) in recv.placed if sender == SENDER_B)
    recv.remove(gone, SENDER_B)  # the run removes its rows; the DELETE removes them too
    monkeypatch.setattr(run, "discover", discover_then_someone_deletes)
    with pytest.raises(delta_commit.CommitFailed, match="ConcurrentDeleteDelete"):
        _load(config, spark)
    monkeypatch.undo()
    assert table_versions(config.table_path) == [0, 1, 2, 3, 4]  # the second DELETE's

    report = _load(config, spark)

    assert report.ok and report.ingested == 1  # sender B's other file, again
    assert table_rows(config.table_path) == source_rows(recv)


def test_a_measurement_name_delta_refuses_plainly_is_escaped_and_the_protocol_stays(
    tmp_path: Path, spark: Any
) -> None:
    """IoTDB allows a space or a comma in a back-quoted measurement name, which a Delta
    column name without column mapping may not hold: the column is named with those
    characters escaped, its metadata names the measurement, and the table's protocol
    and configuration stay as they were (no column mapping for everyone's readers)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from spark_loader_helpers import Receiver

    from sealsync.simulator import EdgeInstance

    edge, recv = EdgeInstance(tmp_path / "edge"), Receiver(tmp_path)
    plain = pa.table(
        {
            "time": pa.array([1, 2], pa.int64()),
            "device": ["root.a.d1"] * 2,
            "s1": pa.array([1.0, 2.0]),
        }
    )
    recv.place(edge, edge.write_table(plain, "root.a", 0, fmt="parquet"))
    config = recv.config(tmp_path)
    assert _load(config, spark).ok
    before = delta_log.read(config.table_path)
    odd = pa.table(
        {"time": pa.array([3], pa.int64()), "device": ["root.a.d2"], "s 2,x": pa.array([7.5])}
    )
    recv.place(edge, edge.write_table(odd, "root.a", 1, fmt="parquet"))

    report = _load(config, spark)

    assert report.ok and report.ingested == 1, report.skipped
    after = delta_log.read(config.table_path)
    assert after.protocol == before.protocol
    meta = after.metadata
    assert meta is not None and "delta.columnMapping.mode" not in meta["configuration"]
    fields = {f["name"]: f for f in json.loads(meta["schemaString"])["fields"]}
    assert fields["s%202%2Cx"]["metadata"] == {
        "sealsync.measurement": "s 2,x",
        "sealsync.kind": "double",
    }
    rows = table_rows(config.table_path)
    assert rows == source_rows(recv)
    df = spark.read.format("delta").load(str(config.table_path))
    assert df.where("`s%202%2Cx` = 7.5").count() == 1
    assert (
        DeltaTable(str(config.table_path))
        .to_pyarrow_table()
        .column("s%202%2Cx")
        .to_pylist()
        .count(7.5)
        == 1
    )


def test_a_commit_of_the_same_loader_meanwhile_fails_the_run(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run reads its application's last run number from the log itself; Delta's
    conflict check still knows it read it: a commit of the same application id after
    the run's read version (a second process of the same loader) fails the run, nothing
    committed, and the next run starts from the table as it is then."""
    edge, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    _load(config, spark)
    app_id = f"{delta_commit.APP_ID}-{loader_id(Path(config.state_dir))}"
    extra = edge.write_file("root.sg9", 0, devices=["root.sg9.d1"], rows_per_device=9)
    recv.place(edge, extra, SENDER_A)
    real = run.discover
    location = config.table_path

    def discover_then_the_same_loader_commits(dirs: list[Path]) -> Any:
        found = real(dirs)
        delta_commit.commit(spark, location, [], None, 0, 1, app_id)
        return found

    monkeypatch.setattr(run, "discover", discover_then_the_same_loader_commits)
    with pytest.raises(delta_commit.CommitFailed, match="ConcurrentTransaction"):
        _load(config, spark)
    monkeypatch.undo()
    assert table_versions(config.table_path) == [0, 1]  # the other process's only

    report = _load(config, spark)

    assert report.ok and report.ingested == 1
    assert delta_log.read(config.table_path).transactions == {app_id: 2}
    assert table_rows(config.table_path) == source_rows(recv)
