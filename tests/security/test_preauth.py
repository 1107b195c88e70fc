"""Attacks before authentication, against a real ``sealsync serve`` (issue 16, item 1).

Anyone inside the allow list can open connections without a key. Before the limits,
40 connections that finished the key exchange and never authenticated filled every
connection slot, and silent TCP connections held a slot 15 s each: while an attacker
kept reconnecting, no sender could sync. Here each attack runs from its own loopback
address while the honest sender runs a round from 127.0.0.1, which must complete.
"""

from __future__ import annotations

import time
from pathlib import Path

import paramiko
import pytest
from reliability.figures import record

from sealsync.keys import generate_keypair
from security.attacks import Flood, KexOnly, Silent, Site, banner, connect_from

pytestmark = pytest.mark.slow

ATTACKER = "127.0.0.2"


@pytest.fixture
def site(tmp_path: Path):
    s = Site(tmp_path / "site")
    yield s
    s.stop()


def _flood_then_honest_round(site: Site, flood: Flood, attack: str) -> None:
    site.start()
    flood.start()
    try:
        flood.wait_attempts(flood.count)  # every attacker connection tried at least once
        time.sleep(1.0)  # and held for a moment
        held_by_attacker = flood.holding
        code, stderr = site.honest_round()
    finally:
        flood.stop()
    held = code == 0 and site.honest_files_loaded()
    record("security", attack=attack, tried=flood.attempts, held=held)
    assert code == 0, (
        f"honest sender refused while {held_by_attacker} attack connections open: {stderr}"
    )
    assert site.honest_files_loaded()


def test_connections_that_never_authenticate_cannot_lock_senders_out(site: Site) -> None:
    """(a) 40 connections finish the key exchange and never authenticate."""
    flood = Flood(lambda: KexOnly(site.address, ATTACKER), count=40)
    _flood_then_honest_round(site, flood, "40 SSH connections that never authenticate")


def test_silent_tcp_connections_cannot_lock_senders_out(site: Site) -> None:
    """(b) 40 TCP connections that send nothing."""
    flood = Flood(lambda: Silent(site.address, ATTACKER), count=40)
    _flood_then_honest_round(site, flood, "40 silent TCP connections")


def test_the_banner_does_not_name_the_library(site: Site) -> None:
    """(f) The version line a scanner reads names the protocol, not paramiko's version."""
    site.start()
    line = banner(site.address)
    record("security", attack="banner names the SSH library", tried=1, held=b"paramiko" not in line)
    assert line.startswith(b"SSH-2.0-"), line
    assert b"paramiko" not in line.lower(), line
    assert line.rstrip(b"\r") == b"SSH-2.0-sealsync"


def test_login_grace_time_and_penalties_shut_a_failing_source_out(tmp_path: Path) -> None:
    """A connection without a key is closed at login_grace_time and its source refused
    for a while; a source whose keys keep failing is refused too; the honest sender,
    from its own address, is never affected."""
    site = Site(tmp_path / "site", login_grace_time=2.0)
    site.start()
    try:
        started = time.monotonic()
        idle = KexOnly(site.address, "127.0.0.3")
        while idle.alive() and time.monotonic() - started < 10:
            time.sleep(0.05)
        closed_after = time.monotonic() - started
        idle.close()
        assert closed_after < 4.0, f"closed after {closed_after:.1f} s"
        assert banner(site.address, "127.0.0.3") == b""  # refused before any SSH byte

        generate_keypair(tmp_path / "stranger")
        wrong_key = paramiko.PKey.from_path(tmp_path / "stranger")
        failures = 0
        for _ in range(6):
            time.sleep(0.3)  # one attempt after another, as a scanner's would come
            try:
                sock = connect_from(site.address, "127.0.0.4")
            except OSError:
                break
            transport = paramiko.Transport(sock)
            try:
                transport.start_client(timeout=10)
                transport.auth_publickey("sealsync", wrong_key)
            except paramiko.AuthenticationException:
                failures += 1
            except (paramiko.SSHException, EOFError, OSError):
                break  # refused: the penalty is in force
            finally:
                transport.close()
                sock.close()
        assert failures == 4  # 4 x 5 s of penalty passes the 15 s threshold
        assert banner(site.address, "127.0.0.4") == b""

        code, stderr = site.honest_round()
        held = code == 0 and site.honest_files_loaded()
        record("security", attack="pre-auth grace time and failed keys", tried=8, held=held)
        assert code == 0, stderr
        assert banner(site.address).startswith(b"SSH-2.0-")
    finally:
        site.stop()
