"""The sender in an operator's hands (issue 14): every attempt recorded and shown,
metrics for node_exporter, quiet under cron, SIGTERM, errors that name the cause.

Each test runs ``sealsync serve`` and ``sealsync send``/``status`` as real processes
over loopback SSH, reproduces the mistake or failure an operator meets, and checks
what the sender says (exit code, one line), records (``rounds.jsonl``) and exports
(the metrics textfile, parsed with prometheus_client's own parser).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from config_helpers import held_elsewhere
from deploy_helpers import SEALSYNC, Deployment, Sender, make_deployment, populate
from prometheus_client.parser import text_string_to_metric_families
from reliability.faultproxy import STALL, UP, Fault, FaultProxy

from sender.manage.history import read_history
from sender.manage.layout import SchemaPaths, SenderPaths

pytestmark = pytest.mark.slow


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def with_metrics(sender: Sender, port: int | None = None) -> Path:
    """Add ``metrics_textfile`` to the sender's config; returns the textfile's path."""
    path = sender.config.parent / f"{sender.name}.prom"
    text = sender.config.read_text()
    text = text.replace("max_retries = 3\n", f'max_retries = 3\nmetrics_textfile = "{path}"\n')
    sender.config.write_text(text)
    return path


def metrics(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the textfile, by name and labels (prometheus_client's parser)."""
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    # every series of the edge carries its one sender UUID, once it has one
    (uuid,) = {dict(k).get("sender") for n, k in samples if n.startswith("sealsync_sender_")}
    own = {"sender": uuid} if uuid is not None else {}
    key = (name, tuple(sorted({"receiver": "dc", **own, **labels}.items())))
    assert key in samples, (key, sorted(samples))
    return samples[key]


def history(sender: Sender, port: int) -> list[dict[str, Any]]:
    return read_history(SchemaPaths(sender.edge.schema_dir, "127.0.0.1", port))


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sealsync: error: "), lines[0]
    return lines[0].removeprefix("sealsync: error: ")


@pytest.fixture
def dep(tmp_path: Path) -> Iterator[Deployment]:
    d = make_deployment(tmp_path / "site", senders=1)
    yield d
    d.stop_receiver()


# ---------------------------------------------------------------- every attempt recorded


def test_failed_attempts_are_recorded_shown_and_exported(dep: Deployment) -> None:
    sender = dep.senders[0]
    prom = with_metrics(sender)
    names = populate(sender.edge, groups=1, files=2)

    # receiver down: one JSON document all the same, the attempt recorded as failed
    result = sender.send("--json")
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    line = one_error_line(result)
    assert line == (
        f"cannot connect to receiver 127.0.0.1:{dep.port}: Connection refused (nothing listens "
        "there: is the receiver running, and are the [[receiver]] host and port right?)"
    )
    assert doc["ok"] is False and doc["exit_code"] == 1 and doc["errors"] == [line]
    (attempt,) = doc["attempts"]
    assert (attempt["outcome"], attempt["kind"], attempt["error"]) == (
        "failed",
        "unreachable",
        line,
    )
    (entry,) = history(sender, dep.port)
    assert (entry["outcome"], entry["error"], entry["last_success"]) == ("failed", line, None)
    status = cli("status", "--config", str(sender.config))
    assert status.returncode == 0, status.stderr
    assert f"  last attempt: {time_of(entry['end'])} failed: {line}\n" in status.stdout
    assert "  last success: never\n" in status.stdout
    samples = metrics(prom)
    assert value(samples, "sealsync_sender_last_success_timestamp_seconds") == 0
    assert value(samples, "sealsync_sender_last_attempt_timestamp_seconds") == entry["end"]
    assert value(samples, "sealsync_sender_last_attempt_success") == 0
    assert value(samples, "sealsync_sender_failures_total", kind="unreachable") == 1
    assert value(samples, "sealsync_sender_attempts_total", outcome="failed") == 1
    assert value(samples, "sealsync_sender_shipped_files_total") == 0

    # receiver up: a good round, and an idle one that says nothing under cron
    dep.start_receiver()
    result = sender.send()
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert f": ok: shipped {len(names)} files" in result.stdout
    good = history(sender, dep.port)[-1]
    assert good["outcome"] == "ok" and good["new"] == len(names) and good["bytes"] > 0
    samples = metrics(prom)
    assert value(samples, "sealsync_sender_last_success_timestamp_seconds") == good["end"]
    assert value(samples, "sealsync_sender_last_attempt_success") == 1
    assert value(samples, "sealsync_sender_last_attempt_shipped_files") == len(names)
    assert value(samples, "sealsync_sender_last_attempt_shipped_bytes") == good["bytes"]
    assert value(samples, "sealsync_sender_shipped_files_total") == len(names)
    assert value(samples, "sealsync_sender_shipped_bytes_total") == good["bytes"]
    assert value(samples, "sealsync_sender_attempts_total", outcome="ok") == 1
    assert value(samples, "sealsync_sender_last_attempt_duration_seconds") == pytest.approx(
        good["end"] - good["start"]
    )

    idle = sender.send()
    assert (idle.returncode, idle.stdout, idle.stderr) == (0, "", "")
    assert value(metrics(prom), "sealsync_sender_attempts_total", outcome="ok") == 2
    last_success = history(sender, dep.port)[-1]["end"]

    # down again: the last attempt failed, the last success is still the earlier one
    dep.stop_receiver()
    assert sender.send().returncode == 1
    failed = history(sender, dep.port)[-1]
    assert failed["outcome"] == "failed" and failed["last_success"] == last_success
    doc = json.loads(cli("status", "--config", str(sender.config), "--json").stdout)
    receiver = doc["receivers"][0]
    assert receiver["last_attempt"]["outcome"] == "failed"
    assert receiver["last_attempt"]["kind"] == "unreachable"
    assert receiver["last_success"] == time_of(last_success)
    samples = metrics(prom)
    assert value(samples, "sealsync_sender_last_success_timestamp_seconds") == last_success
    assert value(samples, "sealsync_sender_last_attempt_timestamp_seconds") == failed["end"]
    assert value(samples, "sealsync_sender_last_attempt_success") == 0
    assert value(samples, "sealsync_sender_last_attempt_shipped_files") == 0
    assert value(samples, "sealsync_sender_shipped_files_total") == len(names)  # a counter
    assert value(samples, "sealsync_sender_failures_total", kind="unreachable") == 2
    assert [e["outcome"] for e in history(sender, dep.port)] == ["failed", "ok", "ok", "failed"]


def time_of(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


def test_a_run_refused_by_the_lock_is_recorded_as_busy(dep: Deployment) -> None:
    sender = dep.senders[0]
    prom = with_metrics(sender)
    lock = SchemaPaths(sender.edge.schema_dir, "127.0.0.1", dep.port).lock
    with held_elsewhere(lock):
        result = sender.send("--json")
    assert result.returncode == 75
    assert one_error_line(result).startswith("another sender holds the lock for 127.0.0.1:")
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 75 and doc["attempts"][0]["outcome"] == "busy"
    assert history(sender, dep.port)[-1]["outcome"] == "busy"
    assert value(metrics(prom), "sealsync_sender_attempts_total", outcome="busy") == 1


def test_a_round_that_leaves_files_unsynced_is_a_failed_attempt(dep: Deployment) -> None:
    sender = dep.senders[0]
    prom = with_metrics(sender)
    dep.start_receiver()
    # a sealed file that is not a TsFile: the receiver refuses it
    bad = "sequence/root.sg0/0/1-1-0-0.tsfile"
    path = sender.edge.data_dirs[0] / bad
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a tsfile at all")
    path.with_name(path.name + ".resource").write_bytes(b"")
    result = sender.send()
    assert result.returncode == 1
    entry = history(sender, dep.port)[-1]
    assert (entry["outcome"], entry["kind"], entry["refused"]) == ("failed", "incomplete", 1)
    assert entry["error"].startswith(f"refused {bad}: ")
    samples = metrics(prom)
    assert value(samples, "sealsync_sender_failures_total", kind="incomplete") == 1
    assert value(samples, "sealsync_sender_last_attempt_refused_files") == 1
    assert value(samples, "sealsync_sender_refused_files_total") == 1


# ---------------------------------------------------------------- signals


STALL_SECONDS = 10.0
"""How long the link hangs: the signal arrives in this time, and the receiver's side of
the connection ends after it."""


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [
        (signal.SIGTERM, 143, "sealsync: interrupted by SIGTERM\n"),
        (signal.SIGINT, 130, "sealsync: interrupted\n"),
    ],
)
def test_a_signal_mid_round_stops_cleanly_and_the_next_run_recovers(
    dep: Deployment, sig: int, code: int, line: str
) -> None:
    dep.start_receiver()
    with FaultProxy(dep.port) as proxy:
        sender = proxied(dep, proxy, dep.senders[0])
        prom = with_metrics(sender)
        names = populate(sender.edge, groups=2, files=3, rows=20000)
        proxy.plan(Fault(UP, 200_000, STALL, seconds=STALL_SECONDS))  # the link hangs mid-file
        proc = subprocess.Popen(
            [*SEALSYNC, "send", "--config", str(sender.config), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        state = SenderPaths(sender.edge.data_dirs[0], "127.0.0.1", proxy.port)
        deadline = time.monotonic() + 60
        while not (proxy.fired_since(0) and state.sync_log.exists()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == code
        assert err == line
        doc = json.loads(out)
        assert doc["exit_code"] == code and doc["attempts"][0]["outcome"] == "interrupted"
        entry = history(sender, proxy.port)[-1]
        assert entry["outcome"] == "interrupted"
        assert entry["error"] == f"interrupted by {signal.Signals(sig).name}"
        assert value(metrics(prom), "sealsync_sender_attempts_total", outcome="interrupted") == 1
        # the round cleaned up as on any error; the next run ships exactly the rest
        assert not state.snapshot.exists() and not state.sync_log.exists()
        assert proxy.wait_closed(STALL_SECONDS + 30)  # the receiver's session ends too
        result = sender.send()
        assert result.returncode == 0, result.stderr
        assert dep.loaded_hashes(sender) == sender.sealed_hashes()
        assert set(sender.sealed_hashes()) == set(names)
        assert dep.round_state_left() == []


def proxied(dep: Deployment, proxy: FaultProxy, sender: Sender) -> Sender:
    """The sender's config, pointed at the proxy, the receiver's host key pinned there."""
    keys = dep.root / "keys"
    kind, b64 = (keys / "host.pub").read_text().split()[:2]
    known = keys / "known_hosts_proxy"
    known.write_text(f"[127.0.0.1]:{proxy.port} {kind} {b64}\n")
    text = sender.config.read_text().replace(f"port = {dep.port}", f"port = {proxy.port}")
    config = sender.config.with_name(f"{sender.name}-proxy.toml")
    config.write_text(text.replace(str(keys / "known_hosts"), str(known)))
    return Sender(sender.name, sender.edge, config)


# ---------------------------------------------------------------- errors that name the cause


def test_an_address_outside_the_allow_list_is_named_as_the_likely_cause(
    dep: Deployment,
) -> None:
    text = dep.receiver_config.read_text()
    dep.receiver_config.write_text(text.replace('["127.0.0.0/8"]', '["10.0.0.0/8"]'))
    dep.start_receiver()
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=1)
    result = sender.send()
    assert result.returncode == 1 and result.stdout == ""
    assert one_error_line(result) == (
        f"the receiver at 127.0.0.1:{dep.port} closed the connection before the SSH banner: "
        "this sender's address may not be in its allow list, or the port is not a sealsync "
        "receiver"
    )
    assert "not in the allow list" in dep.log()  # the receiver's side of the story
    assert history(sender, dep.port)[-1]["kind"] == "unreachable"


@contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """Make ``folder`` refuse writes for the sender, the way it happens in operation.

    Not root: its mode (Permission denied). Root ignores modes, so a read-only bind
    mount of it (Read-only file system); where mounting is not permitted either (a
    container without CAP_SYS_ADMIN), the sender's state folder inside it is a file
    (Not a directory): each is a real refusal from the kernel.
    """
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(mode)
        return
    bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if bind.returncode == 0:
        try:
            remount = ["mount", "-o", "remount,ro,bind", str(folder)]
            subprocess.run(remount, check=True, capture_output=True)
            yield
        finally:
            subprocess.run(["umount", str(folder)], check=True)
        return
    blocker = folder / "sync-sender"
    blocker.write_bytes(b"")
    try:
        yield
    finally:
        blocker.unlink()


def test_an_unwritable_data_dir_names_the_path_and_the_operation(dep: Deployment) -> None:
    dep.start_receiver()
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=1)
    data = sender.edge.data_dirs[0]
    with unwritable(data):
        result = sender.send()
    assert result.returncode == 1 and result.stdout == ""
    line = one_error_line(result)
    reasons = ("Permission denied", "Read-only file system", "Not a directory")
    # creating the state folder, or reading through the file that stands in its place
    assert line.startswith((f"cannot create {data}/sync-sender", f"cannot read {data}/")), line
    assert line.endswith(reasons), line
    assert "internal error" not in line
    entry = history(sender, dep.port)[-1]
    assert (entry["kind"], entry["error"]) == ("local", line)
    assert dep.loaded_hashes(sender) == {}
    # writable again: the next run ships everything
    assert sender.send().returncode == 0
    assert dep.loaded_hashes(sender) == sender.sealed_hashes()


# ---------------------------------------------------------------- silent misconfiguration


def test_the_instance_root_as_data_dir_is_a_config_error_naming_the_fix(
    dep: Deployment,
) -> None:
    dep.start_receiver()
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=1)
    data = sender.edge.data_dirs[0]
    root = sender.edge.root
    sender.config.write_text(sender.config.read_text().replace(f'"{data}"', f'"{root}"'))
    expected = (
        f"{sender.config}: [sender] data_dirs[0]: {root} holds neither sequence/ nor "
        f"unsequence/, so nothing in it would ship: did you mean {data}?"
    )
    for args in ((), ("--dry-run",)):
        result = sender.send(*args)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert one_error_line(result) == expected
    result = sender.send("--json")
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 2 and doc["errors"] == [expected]
    assert doc["attempts"][0]["kind"] == "config"
    assert dep.loaded_hashes(sender) == {}
