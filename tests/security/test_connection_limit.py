"""An honest sender turned away while the receiver is full hears why (issue 35, item 3),
against a real ``sealsync serve`` and ``sealsync send``.

One key kept the receiver's connections full; the honest sender was told that the
receiver "closed the connection before the SSH banner ... may not be in its allow
list", the wrong cause. A receiver that refuses a connection for its load now says so
in a line before its SSH version line (or, for the few connections served past its
bound, in ``ERROR busy`` at HELLO), and the sender prints that reason.

Idle authenticated connections were penalised per source address only: one key used
from many addresses stayed under every threshold. The key's own penalty now refuses it
at authentication from any address.
"""

from __future__ import annotations

import time
from pathlib import Path

import paramiko
import pytest
from reliability.figures import record

from receiver.limits import SESSION_WAIT
from security.attacks import AuthOnly, Flood, Site

pytestmark = pytest.mark.slow

SOURCES = [f"127.0.0.{10 + i}" for i in range(32)]


def test_an_honest_sender_hears_that_the_receiver_is_at_its_connection_limit(
    tmp_path: Path,
) -> None:
    """32 workers, each from an address of its own and with penalties off (else the
    key's penalty would stop the attack before it fills anything) and the key allowed
    40 connections (else, past its 2 and 2 more to hear busy, it is refused), keep
    authenticated connections without a session open (each is closed after 5 s and
    opened again), past the receiver's bound of 16 and its 8 connections served only
    to hear ``busy``. The honest sender's runs that are turned away say the receiver
    is at its connection limit (or has too many unauthenticated connections open),
    never that its address may be outside the allow list; once the attack stops, its
    round succeeds."""
    site = Site(
        tmp_path / "site",
        max_startups="10",
        max_sessions=1,
        per_source_penalty_max=0,
        max_sessions_per_key=40,
    )
    config = site.honest.config
    config.write_text(
        config.read_text().replace("max_retries = 3\n", "max_retries = 3\nreconnect_time = 0.5\n")
    )
    site.start()
    floods = [
        Flood(lambda s=source: AuthOnly(site.address, s, site.hostile_key), 1, max_attempts=60)
        for source in SOURCES
    ]
    turned_away: list[str] = []
    try:
        for flood in floods:
            flood.start()
        deadline = time.monotonic() + 20
        while sum(f.holding for f in floods) < 24 and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(4):
            code, stderr = site.honest_round(timeout=60)
            if code != 0:
                turned_away.append(stderr)
        attempts = sum(f.attempts for f in floods)
    finally:
        for flood in floods:
            flood.stop()
    try:
        time.sleep(6)  # the held connections' SESSION_WAIT runs out
        code, stderr = site.honest_round()
    finally:
        site.stop()
    at_limit = [e for e in turned_away if "at its connection limit" in e]
    wrong = [e for e in turned_away if "allow list" in e]
    log = (site.dep.root / "receiver.log").read_text(errors="replace")
    held = bool(at_limit) and not wrong and code == 0 and site.honest_files_loaded()
    record(
        "security", attack="receiver full: the honest sender hears why", tried=attempts, held=held
    )
    assert turned_away, "the honest sender was never turned away: the attack did not fill"
    assert at_limit, turned_away
    assert not wrong, wrong
    for said in turned_away:
        assert "at its connection limit" in said or "(max_startups)" in said, said
    # told before the SSH banner at least once (past the connections served to hear busy)
    assert any("refused the connection: receiver busy: " in e for e in turned_away), turned_away
    assert "connections open" in log
    assert code == 0, stderr
    assert site.honest_files_loaded()


def test_a_key_whose_connections_open_no_session_is_refused_from_every_address(
    tmp_path: Path,
) -> None:
    """One key authenticates from four addresses and opens no session: each address
    stays under its own penalty threshold, but the key's penalty passes it, so the key
    is refused at authentication from a fifth address; the honest sender's key is not
    affected and its round succeeds."""
    site = Site(tmp_path / "site")
    site.start()
    try:
        held = [AuthOnly(site.address, f"127.0.0.{20 + i}", site.hostile_key) for i in range(4)]
        deadline = time.monotonic() + SESSION_WAIT + 5
        while any(h.alive() for h in held) and time.monotonic() < deadline:
            time.sleep(0.1)
        closed = not any(h.alive() for h in held)
        for h in held:
            h.close()
        time.sleep(0.5)  # the connection threads add the penalties as they end
        with pytest.raises(paramiko.AuthenticationException):
            AuthOnly(site.address, "127.0.0.40", site.hostile_key)
        code, stderr = site.honest_round()
    finally:
        site.stop()
    log = (site.dep.root / "receiver.log").read_text(errors="replace")
    held_up = closed and code == 0 and "from every address" in log
    record("security", attack="one key idle from many addresses", tried=5, held=held_up)
    assert closed
    assert "refused for" in log and "from every address" in log, log[-3000:]
    assert "127.0.0.40: key " in log and "refused (" in log
    assert code == 0, stderr
    assert site.honest_files_loaded()
