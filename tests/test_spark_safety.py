"""The table loses rows only on evidence, end to end: real `sealsync serve`, `send` and
`load` processes, and the operator's mistakes (an empty data dir, a file removed by
hand, a sender retired) against a table Spark wrote."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from config_helpers import loader_config_file
from deploy_helpers import Deployment, populate
from spark_loader_helpers import (
    SENDER_A,
    SENDER_B,
    partition_dirs,
    source_rows,
    table_rows,
    two_senders,
)

from sealsync.config import LoaderConfig
from spark_loader import run_load
from spark_loader.removals import MissingFolder

pytestmark = pytest.mark.slow  # Spark, and sealsync processes


def _toml(path: Path, config: LoaderConfig, data_dirs: list[Path] | None = None) -> Path:
    return loader_config_file(path, config, data_dirs=data_dirs)


def _load(toml: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sealsync", "load", "--config", str(toml), *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def _errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.startswith("sealsync:")]


def test_the_receivers_deletions_remove_rows_and_an_empty_data_dir_removes_none(
    start_deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    dep = start_deployment()
    sender = dep.senders[0]
    names = populate(sender.edge, groups=2, files=2, devices=1, rows=20, unsequence=0)
    assert sender.send().returncode == 0
    config = LoaderConfig([dep.receiver_data], tmp_path / "table", tmp_path / "state")
    toml = _toml(tmp_path / "loader.toml", config)

    first = _load(toml, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["ingested"] == len(names)

    sender.edge.delete(names[0])  # the database drops a file; the round ships the deletion
    assert sender.send().returncode == 0
    second = _load(toml, "--json")
    assert second.returncode == 0, second.stderr
    doc = json.loads(second.stdout)
    assert (doc["removed"], doc["rows_removed"], doc["kept_missing"]) == (1, 20, 0)
    assert names[0] not in {r[1] for r in table_rows(config.table_path)}
    before = partition_dirs(config.table_path)
    rows = table_rows(config.table_path)
    assert len(before) == len(names) - 1

    empty = tmp_path / "typo"  # an existing folder with nothing in it (unmounted disk)
    empty.mkdir()
    wrong = _toml(tmp_path / "wrong.toml", config, [empty])
    result = _load(wrong)

    assert result.returncode == 1, result.stderr
    assert _errors(result) == [_errors(result)[0]] and str(empty) in _errors(result)[0]
    assert "nothing removed" in _errors(result)[0]
    assert result.stdout == ""
    assert partition_dirs(config.table_path) == before
    assert table_rows(config.table_path) == rows
    # The right config again: nothing to do, nothing lost.
    again = _load(toml, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["unchanged"] == len(names) - 1


def test_missing_without_evidence_is_kept_until_prune_missing(tmp_path: Path, spark: Any) -> None:
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    run_load(config, spark=spark, sync=False)
    toml = _toml(tmp_path / "loader.toml", config)
    all_rows = table_rows(config.table_path)
    a_rel = sorted(rel for (s, rel) in recv.placed if s == SENDER_A)[0]
    recv.remove_by_hand(a_rel)  # gone from the receiver, nothing logged

    kept = _load(toml)

    assert kept.returncode == 0, kept.stderr
    assert _errors(kept) == [
        "sealsync: kept the rows of 1 files missing from the receiver without a logged "
        f"deletion (such as {SENDER_A}:{a_rel}); if they were "
        "really removed, `sealsync load --prune-missing` takes their rows out"
    ]
    assert "kept 1 missing" in kept.stdout
    assert table_rows(config.table_path) == all_rows

    # Sender B retired by hand: its folders are gone. Without --prune-missing, B is held.
    b_paths = [p for (s, _), p in recv.placed.items() if s == SENDER_B]
    for rel in [rel for (s, rel) in recv.placed if s == SENDER_B]:
        recv.remove_by_hand(rel, SENDER_B)
    for path in b_paths:
        shutil.rmtree(path.parent, ignore_errors=True)
    refused = _load(toml)
    assert refused.returncode == 1
    held = [line for line in _errors(refused) if f"the files of sender {SENDER_B} wait" in line]
    assert len(held) == 1 and "has no loaded files left" in held[0], refused.stderr
    assert "the files of 1 senders wait" in refused.stdout
    assert table_rows(config.table_path) == all_rows

    pruned = _load(toml, "--prune-missing", "--json")

    assert pruned.returncode == 0, pruned.stderr
    doc = json.loads(pruned.stdout)
    assert (doc["removed"], doc["kept_missing"]) == (3, 0)
    assert any("--prune-missing" in note for note in doc["notes"])
    assert table_rows(config.table_path) == source_rows(recv)


def test_a_full_rebuild_keeps_what_an_incremental_run_keeps(tmp_path: Path, spark: Any) -> None:
    """--full decides removals like any run: a file missing without evidence keeps its
    rows (its partition is carried into the new table), an empty data dir stops it."""
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    run_load(config, spark=spark, sync=False)
    all_rows = table_rows(config.table_path)
    gone = sorted(rel for (s, rel) in recv.placed if s == SENDER_A)[0]
    recv.remove_by_hand(gone)

    report = run_load(config, spark=spark, sync=False, full=True)

    assert report.kept_missing == 1 and report.ingested == 3
    assert table_rows(config.table_path) == all_rows  # the missing file's rows are kept
    assert len(partition_dirs(config.table_path)) == 4

    before = partition_dirs(config.table_path)
    for entry in recv.data_dirs[0].iterdir():
        shutil.rmtree(entry)
    with pytest.raises(MissingFolder):
        run_load(config, spark=spark, sync=False, full=True)
    assert partition_dirs(config.table_path) == before
    assert table_rows(config.table_path) == all_rows
