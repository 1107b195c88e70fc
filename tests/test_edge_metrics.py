"""Per-edge metrics: the receiver's series per known sender, the sender's backlog
gauges, ``sealsync_build_info`` in every output, and a config that does not load
recorded in the history and the textfile as every other exit is."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from config_helpers import make_sender, sender_doc, write_config, write_sealed
from deploy_helpers import SEALSYNC
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from receiver.metrics import ReceiverMetrics
from sealsync import __version__
from sealsync.config import load_sender_config
from sealsync.errors import EXIT_USAGE
from sealsync.metrics import snapshot_registry, write_textfile
from sealsync.protocol import PROTOCOL_VERSION, Verdict
from sender.manage.history import FAILED, OK, Attempt, append_attempt, read_history
from sender.manage.layout import SchemaPaths
from sender.metrics import sender_families
from spark_loader.metrics import loader_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def receiver_samples(metrics: ReceiverMetrics) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    return parse(generate_latest(registry).decode())


A, B = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"


def test_receiver_counts_each_known_sender_apart() -> None:
    m = ReceiverMetrics()
    m.sender_accepted(A, "edge-a")
    m.sender_accepted(B, "edge\x1bb")
    for _ in range(3):
        m.received(100, A)
        m.verdict(Verdict.VERIFIED, A)
    m.received(7, B)
    m.verdict(Verdict.MISMATCH, B)
    m.refused("round_busy", B)
    before = time.time()
    m.round_ended("done", A)
    m.round_ended("abandoned", B)  # not a round that ended: no last-round time
    s = receiver_samples(m)

    def v(metric: str, sender: str, **labels: str) -> float:
        key = tuple(sorted({"sender": sender, **labels}.items()))
        return s[(f"sealsync_receiver_sender_{metric}", key)]

    assert v("files_received_total", A) == 3 and v("files_received_total", B) == 0
    assert v("bytes_received_total", A) == 300 and v("bytes_received_total", B) == 7
    assert before <= v("last_round_timestamp_seconds", A) <= time.time()
    assert v("last_round_timestamp_seconds", B) == 0
    assert v("refusals_total", B, kind="mismatch") == 1
    assert v("refusals_total", B, kind="round_busy") == 1
    assert v("refusals_total", A, kind="conflict") == 0  # every kind written from the start
    assert 0 <= v("newest_file_age_seconds", A) < 5
    assert ("sealsync_receiver_sender_newest_file_age_seconds", (("sender", B),)) not in s
    assert v("info", A, name="edge-a") == 1
    assert v("info", B, name="edge\\x1bb") == 1  # a name is escaped text, never raw
    # the receiver's own totals count both
    assert s[("sealsync_receiver_bytes_received_total", ())] == 307
    assert s[("sealsync_receiver_refusals_total", (("reason", "round_busy"),))] == 1


def test_receiver_series_are_bounded_by_the_senders_it_accepted() -> None:
    m = ReceiverMetrics()
    for i in range(50):  # events naming UUIDs no HELLO made known
        uuid = f"{i:08d}-0000-0000-0000-000000000000"
        m.received(1, uuid)
        m.verdict(Verdict.VERIFIED, uuid)
        m.refused("round_busy", uuid)
        m.round_ended("done", uuid)
    m.sender_accepted(A, "one")
    m.sender_accepted(A, "renamed")  # the same sender again: still one series
    s = receiver_samples(m)
    senders = {dict(labels).get("sender") for (name, labels) in s if "_sender_" in name}
    assert senders == {A}
    assert [dict(k)["name"] for n, k in s if n == "sealsync_receiver_sender_info"] == ["renamed"]
    assert s[("sealsync_receiver_files_received_total", ())] == 50


def test_newest_file_age_is_measured_on_the_monotonic_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = ReceiverMetrics()
    m.sender_accepted(A, "a")
    m.verdict(Verdict.VERIFIED, A)
    monkeypatch.setattr(time, "time", lambda: 0.0)  # the wall clock steps back decades
    age = receiver_samples(m)[
        ("sealsync_receiver_sender_newest_file_age_seconds", (("sender", A),))
    ]
    assert 0 <= age < 5


def build_info(s: Samples) -> dict[str, str]:
    [labels] = [dict(k) for n, k in s if n == "sealsync_build_info"]
    return labels


def test_build_info_in_every_output(tmp_path: Path) -> None:
    receiver = build_info(receiver_samples(ReceiverMetrics()))
    assert receiver["role"] == "receiver"
    assert receiver["version"] == __version__
    assert receiver["protocol"] == str(PROTOCOL_VERSION)
    assert receiver["python"].count(".") == 2
    config = load_sender_config(make_sender(tmp_path))
    sender = parse(generate_latest(snapshot_registry(sender_families(config))).decode())
    assert build_info(sender) == {**receiver, "role": "sender"}
    loader = parse(generate_latest(snapshot_registry(loader_families(None))).decode())
    assert build_info(loader) == {**receiver, "role": "loader"}


def test_sender_textfile_says_what_is_pending(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["receiver"].append({"name": "dc2", "host": "127.0.0.1", "port": 5556})
    config = load_sender_config(make_sender(tmp_path, doc))
    data = config.data_dirs[0]
    for name in ("a-1-0-0.tsfile", "b-2-0-0.tsfile"):
        write_sealed(data, f"sequence/root.sg/0/0/{name}")
    write_sealed(data, "sequence/root.sg/0/0/c-3-0-0.tsfile", sealed=False)  # not yet
    old = time.time() - 3600
    os.utime(data / "sequence/root.sg/0/0/a-1-0-0.tsfile", (old, old))
    size = sum(
        (data / "sequence/root.sg/0/0" / n).stat().st_size
        for n in ("a-1-0-0.tsfile", "b-2-0-0.tsfile")
    )
    out = tmp_path / "sender.prom"
    write_textfile(out, snapshot_registry(sender_families(config)))
    s = parse(out.read_text())
    for receiver in ("dc1", "dc2"):
        key = (("receiver", receiver),)
        assert s[("sealsync_sender_pending_files", key)] == 2
        assert s[("sealsync_sender_pending_bytes", key)] == size
        assert 3600 <= s[("sealsync_sender_oldest_pending_age_seconds", key)] < 3700
    # nothing written by planning it
    assert not (data / "sync-sender").exists()


def test_sender_with_nothing_pending_reports_zeros(tmp_path: Path) -> None:
    config = load_sender_config(make_sender(tmp_path))
    s = parse(generate_latest(snapshot_registry(sender_families(config))).decode())
    key = (("receiver", "dc1"),)
    assert s[("sealsync_sender_pending_files", key)] == 0
    assert s[("sealsync_sender_oldest_pending_age_seconds", key)] == 0


def _send(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, "send", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_a_config_that_does_not_load_is_recorded_as_an_attempt(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["sender"]["metrics_textfile"] = "prom/sender.prom"
    doc["receiver"].append({"name": "never", "host": "127.0.0.1", "port": 5556})
    (tmp_path / "prom").mkdir()
    path = make_sender(tmp_path, doc)
    config = load_sender_config(path)
    dc1 = SchemaPaths(config.schema_dir, "127.0.0.1", 5555)
    append_attempt(dc1, Attempt("dc1", "127.0.0.1:5555", 1.0, 2.0, OK, new=3, bytes=30))
    doc["sender"]["max_retrys"] = 5  # a typo: the config does not load
    write_config(path, doc)

    result = _send(path, "--json", "-q")
    assert result.returncode == EXIT_USAGE
    assert "max_retrys" in result.stderr and len(result.stderr.splitlines()) == 1
    assert json.loads(result.stdout)["exit_code"] == EXIT_USAGE
    last = read_history(dc1)[-1]
    assert last["outcome"] == FAILED and last["kind"] == "config"
    assert "max_retrys" in last["error"]
    assert last["totals"]["new"] == 3  # the running totals go on
    # a receiver without a history gets none from a config that does not load
    assert not SchemaPaths(config.schema_dir, "127.0.0.1", 5556).folder.exists()
    s = parse((tmp_path / "prom/sender.prom").read_text())
    key = (("kind", "config"), ("receiver", "dc1"))
    assert s[("sealsync_sender_failures_total", key)] == 1
    assert s[("sealsync_sender_last_attempt_success", (("receiver", "dc1"),))] == 0
    assert build_info(s)["role"] == "sender"

    # a private key others can read, a malformed known_hosts: recorded the same way
    write_config(
        path, {**doc, "sender": {k: v for k, v in doc["sender"].items() if k != "max_retrys"}}
    )
    (tmp_path / "keys/edge").chmod(0o644)
    result = _send(path)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert read_history(dc1)[-1]["kind"] == "config"
    assert "keys/edge" in read_history(dc1)[-1]["error"]
    (tmp_path / "keys/edge").chmod(0o600)
    (tmp_path / "keys/known_hosts").write_text("not a known_hosts line\n")
    assert _send(path).returncode == EXIT_USAGE
    assert "known_hosts" in read_history(dc1)[-1]["error"]
    s = parse((tmp_path / "prom/sender.prom").read_text())
    assert s[("sealsync_sender_failures_total", key)] == 3
    doc["sender"]["max_retrys"] = 5

    # --dry-run records nothing; a config too broken to name a schema dir records nothing
    write_config(path, doc)
    _send(path, "--dry-run")
    assert len(read_history(dc1)) == 4
    path.write_text("[sender\n")
    assert _send(path).returncode == EXIT_USAGE
    assert len(read_history(dc1)) == 4


def test_known_senders_have_series_from_the_start_and_retired_ones_lose_them() -> None:
    m = ReceiverMetrics()
    known = [A, B]
    m.known_senders = lambda: known
    m.sender_accepted(A, "edge-a")
    m.verdict(Verdict.VERIFIED, A)
    s = receiver_samples(m)
    # B has not connected since the start: its series are there, at zero
    assert s[("sealsync_receiver_sender_files_received_total", (("sender", B),))] == 0
    assert s[("sealsync_receiver_sender_last_round_timestamp_seconds", (("sender", B),))] == 0
    assert s[("sealsync_receiver_sender_files_received_total", (("sender", A),))] == 1
    known = [B]  # A retired (sealsync senders retire)
    s = receiver_samples(m)
    senders = {dict(labels).get("sender") for (name, labels) in s if "_sender_" in name}
    assert senders == {B}
    m.verdict(Verdict.VERIFIED, A)  # a late event of the retired sender adds no series
    assert ("sealsync_receiver_sender_files_received_total", (("sender", A),)) not in (
        receiver_samples(m)
    )

    def unreadable() -> list[str]:
        raise OSError(5, "Input/output error")

    m.known_senders = unreadable  # the series the receiver has stay
    assert ("sealsync_receiver_sender_info", (("name", ""), ("sender", B))) in receiver_samples(m)
