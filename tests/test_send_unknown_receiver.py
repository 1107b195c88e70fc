"""``sealsync send --receiver NAME`` with a name the config does not have: exit 2 and
one line naming the receivers it has, recorded (kind ``config``) in the history and
the textfile of each receiver the config names that has a history, as every other
exit is; ``--dry-run`` records nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from config_helpers import make_sender, sender_doc
from deploy_helpers import SEALSYNC
from prometheus_client.parser import text_string_to_metric_families

from sealsync.config import load_sender_config
from sealsync.errors import EXIT_USAGE
from sender.manage.history import FAILED, OK, Attempt, append_attempt, read_history
from sender.manage.layout import SchemaPaths


def _send(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, "send", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def failures(textfile: Path) -> dict[tuple[str, str], float]:
    return {
        (s.labels["kind"], s.labels["receiver"]): s.value
        for family in text_string_to_metric_families(textfile.read_text())
        for s in family.samples
        if s.name == "sealsync_sender_failures_total"
    }


@pytest.mark.slow  # sealsync send as a process
def test_an_unknown_receiver_name_is_recorded_like_every_exit(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["sender"]["metrics_textfile"] = "prom/sender.prom"
    (tmp_path / "prom").mkdir()
    path = make_sender(tmp_path, doc)
    config = load_sender_config(path)
    dc1 = SchemaPaths(config.schema_dir, "127.0.0.1", 5555)
    append_attempt(dc1, Attempt("dc1", "127.0.0.1:5555", 1.0, 2.0, OK, new=3, bytes=30))

    result = _send(path, "--receiver", "dc9")
    assert result.returncode == EXIT_USAGE
    line = f"{config.source}: no [[receiver]] named 'dc9' (known: dc1)"
    assert result.stderr == f"sealsync: error: {line}\n"
    last = read_history(dc1)[-1]
    assert (last["outcome"], last["kind"], last["error"]) == (FAILED, "config", line)
    assert last["totals"]["new"] == 3  # the running totals go on
    assert failures(tmp_path / "prom/sender.prom")[("config", "dc1")] == 1

    dry = _send(path, "--receiver", "dc9", "--dry-run")
    assert dry.returncode == EXIT_USAGE
    assert len(read_history(dc1)) == 2
