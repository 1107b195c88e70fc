"""The receiver's admission policy (receiver/limits.py) and its use by a session.

The policy is pure logic with the clock and the coin flip passed in, so every rule is
checked here exactly; the session tests drive a real ``Session`` over a socket pair
(``SessionEnv``) with small limits. tests/security/ runs the same attacks against a
real ``sealsync serve``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from receiver_load_helpers import UUID_A, UUID_B
from receiver_service_helpers import md5
from reliability import session_env
from reliability.session_env import FP_A, SessionEnv, data_file

from receiver import auth as auth_module
from receiver.auth import KeyLimit, SenderKeys
from receiver.limits import (
    MAX_PENALISED_SOURCES,
    PENALTY_MIN,
    PENALTY_SECONDS,
    Admission,
    ByteLedger,
    MaxStartups,
    Outcome,
    Quota,
    RefusalLog,
    SlotCounter,
    SourcePenalties,
    StallWindow,
    Startup,
    source_of,
)
from receiver.session_limits import SessionLimits
from sealsync.config import ReceiverConfig
from sealsync.errors import ConfigError
from sealsync.protocol import (
    Chunk,
    Error,
    FileBegin,
    FileEnd,
    FileVerdict,
    RoundReady,
    RoundStart,
    Welcome,
    receive,
    send,
)

V4 = ipaddress.ip_address("192.0.2.7")
V4_OTHER = ipaddress.ip_address("192.0.2.8")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- MaxStartups ------------------------------------------------------------------------


def test_max_startups_parses_like_sshd() -> None:
    assert MaxStartups.parse("10:30:60") == MaxStartups(10, 30, 60)
    assert MaxStartups.parse(" 7 ") == MaxStartups(7, 100, 7)  # a plain cap
    for bad in ("10:30", "a:b:c", "10:30:60:1", "", "-1:30:60"):
        with pytest.raises(ValueError, match="start:rate:full"):
            MaxStartups.parse(bad)
    with pytest.raises(ValueError, match="start must be between 1 and full"):
        MaxStartups.parse("61:30:60")
    with pytest.raises(ValueError, match="percentage"):
        MaxStartups.parse("10:130:60")


def test_early_drop_rises_linearly_from_rate_at_start_to_certain_at_full() -> None:
    m = MaxStartups(10, 30, 60)
    assert m.drop_probability(0) == 0.0
    assert m.drop_probability(9) == 0.0
    assert m.drop_probability(10) == pytest.approx(0.30)
    assert m.drop_probability(35) == pytest.approx(0.65)
    assert m.drop_probability(59) == pytest.approx(0.986)
    assert m.drop_probability(60) == 1.0
    assert MaxStartups(5, 100, 5).drop_probability(4) == 0.0
    assert MaxStartups(5, 100, 5).drop_probability(5) == 1.0


@pytest.mark.parametrize(
    ("value", "expected"), [("10:30:60", MaxStartups(10, 30, 60)), (8, MaxStartups(8, 100, 8))]
)
def test_config_reads_max_startups(tmp_path: Path, value: object, expected: MaxStartups) -> None:
    config = ReceiverConfig.from_mapping(_receiver_table(tmp_path, max_startups=value), tmp_path)
    assert config.max_startups == expected


def test_config_refuses_a_bad_max_startups_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        ReceiverConfig.from_mapping(_receiver_table(tmp_path, max_startups="60:30:10"), tmp_path)
    assert str(err.value) == (
        "<mapping>: [receiver] max_startups: start must be between 1 and full (10), "
        "got 60: '60:30:10'"
    )


def _receiver_table(tmp_path: Path, **extra: object) -> dict[str, object]:
    (tmp_path / "host").write_text("x\n")
    (tmp_path / "host").chmod(0o600)  # a private key, as config loading insists
    (tmp_path / "authorized_keys").write_text("")
    for folder in ("schema", "data"):
        (tmp_path / folder).mkdir(exist_ok=True)  # a receiver's folders must exist
    return {
        "listen": "127.0.0.1:5555",
        "host_key": str(tmp_path / "host"),
        "authorized_keys": str(tmp_path / "authorized_keys"),
        "schema_dir": str(tmp_path / "schema"),
        "data_dirs": [str(tmp_path / "data")],
        **extra,
    }


# --- startups, sources, penalties ---------------------------------------------------------


SSHD_STARTUPS = MaxStartups(10, 30, 60)


def admission(
    max_startups: MaxStartups = SSHD_STARTUPS, per_source: int = 4, penalty_max: int = 600
) -> tuple[Admission, Clock, list[float]]:
    clock = Clock()
    coins: list[float] = []  # the coin flips to come; 0.5 when none is queued
    a = Admission(
        max_startups,
        per_source,
        penalty_max,
        rand=lambda: coins.pop(0) if coins else 0.5,
        clock=clock,
    )
    return a, clock, coins


def test_sources_are_hosts_and_ipv6_slash_64s() -> None:
    assert source_of(V4) == "192.0.2.7"
    assert source_of(ipaddress.ip_address("::ffff:192.0.2.7")) == "192.0.2.7"
    one = source_of(ipaddress.ip_address("2001:db8:1:2::1"))
    assert one == source_of(ipaddress.ip_address("2001:db8:1:2:ffff::9")) == "2001:db8:1:2::/64"
    assert one != source_of(ipaddress.ip_address("2001:db8:1:3::1"))


def test_per_source_cap_refuses_only_that_source() -> None:
    a, _, _ = admission(per_source=2)
    first, second = a.admit(V4), a.admit(V4)
    assert isinstance(first, Startup) and isinstance(second, Startup)
    assert a.admit(V4) == "2 unauthenticated connections from this source"
    assert isinstance(a.admit(V4_OTHER), Startup)
    a.authenticated(first)  # it leaves the startup counts: the source has room again
    assert isinstance(a.admit(V4), Startup)
    assert a.startups == 3


def test_random_early_drop_uses_the_startup_count() -> None:
    a, _, coins = admission(max_startups=MaxStartups(2, 50, 4), per_source=100)
    held = [a.admit(V4), a.admit(V4)]  # below start: never dropped, whatever the coin
    assert all(isinstance(s, Startup) for s in held)
    coins[:] = [0.49]  # at start (2 open): dropped with probability 0.5
    assert a.admit(V4) == "2 unauthenticated connections open (max_startups)"
    coins[:] = [0.51]
    assert isinstance(a.admit(V4), Startup)
    coins[:] = [0.74]  # 3 open: p = 0.75
    assert a.admit(V4) == "3 unauthenticated connections open (max_startups)"
    coins[:] = [0.76]
    assert isinstance(a.admit(V4), Startup)
    assert a.startups == 4
    coins[:] = [0.99999]  # full: always dropped
    assert a.admit(V4) == "4 unauthenticated connections open (max_startups)"


def test_authenticated_connections_do_not_count_as_startups() -> None:
    a, _, _ = admission(max_startups=MaxStartups(1, 100, 1), per_source=100)
    first = a.admit(V4)
    assert isinstance(first, Startup)
    assert isinstance(a.admit(V4), str)  # full
    a.authenticated(first)
    assert isinstance(a.admit(V4), Startup)  # a session never holds a startup slot
    a.authenticated(first)  # idempotent
    assert a.close(first, Outcome.AUTHENTICATED) == 0.0
    assert a.startups == 1


def test_failures_add_up_to_a_refusal_that_runs_out() -> None:
    a, clock, _ = admission(per_source=100)
    for _ in range(3):  # 15 s of penalty: not over the minimum yet
        startup = a.admit(V4)
        assert isinstance(startup, Startup)
        assert a.close(startup, Outcome.AUTH_FAILED) == 0.0
    assert isinstance(a.admit(V4), Startup)  # (left open; counted below)
    startup = a.admit(V4)
    assert isinstance(startup, Startup)
    barred = a.close(startup, Outcome.AUTH_FAILED)
    assert barred == pytest.approx(4 * PENALTY_SECONDS[Outcome.AUTH_FAILED])
    refusal = a.admit(V4)
    assert refusal == "penalised for failing connections (20 s left)"
    assert isinstance(a.admit(V4_OTHER), Startup)  # only that source
    clock.now += 19.9
    assert isinstance(a.admit(V4), str)
    clock.now += 0.2
    assert isinstance(a.admit(V4), Startup)


def test_one_grace_time_exceeded_bars_at_once_and_penalties_are_capped() -> None:
    a, clock, _ = admission(per_source=100, penalty_max=60)
    assert PENALTY_SECONDS[Outcome.GRACE_EXCEEDED] > PENALTY_MIN
    startups = [a.admit(V4) for _ in range(10)]
    barred = [a.close(s, Outcome.GRACE_EXCEEDED) for s in startups if isinstance(s, Startup)]
    assert barred[0] == pytest.approx(PENALTY_SECONDS[Outcome.GRACE_EXCEEDED])
    assert barred[1:] == [0.0] * 9  # reported once, when the source became barred
    assert a.penalties.refused_for("192.0.2.7", clock.now) == pytest.approx(60)  # the cap
    clock.now += 60.1
    assert isinstance(a.admit(V4), Startup)


def test_an_authenticated_connection_never_earns_a_penalty() -> None:
    a, clock, _ = admission(per_source=100)
    for _ in range(50):
        startup = a.admit(V4)
        assert isinstance(startup, Startup)
        a.authenticated(startup)
        a.close(startup, Outcome.GRACE_EXCEEDED)  # e.g. no session opened in time
    assert a.penalties.refused_for("192.0.2.7", clock.now) == 0.0
    assert isinstance(a.admit(V4), Startup)


def test_port_probes_are_penalised_lightly() -> None:
    a, clock, _ = admission(per_source=100)
    for _ in range(10):  # a health check every few seconds never adds up
        startup = a.admit(V4)
        assert isinstance(startup, Startup)
        assert a.close(startup, Outcome.NO_AUTH) == 0.0
        clock.now += 5
    assert isinstance(a.admit(V4), Startup)
    for _ in range(16):  # a burst does
        startup = a.admit(V4)
        assert isinstance(startup, Startup)
        a.close(startup, Outcome.NO_AUTH)
    assert isinstance(a.admit(V4), str)


def test_penalties_off_with_a_zero_maximum() -> None:
    a, _, _ = admission(per_source=100, penalty_max=0)
    for _ in range(20):
        startup = a.admit(V4)
        assert isinstance(startup, Startup)
        assert a.close(startup, Outcome.GRACE_EXCEEDED) == 0.0
    assert isinstance(a.admit(V4), Startup)


def test_the_penalty_table_is_bounded() -> None:
    penalties = SourcePenalties(600)
    for i in range(MAX_PENALISED_SOURCES):
        penalties.add(f"s{i}", 20, now=0.0)
    assert penalties.add("late", 20, now=0.0) == 0.0  # full: not remembered
    assert penalties.refused_for("late", 1.0) == 0.0
    assert len(penalties) == MAX_PENALISED_SOURCES
    assert penalties.add("late", 20, now=30.0) == 20.0  # the expired ones made room
    assert len(penalties) == 1


def test_close_is_idempotent_and_releases_the_startup() -> None:
    a, _, _ = admission(per_source=1)
    startup = a.admit(V4)
    assert isinstance(startup, Startup)
    a.close(startup, Outcome.NO_AUTH)
    a.close(startup, Outcome.AUTH_FAILED)
    assert a.startups == 0
    assert isinstance(a.admit(V4), Startup)


# --- per-sender counters ----------------------------------------------------------------------


def test_slot_counter_caps_each_name() -> None:
    slots = SlotCounter(2)
    assert slots.acquire("k") and slots.acquire("k")
    assert not slots.acquire("k")
    assert slots.acquire("other")
    slots.release("k")
    assert slots.count("k") == 1 and slots.acquire("k")
    unlimited = SlotCounter(None)
    assert all(unlimited.acquire("k") for _ in range(100))


def test_byte_ledger_reserves_up_to_the_limit() -> None:
    ledger = ByteLedger(100)
    assert ledger.reserve("u", 60)
    assert not ledger.reserve("u", 41)
    assert ledger.reserve("u", 40)
    assert ledger.reserve("v", 100)
    ledger.release("u", 60)
    assert ledger.held("u") == 40
    ledger.release("u", 40)
    assert ledger.held("u") == 0


def test_quota_measures_once_counts_arrivals_and_remeasures_before_refusing() -> None:
    clock = Clock()
    disk = {"u": 50}
    measured: list[str] = []

    def measure(name: str) -> int:
        measured.append(name)
        return disk.get(name, 0)

    quota = Quota(100, measure, remeasure_after=60, clock=clock)
    assert quota.over("u", 50) is None
    assert measured == ["u"]
    quota.add("u", 40)  # arrived: 90 counted
    assert quota.over("u", 10) is None
    assert measured == ["u"]  # O(1) while under the limit
    disk["u"] = 20  # the loader applied deletions meanwhile
    assert quota.over("u", 20) == 90  # over by the count, measured too recently to redo
    assert measured == ["u"]
    clock.now += 61
    assert quota.over("u", 20) is None  # measured again: it fits
    assert measured == ["u", "u"]
    assert quota.used("u") == 20
    disk["u"] = 95
    quota.add("u", 75)
    clock.now += 61
    assert quota.over("u", 10) == 95  # measured again, still over
    assert quota.over("u", 10) == 95
    assert measured == ["u", "u", "u"]  # once per remeasure_after


# --- stalls -----------------------------------------------------------------------------


def test_a_trickle_stalls_a_window_and_a_steady_stream_does_not() -> None:
    w = StallWindow(timeout=30, min_rate=100)  # 3000 bytes per 30 s of waiting
    w.arm()
    for _ in range(14):  # 1 byte every 2 s
        assert not w.record(2.0, 1)
    assert w.wait_limit() == pytest.approx(2.0)
    assert w.record(2.0, 1)
    steady = StallWindow(timeout=30, min_rate=100)
    steady.arm()
    for _ in range(100):  # 200 bytes a second for 200 s
        assert not steady.record(1.0, 200)
    steady.record(29.0, 0)
    steady.disarm()  # between frames: a fresh window
    assert steady.wait_limit() == 30 and not steady.armed


# --- UUIDs per key, and the binding cache -----------------------------------------------


def test_a_key_binds_at_most_max_uuids_per_key(tmp_path: Path) -> None:
    store = SenderKeys(tmp_path, max_uuids_per_key=1)
    assert store.bind(UUID_A, FP_A, "10.0.0.1") is not None
    with pytest.raises(KeyLimit, match=r"already acts as 1 sender UUIDs.*max_uuids_per_key = 1"):
        store.bind(UUID_B, FP_A, "10.0.0.1")
    assert store.bind(UUID_A, FP_A, "10.0.0.2") is not None  # its own UUID still works
    assert set(store.bindings()) == {UUID_A}
    two = SenderKeys(tmp_path / "two", max_uuids_per_key=2)
    assert two.bind(UUID_A, FP_A, "10.0.0.1") and two.bind(UUID_B, FP_A, "10.0.0.1")


def test_bindings_are_read_again_only_when_the_file_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[object] = []
    real = auth_module.durable.read_lines

    def counting(path: str | os.PathLike[str]) -> list[str]:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(auth_module.durable, "read_lines", counting)
    store = SenderKeys(tmp_path)
    store.bind(UUID_A, FP_A, "10.0.0.1")
    for _ in range(20):
        assert store.bind(UUID_A, FP_A, "10.0.0.1") is not None
    assert reads == []  # written by us, then served from memory
    path = tmp_path / "sync" / "sender_keys.txt"
    path.write_text("")  # an operator removed the binding
    assert store.bind(UUID_A, "SHA256:" + "b" * 43, "10.0.0.1") is not None
    assert len(reads) == 1


# --- a session with limits -------------------------------------------------------------------


class LimitedEnv(SessionEnv):
    def __init__(self, root: Path, limits: SessionLimits) -> None:
        super().__init__(root)
        self.ctx.limits = limits
        self.socks: list[socket.socket] = []

    def connect(self, *args: Any, **kwargs: Any) -> Any:
        sock, thread = super().connect(*args, **kwargs)
        self.socks.append(sock)  # closed when the test ends
        return sock, thread

    def open(self, uuid: str = UUID_A, peer: str = session_env.PEER) -> socket.socket:
        sock, _ = self.connect(peer=peer)
        assert isinstance(session_env.say_hello(sock, uuid), Welcome)
        send(sock, RoundStart(0))
        assert receive(sock) == RoundReady("ready", "")
        return sock


@pytest.fixture
def make_env(tmp_path: Path):
    envs: list[LimitedEnv] = []

    def make(**limits: Any) -> LimitedEnv:
        env = LimitedEnv(tmp_path / f"env{len(envs)}", SessionLimits(**limits))
        envs.append(env)
        return env

    yield make
    for env in envs:
        for sock in env.socks:
            sock.close()
        env.close()


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def temporaries(env: SessionEnv) -> int:
    total = 0
    for here, _dirs, files in os.walk(env.data_dirs[0]):
        total += sum(os.path.getsize(os.path.join(here, f)) for f in files if ".incoming-" in f)
    return total


def test_a_trickle_inside_a_file_stream_ends_the_session(make_env) -> None:
    env = make_env(stall_timeout=0.6, min_transfer_rate=100)  # 60 bytes per 0.6 s
    sock = env.open()
    send(sock, FileBegin(1, "sequence/root.sg/0/t.tsfile", 1000, 0, -1))
    started = time.monotonic()
    try:
        for _ in range(20):
            send(sock, Chunk(b"x"))  # a complete frame every 0.25 s: not enough bytes
            time.sleep(0.25)
    except OSError:
        pass  # the receiver closed while we trickled
    msg = receive(sock)
    assert isinstance(msg, Error) and msg.code == "timeout", msg
    assert "session stalled" in msg.message and "min_transfer_rate" in msg.message
    assert time.monotonic() - started < 3.0
    wait_until(lambda: temporaries(env) == 0)


def test_an_idle_pause_between_frames_is_not_a_stall(make_env) -> None:
    env = make_env(stall_timeout=0.3, min_transfer_rate=1000)
    sock = env.open()
    time.sleep(0.8)  # a sender scanning its next data dir: the idle timeout applies
    name = "sequence/root.sg/0/ok.tsfile"
    body = data_file("root.sg.d1")
    send(sock, FileBegin(1, name, len(body), 3, -1))
    send(sock, Chunk(body + b"res"))
    send(sock, FileEnd(1, md5(body + b"res")))
    msg = receive(sock)
    assert isinstance(msg, FileVerdict) and msg.status == "verified", msg


def test_a_file_over_max_partial_bytes_is_refused_and_never_written(make_env) -> None:
    env = make_env(partial=ByteLedger(1 << 20))
    sock = env.open()
    name = "sequence/root.sg/0/huge.tsfile"
    send(sock, FileBegin(1, name, 1 << 40, 0, -1))  # announces 1 TiB
    for _ in range(40):
        send(sock, Chunk(b"z" * 65536))
    assert temporaries(env) == 0
    send(sock, FileEnd(1, "0" * 32))
    msg = receive(sock)
    assert isinstance(msg, FileVerdict) and msg.status == "refused", msg
    assert msg.reason == (
        f"a file of {1 << 40} bytes is larger than the receiver takes in one upload "
        f"(max_partial_bytes = {1 << 20})"
    )
    good = data_file("root.sg.d1")  # the session goes on
    send(sock, FileBegin(2, "sequence/root.sg/0/ok.tsfile", len(good), 3, -1))
    send(sock, Chunk(good + b"res"))
    send(sock, FileEnd(2, md5(good + b"res")))
    msg = receive(sock)
    assert isinstance(msg, FileVerdict) and msg.status == "verified", msg
    assert env.ctx.limits.partial.held(UUID_A) == 0


def test_unfinished_uploads_of_one_sender_are_bounded_across_its_sessions(make_env) -> None:
    env = make_env(partial=ByteLedger(1 << 20))
    first, second = env.open(), env.open(peer="10.9.9.9")  # two folders, one sender
    send(first, FileBegin(1, "sequence/root.sg/0/a.tsfile", 700_000, 0, -1))
    send(first, Chunk(b"a" * 1000))
    time.sleep(0.2)
    assert env.ctx.limits.partial.held(UUID_A) == 700_000
    send(second, FileBegin(1, "sequence/root.sg/0/b.tsfile", 700_000, 0, -1))
    send(second, Chunk(b"b" * 1000))
    send(second, FileEnd(1, "0" * 32))
    msg = receive(second)
    assert isinstance(msg, FileVerdict) and msg.status == "refused", msg
    assert "already holds 700000 bytes of unfinished uploads" in msg.reason
    assert "max_partial_bytes = 1048576" in msg.reason
    first.close()  # the session ends: what it held is given back
    wait_until(lambda: env.ctx.limits.partial.held(UUID_A) == 0)


def test_over_the_storage_quota_the_session_ends_with_error_quota(make_env) -> None:
    stored = {UUID_A: 0}
    env = make_env(quota=Quota(300, lambda u: stored.get(u, 0)))
    sock = env.open()
    body = data_file("root.sg.d1", body=b"p" * 100)  # a stream of ~120 bytes
    stream = body + b"res"
    for i in range(2):
        send(sock, FileBegin(i, f"sequence/root.sg/0/f{i}.tsfile", len(body), 3, -1))
        send(sock, Chunk(stream))
        send(sock, FileEnd(i, md5(stream)))
    send(sock, FileBegin(2, "sequence/root.sg/0/f2.tsfile", len(body), 3, -1))
    answers = [receive(sock) for _ in range(3)]
    verified = [a for a in answers[:2] if isinstance(a, FileVerdict) and a.status == "verified"]
    assert len(verified) == 2, answers
    error = answers[2]
    assert isinstance(error, Error) and error.code == "quota", error
    assert error.message == (
        f"sender {UUID_A} holds {2 * len(stream)} bytes on the receiver; a file of "
        f"{len(stream)} bytes would exceed its quota of 300 bytes (sender_quota_bytes); "
        "nothing more is stored until files are deleted or the quota is raised"
    )


def test_sessions_per_sender_are_capped(make_env) -> None:
    env = make_env(sender_sessions=SlotCounter(1))
    first = env.open()
    sock, _ = env.connect()
    msg = session_env.say_hello(sock, UUID_A)
    assert msg == Error(
        "busy",
        f"receiver busy: sender {UUID_A} already has 1 sessions open "
        "(max_sessions_per_sender), retry later",
    )
    assert isinstance(session_env.say_hello(env.connect()[0], UUID_B), Welcome)
    first.close()
    wait_until(lambda: env.ctx.limits.sender_sessions.count(UUID_A) == 0)
    assert isinstance(session_env.say_hello(env.connect()[0], UUID_A), Welcome)


def test_bytes_reserved_for_a_stream_that_cannot_be_built_are_given_back() -> None:
    """admit() reserves a stream's bytes before its files exist; if making them fails
    (a link in the staging path, a full disk) the session ends without a stream
    holding them, so they must go back then or the sender's count stays high forever."""
    from receiver.session_limits import SessionAdmission

    limits = SessionLimits(partial=ByteLedger(100))
    admission = SessionAdmission(limits, flush=lambda: False)
    admission.uuid = UUID_A
    assert admission.admit(60, None) is None
    assert limits.partial.held(UUID_A) == 60

    def broken() -> object:
        raise OSError(40, "a link in the way")

    with pytest.raises(OSError):
        admission.opened(60, broken)
    assert limits.partial.held(UUID_A) == 0
    admission.release_all()
    assert limits.partial.held(UUID_A) == 0

    assert admission.admit(60, None) is None
    stream = admission.opened(60, object)
    assert limits.partial.held(UUID_A) == 60
    admission.release(stream)
    assert limits.partial.held(UUID_A) == 0


def test_authenticated_connections_that_open_no_session_are_penalised_like_failed_logins() -> None:
    """One key once held ~96 authenticated connections without a channel: they had left
    the startup counts and earned nothing. Now each adds a failed login's penalty."""
    a, clock, _ = admission(per_source=100)
    barred = 0.0
    for n in range(1, 10):
        startup = a.admit(V4)
        assert isinstance(startup, Startup)
        a.authenticated(startup)
        assert a.startups == 0  # authenticated: out of the startup counts all the same
        barred = a.close(startup, Outcome.IDLE_AFTER_AUTH) or barred
        if n * PENALTY_SECONDS[Outcome.IDLE_AFTER_AUTH] > PENALTY_MIN:
            break
    assert barred > 0
    assert a.penalties.refused_for("192.0.2.7", clock.now) > 0
    assert isinstance(a.admit(V4), str)
    assert a.startups == 0


def test_refusal_lines_are_one_per_kind_and_interval_then_one_summary() -> None:
    clock = Clock()
    lines: list[tuple[int, str]] = []
    refusals = RefusalLog(lambda level, line: lines.append((level, line)), 10.0, clock=clock)
    for i in range(500):
        refusals.refused("penalised", 30, f"10.0.0.{i % 3}", f"line {i}")
        clock.now += 0.01
    refusals.refused("allow list", 30, "10.9.9.9", "other kind")
    assert lines == [(30, "line 0"), (30, "other kind")]
    clock.now += 10.0
    refusals.flush()
    assert lines[2:] == [
        (
            30,
            "499 more connections refused in 10 s (penalised) from 3 address(es): "
            "10.0.0.0, 10.0.0.1, 10.0.0.2",
        )
    ]
    refusals.flush()
    refusals.refused("penalised", 30, "10.0.0.1", "again")
    assert lines[-1] == (30, "again")
