"""The receiver's per-sender series across its restarts (receiver/last_seen.py): the
name, the last round's end and the newest file's age come back from the record a
round wrote; a sender never recorded is dated by its round folders; a damaged record
is ignored with one warning; the edge's textfile carries the sender UUID to join on."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest
from config_helpers import make_sender
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from receiver.last_seen import RECORD, LastSeen, Seen
from receiver.metrics import ReceiverMetrics
from sealsync.config import load_sender_config
from sealsync.metrics import snapshot_registry
from sealsync.protocol import Verdict
from sender.manage.identity import sender_uuid
from sender.metrics import sender_families

A, B = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"


def metrics_over(schema: Path, data: Path, known: list[str]) -> ReceiverMetrics:
    m = ReceiverMetrics()
    m.remember_senders(schema, [data])
    m.known_senders = lambda: known
    return m


def test_a_restarted_receiver_shows_each_senders_name_and_times(tmp_path: Path) -> None:
    schema, data = tmp_path / "schema", tmp_path / "data"
    schema.mkdir(), data.mkdir()
    first = metrics_over(schema, data, [A, B])
    first.sender_accepted(A, "plant-1")
    first.verdict(Verdict.VERIFIED, A)
    before = time.time()
    first.round_ended("done", A)
    ended = first.snapshot()["senders"][A]["last_round"]
    assert before <= ended <= time.time()
    record = json.loads((schema / "sync/senders" / A / RECORD).read_text())
    assert record["name"] == "plant-1" and record["last_round"] == ended
    assert not (schema / "sync/senders" / B).exists()  # no round, no record

    time.sleep(0.2)
    again = metrics_over(schema, data, [A, B]).snapshot()["senders"]
    assert again[A]["name"] == "plant-1"
    assert again[A]["last_round"] == ended
    assert again[A]["files"] == 0  # counters start again
    assert 0.2 <= again[A]["newest_file_age"] < 30
    assert again[B] == {**again[B], "name": "", "last_round": 0.0, "newest_file_age": None}


def test_a_hello_after_the_restart_keeps_the_recorded_times(tmp_path: Path) -> None:
    schema = tmp_path / "schema"
    LastSeen(schema).write(A, Seen("old-name", 1_700_000_000.0, 1_699_999_990.0))
    m = metrics_over(schema, tmp_path / "data", [A])
    m.sender_accepted(A, "new-name")  # before any scrape
    s = m.snapshot()["senders"][A]
    assert (s["name"], s["last_round"]) == ("new-name", 1_700_000_000.0)
    assert s["newest_file_age"] >= time.time() - 1_699_999_990.0 - 1


def test_a_sender_never_recorded_is_dated_by_its_round_folders(tmp_path: Path) -> None:
    schema, data = tmp_path / "schema", tmp_path / "data"
    folder = data / "sync-receiver" / f"10.0.0.7_{A}"
    folder.mkdir(parents=True)
    os.utime(folder, (1_700_000_123, 1_700_000_123))
    s = metrics_over(schema, data, [A, B]).snapshot()["senders"]
    assert s[A]["last_round"] == 1_700_000_123
    assert s[B]["last_round"] == 0


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        json.dumps({"version": 2, "name": "x", "last_round": 1, "newest_file": None}).encode(),
        json.dumps({"version": 1, "name": "x", "last_round": -5, "newest_file": None}).encode(),
        json.dumps({"version": 1, "name": 7, "last_round": 1, "newest_file": None}).encode(),
        json.dumps({"version": 1, "name": "x", "last_round": True, "newest_file": None}).encode(),
        b" " * 5000,
    ],
)
def test_a_damaged_record_is_ignored_with_one_warning(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    seen = LastSeen(tmp_path / "schema", [tmp_path / "data"])
    seen.path(A).parent.mkdir(parents=True)
    seen.path(A).write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert seen.read(A) == Seen()
        assert seen.read(A) == Seen()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(seen.path(A)) in warnings[0]


def test_a_malformed_uuid_in_the_key_bindings_gets_empty_series(tmp_path: Path) -> None:
    m = metrics_over(tmp_path / "schema", tmp_path / "data", [A, "../../etc"])
    s = m.snapshot()["senders"]
    assert s["../../etc"]["last_round"] == 0 and s[A]["last_round"] == 0
    assert not (tmp_path / "etc").exists()


def test_a_record_is_not_written_through_a_link(tmp_path: Path) -> None:
    schema, elsewhere = tmp_path / "schema", tmp_path / "elsewhere"
    (schema / "sync").mkdir(parents=True)
    elsewhere.mkdir()
    (schema / "sync/senders").symlink_to(elsewhere)
    m = metrics_over(schema, tmp_path / "data", [A])
    m.sender_accepted(A, "x")
    m.round_ended("done", A)  # the round is not failed for it
    assert list(elsewhere.iterdir()) == []
    assert m.snapshot()["senders"][A]["last_round"] > 0


def test_a_retired_sender_loses_its_series_and_its_record_stays(tmp_path: Path) -> None:
    schema = tmp_path / "schema"
    known = [A]
    m = metrics_over(schema, tmp_path / "data", known)
    m.sender_accepted(A, "a")
    m.round_ended("done", A)
    known.clear()
    assert m.snapshot()["senders"] == {}
    assert (schema / "sync/senders" / A / RECORD).exists()


def _labels(text: str) -> list[dict[str, str]]:
    return [
        s.labels
        for f in text_string_to_metric_families(text)
        if f.name.startswith("sealsync_sender_")
        for s in f.samples
    ]


def test_the_edge_textfile_carries_the_sender_uuid_once_it_has_one(tmp_path: Path) -> None:
    config = load_sender_config(make_sender(tmp_path))
    before = _labels(generate_latest(snapshot_registry(sender_families(config))).decode())
    assert before and all("sender" not in labels for labels in before)
    assert not (config.schema_dir / "sync/uuid.txt").exists()  # the metrics made none
    uuid = sender_uuid(config.schema_dir)
    after = _labels(generate_latest(snapshot_registry(sender_families(config))).decode())
    assert len(after) == len(before)
    assert {labels["sender"] for labels in after} == {uuid}
