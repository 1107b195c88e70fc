"""Loader status and metrics: every run recorded in last_run.json, failed ones too,
shown by `sealsync status` and written to the metrics textfile."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from config_helpers import loader_config_file
from prometheus_client.parser import text_string_to_metric_families
from spark_loader_helpers import SENDER_A, Receiver, two_senders

from sealsync.config import load_loader_config
from spark_loader import lastrun, run_load
from spark_loader.discovery import discover
from spark_loader.removals import MissingFolder
from spark_loader.state import FileRecord, IngestState, save_state


def samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, labels) -> value, parsed with prometheus_client's own parser."""
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _toml(
    tmp_path: Path, recv: Receiver, data_dirs: list[Path] | None = None, name: str = "loader"
) -> Path:
    return loader_config_file(
        tmp_path / f"{name}.toml",
        recv.config(tmp_path),
        data_dirs=data_dirs,
        metrics_textfile=tmp_path / "loader.prom",
    )


def test_a_run_with_nothing_to_do_and_a_failed_one_are_both_recorded(tmp_path: Path) -> None:
    """No Spark needed: the listing and the evidence check come first."""
    _, recv = two_senders(tmp_path)
    config = load_loader_config(_toml(tmp_path, recv))
    # the state of a table that holds those files (rows 0: no partition needed)
    state = IngestState()
    for f in discover(recv.data_dirs).files:
        state.files[f.file_id] = FileRecord(
            f.sender, f.name, f.size, f.mtime_ns, 0, str(f.data_dir)
        )
    config.state_dir.mkdir()
    save_state(config.state_dir, state)
    prom = tmp_path / "loader.prom"

    report = run_load(config)  # nothing new: no Spark started

    assert report.ok and report.unchanged == 4
    first = lastrun.read(config.state_dir)
    assert first is not None and first["outcome"] == "ok" and first["table_files"] == 4
    m = samples(prom)
    assert m[("sealsync_loader_last_attempt_success", ())] == 1
    assert m[("sealsync_loader_last_success_timestamp_seconds", ())] == first["end"]
    assert m[("sealsync_loader_attempts_total", (("outcome", "ok"),))] == 1
    assert m[("sealsync_loader_failures_total", (("kind", "missing_folder"),))] == 0
    assert m[("sealsync_loader_table_files", ())] == 4

    for entry in recv.data_dirs[0].iterdir():  # the disk is not mounted
        shutil.rmtree(entry)
    with pytest.raises(MissingFolder):
        run_load(config)

    second = lastrun.read(config.state_dir)
    assert second is not None and second["outcome"] == "failed"
    assert second["kind"] == "missing_folder" and "hold no loaded files" in second["error"]
    assert second["last_success"] == first["end"] and second["end"] >= first["end"]
    m = samples(prom)
    assert m[("sealsync_loader_last_attempt_success", ())] == 0
    assert m[("sealsync_loader_last_attempt_timestamp_seconds", ())] == second["end"]
    assert m[("sealsync_loader_last_success_timestamp_seconds", ())] == first["end"]
    assert m[("sealsync_loader_attempts_total", (("outcome", "failed"),))] == 1
    assert m[("sealsync_loader_attempts_total", (("outcome", "ok"),))] == 1
    assert m[("sealsync_loader_failures_total", (("kind", "missing_folder"),))] == 1


def test_status_of_a_loader_never_run(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sealsync.app.cli import cli

    _, recv = two_senders(tmp_path)
    result = CliRunner().invoke(cli, ["status", "--config", str(_toml(tmp_path, recv))])

    assert result.exit_code == 0, result.output
    assert "  last run:     never" in result.stdout
    assert "  pending:      4 new files to ingest, 0 in the table" in result.stdout
    assert "  table:        0 files, 0 rows" in result.stdout


@pytest.mark.slow  # Spark, and sealsync processes
def test_status_and_metrics_after_real_runs(tmp_path: Path) -> None:
    edge, recv = two_senders(tmp_path)
    toml = _toml(tmp_path, recv)
    prom = tmp_path / "loader.prom"

    def sealsync(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sealsync", *args],
            capture_output=True,
            text=True,
            timeout=600,
        )

    assert sealsync("load", "--config", str(toml)).returncode == 0
    extra = edge.write_file("root.sg9", 0, devices=["root.sg9.d1"], rows_per_device=9)
    recv.place(edge, extra, SENDER_A)

    status = sealsync("status", "--config", str(toml), "--json")
    doc = json.loads(status.stdout)
    assert doc["last_run"]["outcome"] == "ok" and doc["last_run"]["ingested"] == 4
    assert doc["last_run"]["rows_written"] == 155
    assert doc["pending"] == {"new_files": 1, "missing_files": 0}
    assert doc["table"] == {"files": 4, "rows": 155}
    good = doc["last_success"]
    m = samples(prom)
    assert m[("sealsync_loader_rows_ingested_total", ())] == 155
    assert m[("sealsync_loader_last_attempt_rows_written", ())] == 155
    assert m[("sealsync_loader_table_rows", ())] == 155
    assert m[("sealsync_loader_last_attempt_duration_seconds", ())] > 0

    empty = tmp_path / "typo"
    empty.mkdir()
    failed = sealsync("load", "--config", str(_toml(tmp_path, recv, [empty], "wrong")))
    assert failed.returncode == 1

    lines = sealsync("status", "--config", str(toml)).stdout.splitlines()
    assert lines[1].startswith("  last run:") and " failed: the receiver data dirs" in lines[1]
    assert lines[3] == f"  last success: {good}"
    assert (
        lines[4]
        == "  pending:      1 new files to ingest, 0 in the table but missing from the receiver"
    )
    assert lines[5] == "  table:        4 files, 155 rows"
    m = samples(prom)
    assert m[("sealsync_loader_last_attempt_success", ())] == 0
    assert m[("sealsync_loader_failures_total", (("kind", "missing_folder"),))] == 1
    assert m[("sealsync_loader_rows_ingested_total", ())] == 155  # a counter never goes back

    assert sealsync("load", "--config", str(toml)).returncode == 0
    m = samples(prom)
    assert m[("sealsync_loader_rows_ingested_total", ())] == 155 + 9
    assert m[("sealsync_loader_attempts_total", (("outcome", "ok"),))] == 2
    assert m[("sealsync_loader_last_attempt_success", ())] == 1


def test_an_interrupted_run_is_recorded_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_loader import run

    _, recv = two_senders(tmp_path)
    config = load_loader_config(_toml(tmp_path, recv))

    def ctrl_c(dirs: list[Path]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "discover", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_load(config)

    last = lastrun.read(config.state_dir)
    assert last is not None and last["outcome"] == "interrupted"
    m = samples(tmp_path / "loader.prom")
    assert m[("sealsync_loader_attempts_total", (("outcome", "interrupted"),))] == 1
    assert m[("sealsync_loader_last_success_timestamp_seconds", ())] == 0


def test_the_example_alerts_use_metrics_the_loader_writes() -> None:
    import re

    from spark_loader.metrics import loader_families

    written = {f.name for f in loader_families(None)}
    rules = (Path(__file__).resolve().parent.parent / "examples/alerts.yml").read_text()
    used = set(re.findall(r"\b(sealsync_loader_[a-z_]+)", rules))
    assert "sealsync_loader_last_success_timestamp_seconds" in used
    # prometheus_client names a counter family without its _total suffix
    assert used <= written | {f"{n}_total" for n in written}, used - written
