"""The bandwidth cap: rsync's rate syntax, the config keys and ``--bwlimit``, the token
bucket on a fake clock, and where the rate is shown. The cap over a real round is
checked in ``tests/test_bwlimit.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from config_helpers import make_sender, sender_doc, write_sealed
from hypothesis import given, settings
from hypothesis import strategies as st

from sealsync.app.cli import main
from sealsync.app.output import attempt_summary, format_rate
from sealsync.config import MIN_RATE, load_sender_config, parse_rate
from sealsync.errors import ConfigError
from sender.transfer.report import AttemptReport, DirReport
from sender.transfer.throttle import (
    BURST_SECONDS,
    MAX_PIECE,
    MIN_SLEEP,
    TokenBucket,
    paced_sendall,
)

KIB, MIB, GIB = 1024, 1024 * 1024, 1024 * 1024 * 1024

# --- rsync's syntax ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("0", 0),
        ("0K", 0),
        ("100", 100 * KIB),  # a bare number is KiB/s, as in rsync
        ("4K", 4 * KIB),
        ("4k", 4 * KIB),
        ("4KiB", 4 * KIB),
        ("4kib", 4 * KIB),
        ("4KB", 4000),  # rsync: a trailing B makes the powers 1000
        ("4M", 4 * MIB),
        ("4m", 4 * MIB),
        ("4MiB", 4 * MIB),
        ("4MB", 4_000_000),
        ("1.5M", int(1.5 * MIB)),
        (".5M", MIB // 2),
        ("2G", 2 * GIB),
        ("1T", 1024 * GIB),
        ("512B", 512),
        ("4096b", 4096),
        (" 8M ", 8 * MIB),
    ],
)
def test_parse_rate_takes_rsyncs_syntax(text: str, rate: int) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["", "M", "4X", "4 M", "-1", "+4M", "1e3", "4MiBs", "4Mi", "0x10"])
def test_parse_rate_refuses_what_is_not_a_rate(text: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_rate(text)
    assert str(e.value).startswith(f"not a rate: {text!r}; write a number with an optional K")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text", ["0.4", "511B", "1B", "0.1B"])
def test_parse_rate_refuses_rates_under_rsyncs_minimum(text: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_rate(text)
    assert str(e.value) == (
        f"rate too small: {text!r} (at least {MIN_RATE} bytes/s, or 0 for no limit)"
    )


# --- config keys and --bwlimit ------------------------------------------------------------


def test_sender_cap_is_the_default_of_every_receiver(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["sender"]["bwlimit"] = "4M"
    doc["receiver"].append({"name": "dc2", "host": "127.0.0.1", "port": 5556, "bwlimit": "1M"})
    doc["receiver"].append({"name": "dc3", "host": "127.0.0.1", "port": 5557, "bwlimit": 0})
    config = load_sender_config(make_sender(tmp_path, doc))
    assert [config.bwlimit_for(r) for r in config.receivers] == [4 * MIB, MIB, 0]
    # --bwlimit: one cap for all, whatever the keys said
    capped = config.with_bwlimit(256 * KIB)
    assert [capped.bwlimit_for(r) for r in capped.receivers] == [256 * KIB] * 3
    assert [r.name for r in capped.receivers] == ["dc1", "dc2", "dc3"]


def test_a_toml_number_is_a_bare_rsync_number(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["sender"]["bwlimit"] = 1024
    assert load_sender_config(make_sender(tmp_path, doc)).bwlimit == MIB


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("4X", "not a rate: '4X'; write a number with an optional K"),
        ("100B", "rate too small: '100B'"),
        (True, 'must be a rate such as "4M", got a boolean'),
    ],
)
def test_bad_cap_is_a_one_line_config_error(tmp_path: Path, value: object, message: str) -> None:
    doc = sender_doc()
    doc["receiver"][0]["bwlimit"] = value
    path = make_sender(tmp_path, doc)
    with pytest.raises(ConfigError) as e:
        load_sender_config(path)
    assert str(e.value).startswith(f"{path}: [[receiver]] #1 bwlimit: {message}")
    assert e.value.exit_code == 2


def test_bad_bwlimit_option_is_exit_2_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_sender(tmp_path)
    code = main(["send", "--config", str(path), "--bwlimit", "fast"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("sealsync: error: --bwlimit: not a rate: 'fast'; write a number")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_dry_run_shows_each_receivers_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = sender_doc()
    doc["sender"]["bwlimit"] = "4M"
    doc["receiver"].append({"name": "dc2", "host": "127.0.0.1", "port": 5556, "bwlimit": "0"})
    path = make_sender(tmp_path, doc)
    write_sealed(tmp_path / "edge/data", "sequence/g1/0/a.tsfile")

    assert main(["send", "--config", str(path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "receiver dc1 (127.0.0.1:5555), bwlimit 4.0 MiB/s" in lines
    assert "receiver dc2 (127.0.0.1:5556)" in lines

    assert main(["send", "--config", str(path), "--dry-run", "--json"]) == 0
    doc_out = json.loads(capsys.readouterr().out)
    assert [r["bwlimit"] for r in doc_out["receivers"]] == [4 * MIB, 0]

    assert main(["send", "--config", str(path), "--dry-run", "--json", "--bwlimit", "1.5M"]) == 0
    doc_out = json.loads(capsys.readouterr().out)
    assert [r["bwlimit"] for r in doc_out["receivers"]] == [int(1.5 * MIB)] * 2


def test_attempt_summary_and_json_carry_the_cap() -> None:
    report = AttemptReport("dc1", "127.0.0.1:5555", [DirReport(0, "/d", complete=True)], bwlimit=0)
    assert "bwlimit" not in attempt_summary(report)
    assert report.to_dict()["bwlimit"] == 0
    report.bwlimit = 4 * MIB
    assert attempt_summary(report).endswith(", bwlimit 4.0 MiB/s")
    assert report.to_dict()["bwlimit"] == 4 * MIB
    assert format_rate(512) == "512 B/s" and format_rate(0) == "unlimited"


# --- the bucket ---------------------------------------------------------------------------


class FakeClock:
    """Time that moves only when the bucket sleeps (or a test says so)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def bucket(rate: float, clock: FakeClock) -> TokenBucket:
    return TokenBucket(rate, clock=clock, sleep=clock.sleep)


def test_bucket_starts_empty_and_paces_to_the_rate() -> None:
    clock = FakeClock()
    b = bucket(1000, clock)
    b.take(500)
    assert clock.sleeps == [0.5]  # nothing saved up at the start
    b.take(250)
    assert clock.sleeps == [0.5, 0.25]
    assert clock.now == pytest.approx(100.75)


def test_idle_time_saves_only_a_short_burst() -> None:
    clock = FakeClock()
    b = bucket(10_000, clock)
    clock.now += 60.0  # a minute waiting for verdicts
    b.take(10_000)
    # only BURST_SECONDS of the idle minute count
    assert clock.sleeps == [pytest.approx(1.0 - BURST_SECONDS)]


def test_tiny_waits_are_carried_over_not_slept() -> None:
    clock = FakeClock()
    b = bucket(1_000_000, clock)
    for _ in range(10):
        b.take(100)  # 0.1 ms each: under MIN_SLEEP
    assert clock.sleeps == []
    for _ in range(10):
        b.take(100)
    assert len(clock.sleeps) == 1 and clock.sleeps[0] >= MIN_SLEEP
    assert clock.now - 100.0 == pytest.approx(2000 / 1_000_000)  # the debt, paid at once


@settings(max_examples=60, deadline=None)
@given(
    rate=st.integers(min_value=512, max_value=64 * MIB),
    writes=st.lists(st.integers(min_value=1, max_value=300_000), min_size=1, max_size=60),
    gaps=st.lists(st.floats(min_value=0.0, max_value=0.2), min_size=0, max_size=60),
)
def test_rate_over_a_round_holds_whatever_the_writes(
    rate: int, writes: list[int], gaps: list[float]
) -> None:
    """Bytes written over the elapsed time never beat the cap by more than the saved
    burst and one deferred wait, and busy writing never falls short of it."""
    clock = FakeClock()
    b = bucket(rate, clock)
    start = clock.now
    idle = 0.0
    for i, n in enumerate(writes):
        gap = gaps[i] if i < len(gaps) else 0.0
        clock.now += gap  # the round doing something else
        idle += gap
        b.take(n)
    total = sum(writes)
    elapsed = clock.now - start
    assert elapsed >= total / rate - len(writes) * BURST_SECONDS - MIN_SLEEP - 1e-9
    assert elapsed <= total / rate + idle + 1e-6  # never slower than the cap plus idle time
    if not gaps:  # writing all the time: exactly the cap, give or take one deferred wait
        assert elapsed == pytest.approx(total / rate, abs=MIN_SLEEP + 1e-9)


class Recorder:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.writes: list[tuple[float, bytes]] = []

    def recv(self, n: int) -> bytes:  # pragma: no cover - the Stream protocol
        return b""

    def sendall(self, data: bytes | memoryview) -> None:
        self.writes.append((self.clock.now, bytes(data)))


def test_paced_sendall_pays_and_sends_in_pieces() -> None:
    clock = FakeClock()
    out = Recorder(clock)
    b = bucket(4 * MIB, clock)
    assert b.piece == MAX_PIECE
    data = bytes(range(256)) * 4096  # 1 MiB
    paced_sendall(out, memoryview(data), b)
    assert b"".join(w for _, w in out.writes) == data
    assert all(len(w) <= MAX_PIECE for _, w in out.writes)
    assert out.writes[-1][0] - 100.0 == pytest.approx(0.25)  # 1 MiB at 4 MiB/s
    # slow caps send smaller pieces, so the link sees no long silences
    assert bucket(1000, clock).piece == 512 and bucket(100 * KIB, clock).piece == 10 * KIB


def test_no_bucket_is_one_plain_write() -> None:
    clock = FakeClock()
    out = Recorder(clock)
    paced_sendall(out, b"x" * (1 << 20), None)
    assert len(out.writes) == 1 and clock.sleeps == []


def test_a_bucket_needs_a_rate() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0)
