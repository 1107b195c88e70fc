"""Authenticated connections that lock others out, and a retired sender that keeps its
session (issue 35, items 3 and 6), against a real ``sealsync serve``.

* One key once kept ~96 connections authenticated without opening a channel: they
  left the pre-authentication counters, earned no penalty and filled the receiver's
  bound on connections until ``login_grace_time``; the honest sender succeeded 2 times
  in 8, and the log took ~1,500 WARNING lines in 35 s.
* ``sealsync senders retire`` did not end an open session of that sender: it shipped a
  file after being retired.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC
from receiver_service_helpers import tsfile_bytes
from reliability.figures import record

from receiver.limits import SESSION_WAIT
from sealsync.protocol import Error, FileVerdict, RoundReady, Welcome
from security.attacks import AuthOnly, Flood, Site, SourcedClient

pytestmark = pytest.mark.slow


def _warnings(site: Site) -> list[str]:
    path = site.dep.root / "receiver.log"
    return [line for line in path.read_text(errors="replace").splitlines() if "WARNING" in line]


def test_authenticated_idle_connections_are_closed_penalised_and_quietly_logged(
    tmp_path: Path,
) -> None:
    """40 workers keep authenticated connections without a channel open, from two
    source addresses, for the length of four honest rounds: every honest round
    succeeds, each idle connection is closed within a few seconds, its source ends up
    refused, and the log holds a bounded number of lines about it."""
    site = Site(tmp_path / "site")
    site.start()
    before = len(_warnings(site))
    floods = [
        Flood(lambda s=source: AuthOnly(site.address, s, site.hostile_key), 20, max_attempts=200)
        for source in ("127.0.0.2", "127.0.0.3")
    ]
    results: list[tuple[int, str]] = []
    try:
        for flood in floods:
            flood.start()
        for flood in floods:
            flood.wait_attempts(40)
        started = time.monotonic()
        for _ in range(4):
            results.append(site.honest_round())
        took = time.monotonic() - started
        time.sleep(max(0.0, started + SESSION_WAIT + 1 - time.monotonic()))  # idle ones cut
        holding = max(f.holding for f in floods)
        attempts = sum(f.attempts for f in floods)
    finally:
        for flood in floods:
            flood.stop()
        time.sleep(11)  # the refusal log's interval: its summaries are written
        site.stop()
    lines = _warnings(site)[before:]
    log = (site.dep.root / "receiver.log").read_text(errors="replace")
    ok = sum(1 for code, _ in results if code == 0)
    held = ok == 4 and site.honest_files_loaded() and len(lines) < 60
    attack = "one key holds authenticated idle connections"
    record("security", attack=attack, tried=attempts, held=held)
    assert ok == 4, results
    assert site.honest_files_loaded()
    assert "opened no sealsync session within 5 s of authenticating" in log
    assert "refused for" in log  # the sources were penalised
    assert "more connections refused in 10 s" in log  # the rest summed up
    assert len(lines) < 60, f"{len(lines)} WARNING lines in {took:.0f} s"
    assert holding <= 40


def test_a_retired_senders_open_session_ends_at_once(tmp_path: Path) -> None:
    """A hostile sender holds a session and a round open; the operator retires it with
    ``sealsync senders retire``: within seconds its connection is closed, a file it
    then ships gets no verdict and is not stored, and it cannot come back."""
    site = Site(tmp_path / "site")
    site.start()
    b = str(uuid.uuid4())
    verdict: object = None
    try:
        client = SourcedClient(site.address, site.hostile_key, "127.0.0.2")
        try:
            assert isinstance(client.hello(b), Welcome)
            assert client.round_start() == RoundReady("ready", "")
            removed = subprocess.run(
                [*SEALSYNC, "senders", "retire", b, "--config", str(site.dep.receiver_config)],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            retired_at = time.monotonic()
            client.chan.settimeout(0.2)
            while not client.closed_by_peer() and time.monotonic() - retired_at < 10:
                pass
            ended_after = time.monotonic() - retired_at
            try:
                client.chan.settimeout(5)
                late = tsfile_bytes(tmp_path, ["root.r"])
                client.send_file(1, "sequence/root.r/0/late.tsfile", late)
                verdict = client.recv()
            except Exception:
                verdict = None
        finally:
            client.close()
        again = SourcedClient(site.address, site.hostile_key, "127.0.0.2")
        try:
            comeback = again.hello(b)
        finally:
            again.close()
        code, stderr = site.honest_round()
    finally:
        site.stop()
    stored = list((site.dep.receiver_data / "sequence").rglob(f"{b}/*"))
    held = ended_after < 5 and not isinstance(verdict, FileVerdict) and not stored
    record("security", attack="a retired sender keeps its open session", tried=1, held=held)
    assert removed.returncode == 0, removed.stderr
    assert ended_after < 5, f"the retired sender's session lasted {ended_after:.1f} s more"
    assert not isinstance(verdict, FileVerdict), verdict
    assert stored == []
    assert isinstance(comeback, Error) and comeback.code == "auth", comeback
    assert code == 0, stderr
    assert site.honest_files_loaded()
