"""The receiver's admission before authentication against many addresses
(receiver/limits.py): address blocks, the reserve for known senders, refusals' kinds.

Pure logic with the clock and the coin flip passed in, as in test_receiver_limits.py;
tests/security/test_preauth_many_sources.py runs the floods against a real receiver.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from receiver.connections import known_senders
from receiver.layout import SenderFolder
from receiver.limits import (
    BLOCK_PENALTY_MIN,
    MAX_TRUSTED,
    PENALISED,
    PENALTY_SECONDS,
    TRUSTED_FOR,
    Admission,
    MaxStartups,
    Outcome,
    Refusal,
    Startup,
    block_of,
    source_of,
)

IDLE = Outcome.IDLE_BEFORE_AUTH


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


SSHD_STARTUPS = MaxStartups(10, 30, 60)


def admission(
    max_startups: MaxStartups = SSHD_STARTUPS, reserved: int = 2, per_source: int = 8
) -> tuple[Admission, Clock, list[float]]:
    clock = Clock()
    coins: list[float] = []
    a = Admission(
        max_startups,
        per_source,
        600,
        reserved=reserved,
        rand=lambda: coins.pop(0) if coins else 0.5,
        clock=clock,
    )
    return a, clock, coins


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def test_blocks_are_ipv4_slash_24s_and_ipv6_slash_48s() -> None:
    assert block_of(ip("192.0.2.7")) == block_of(ip("::ffff:192.0.2.200")) == "192.0.2.0/24"
    assert block_of(ip("2001:db8:1:2::1")) == block_of(ip("2001:db8:1:ffff::9"))
    assert block_of(ip("2001:db8:1:2::1")) == "2001:db8:1::/48"
    assert block_of(ip("2001:db8:2::1")) != block_of(ip("2001:db8:1::1"))


def test_a_refusal_is_its_text_with_a_fixed_kind() -> None:
    a, _, _ = admission(MaxStartups(1, 100, 1), reserved=0)
    assert isinstance(a.admit(ip("192.0.2.7")), Startup)
    refusal = a.admit(ip("192.0.2.8"))
    assert refusal == "1 unauthenticated connections open (max_startups)"
    assert isinstance(refusal, Refusal) and refusal.kind == "max_startups"
    assert not refusal.silent


def fail(a: Admission, address: str, outcome: Outcome = IDLE) -> tuple[float, float]:
    startup = a.admit(ip(address))
    assert isinstance(startup, Startup), startup
    return a.closed(startup, outcome)


def test_many_addresses_failing_refuse_their_network_one_address_never_does() -> None:
    a, clock, _ = admission()
    for _ in range(10):  # one address, failing over and over: only it is refused
        startup = a.admit(ip("192.0.2.7"))
        if isinstance(startup, Startup):
            a.closed(startup, IDLE)
    assert isinstance(a.admit(ip("192.0.2.7")), Refusal)
    assert isinstance(a.admit(ip("192.0.2.8")), Startup)  # its neighbour is served
    assert a.block_penalties.refused_for("192.0.2.0/24", clock.now) == 0.0

    b, clock, _ = admission()
    seconds = PENALTY_SECONDS[IDLE]
    first = int(BLOCK_PENALTY_MIN // seconds) + 1  # the failure that passes the minimum
    barred = [fail(b, f"198.51.100.{i}")[1] for i in range(1, first + 1)]
    assert barred[:-1] == [0.0] * (first - 1)  # each address failed once: under its own
    assert barred[-1] == pytest.approx(first * seconds)  # minimum, over its network's
    refusal = b.admit(ip("198.51.100.200"))  # an address that never failed, same /24
    assert isinstance(refusal, Refusal) and refusal.kind == "network penalised"
    assert "198.51.100.0/24 keep failing" in refusal and not refusal.silent
    assert isinstance(b.admit(ip("198.51.101.1")), Startup)  # another /24
    clock.now += 600.1
    assert isinstance(b.admit(ip("198.51.100.200")), Startup)  # it runs out


def test_an_address_refused_already_adds_nothing_to_its_network() -> None:
    a, clock, _ = admission(MaxStartups(100, 30, 100), per_source=100)
    startups = [a.admit(ip("192.0.2.7")) for _ in range(50)]
    for startup in startups:
        assert isinstance(startup, Startup)
        a.closed(startup, Outcome.GRACE_EXCEEDED)
    assert a.penalties.refused_for("192.0.2.7", clock.now) > 0
    assert a.block_penalties.refused_for("192.0.2.0/24", clock.now) == 0.0
    refusal = a.admit(ip("192.0.2.7"))
    assert isinstance(refusal, Refusal) and refusal.kind == PENALISED and refusal.silent


def test_a_known_sender_keeps_its_reserve_and_its_network_refusal_does_not_apply() -> None:
    a, clock, _ = admission(MaxStartups(2, 100, 2), reserved=2)
    sender = a.admit(ip("192.0.2.1"))
    assert isinstance(sender, Startup) and not sender.reserved
    a.authenticated(sender)
    a.logged_in(sender)  # its session opened: a known sender's address from now on
    a.closed(sender, Outcome.AUTHENTICATED)
    for i in range(2, 2 + int(BLOCK_PENALTY_MIN // PENALTY_SECONDS[IDLE]) + 1):
        fail(a, f"192.0.2.{i}")  # strangers of its own /24 fail until the /24 is refused
    crowd = [a.admit(ip("203.0.113.1")), a.admit(ip("203.0.113.2"))]
    assert all(isinstance(s, Startup) for s in crowd)  # the shared count is full now
    assert isinstance(a.admit(ip("203.0.113.3")), Refusal)
    assert isinstance(a.admit(ip("192.0.2.99")), Refusal)  # a stranger of that /24
    first, second = a.admit(ip("192.0.2.1")), a.admit(ip("192.0.2.1"))
    assert isinstance(first, Startup) and first.reserved
    assert isinstance(second, Startup) and second.reserved
    assert a.reserved_startups == 2 and a.startups == 2
    assert isinstance(a.admit(ip("192.0.2.1")), Refusal)  # the reserve is full too
    a.authenticated(first)
    assert a.reserved_startups == 1
    clock.now += TRUSTED_FOR + 1  # a week without a session: a stranger again
    assert isinstance(a.admit(ip("192.0.2.1")), Refusal)


def test_a_known_address_that_keeps_failing_loses_its_reserve() -> None:
    a, clock, _ = admission(per_source=100)
    a.remember([("192.0.2.1", 60.0)])
    startup = a.admit(ip("192.0.2.1"))
    assert isinstance(startup, Startup) and startup.reserved
    a.closed(startup, IDLE)  # one cut: under the minimum, still known
    assert isinstance(again := a.admit(ip("192.0.2.1")), Startup) and again.reserved
    a.closed(again, IDLE)  # refused now: no known sender's address any more
    clock.now += PENALTY_SECONDS[IDLE] * 2 + 1
    after = a.admit(ip("192.0.2.1"))
    assert isinstance(after, Startup) and not after.reserved


def test_remembered_addresses_are_bounded_and_old_ones_ignored() -> None:
    a, _, _ = admission()
    a.remember([("192.0.2.1", TRUSTED_FOR + 1), ("192.0.2.2", 10.0)])
    assert not _reserved(a, "192.0.2.1") and _reserved(a, "192.0.2.2")
    a.remember((f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", 5.0) for i in range(MAX_TRUSTED))
    assert len(a._logins) == MAX_TRUSTED
    assert not _reserved(a, "192.0.2.2")  # the oldest went first


def _reserved(a: Admission, address: str) -> bool:
    startup = a.admit(ip(address))
    assert isinstance(startup, Startup)
    a.closed(startup, Outcome.AUTHENTICATED)
    return startup.reserved


def test_known_senders_are_read_from_the_sender_folders(tmp_path: Path) -> None:
    uuid = "5f0e0f2c-8d3c-4f5e-9a51-0c1d2e3f4a5b"
    for address in ("192.0.2.7", "2001:db8::5"):
        SenderFolder(tmp_path, address, uuid).root.mkdir(parents=True)
    (tmp_path / "sync-receiver" / f"not-an-address_{uuid}").mkdir()
    found = dict(known_senders([tmp_path]))
    assert set(found) == {"192.0.2.7", source_of(ip("2001:db8::5"))}
    assert all(0 <= age < 60 for age in found.values())
