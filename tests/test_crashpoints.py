"""The crash-point switch and its registry (the crash tests live in tests/reliability)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_helpers import state

import sealsync
from sealsync import crashpoints
from sealsync.crashpoints import (
    ENV_STOP,
    LOADER_POINTS,
    POINTS,
    RECEIVER_POINTS,
    RECOVERY_POINTS,
    SENDER_POINTS,
    crash_point,
    parse_spec,
)

ROOT = Path(sealsync.__file__).parent.parent
SOURCES = [ROOT / name for name in ("sealsync", "sender", "receiver", "spark_loader")]
CALL = re.compile(r"""crash_point\(\s*["']([^"']+)["']\s*\)""")


def test_spec_parses_points_counts_and_lists() -> None:
    assert parse_spec("") == {}
    assert parse_spec("sender.file.sent") == {"sender.file.sent": 1}
    assert parse_spec(" sender.file.sent:3 , receiver.staged ") == {
        "sender.file.sent": 3,
        "receiver.staged": 1,
    }


@pytest.mark.parametrize("spec", ["sender.nowhere", "sender.file.sent:0", "receiver.staged:x"])
def test_spec_refuses_unknown_points_and_bad_counts(spec: str) -> None:
    with pytest.raises(ValueError, match="^SEALSYNC_CRASH_AT: "):
        parse_spec(spec)
    with pytest.raises(ValueError, match="^SEALSYNC_STOP_AT: "):  # names the variable read
        parse_spec(spec, ENV_STOP)


def test_unset_environment_makes_every_point_a_no_op() -> None:
    assert crashpoints.ACTIVE is False  # the test run itself sets none of the variables
    crash_point("sender.file.sent")
    crash_point("not even declared")  # not checked: production pays one constant test


@pytest.mark.slow
def test_the_nth_hit_kills_the_process_with_sigkill(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    script = (
        "from sealsync.crashpoints import crash_point\n"
        "for i in range(1, 6):\n"
        "    crash_point('sender.file.sent')\n"
        "    crash_point('receiver.staged')\n"
        "    print(i, flush=True)\n"
    )
    env = {"SEALSYNC_CRASH_AT": "sender.file.sent:3", "SEALSYNC_CRASH_TRACE": str(trace)}
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env={**_base_env(), **env},
    )
    assert result.returncode == -9
    assert result.stdout == "1\n2\n"
    assert trace.read_text().split() == ["sender.file.sent", "receiver.staged"] * 2 + [
        "sender.file.sent"
    ]


@pytest.mark.slow
def test_the_nth_hit_of_a_stop_point_freezes_the_process_until_continued() -> None:
    script = (
        "from sealsync.crashpoints import crash_point\n"
        "for i in range(1, 4):\n"
        "    crash_point('sender.file.sent')\n"
        "    print(i, flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**_base_env(), "SEALSYNC_STOP_AT": "sender.file.sent:2"},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "1\n"
        deadline = time.monotonic() + 30
        while state(proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state(proc.pid) == "T"  # stopped at the second hit, before printing 2
        proc.send_signal(signal.SIGCONT)
        assert proc.stdout.read() == "2\n3\n"
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.mark.slow
def test_an_undeclared_point_fails_under_a_trace_run(tmp_path: Path) -> None:
    script = "from sealsync.crashpoints import crash_point\ncrash_point('sender.typo')\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env={**_base_env(), "SEALSYNC_CRASH_TRACE": str(tmp_path / "t")},
    )
    assert result.returncode == 1
    assert "crash point 'sender.typo' is not declared" in result.stderr


def test_registry_is_exactly_the_points_the_code_uses() -> None:
    used: dict[str, list[str]] = {}
    for path in sorted(p for source in SOURCES for p in source.rglob("*.py")):
        if path.name == "crashpoints.py":
            continue
        for name in CALL.findall(path.read_text(encoding="utf-8")):
            used.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert set(used) == POINTS
    assert SENDER_POINTS.isdisjoint(RECEIVER_POINTS)
    assert all(p.startswith("sender.") for p in SENDER_POINTS)
    assert all(p.startswith("receiver.") for p in RECEIVER_POINTS)
    assert all(p.startswith("loader.") for p in LOADER_POINTS)
    assert RECOVERY_POINTS < POINTS
    sender_files = {f for p in SENDER_POINTS for f in used[p]}
    receiver_files = {f for p in RECEIVER_POINTS for f in used[p]}
    assert all(f.startswith("sender/") for f in sender_files), sender_files
    assert all(f.startswith("receiver/") for f in receiver_files), receiver_files
    loader_files = {f for p in LOADER_POINTS for f in used[p]}
    assert all(f.startswith("spark_loader/") for f in loader_files), loader_files


def _base_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SEALSYNC_CRASH", "SEALSYNC_STOP"))
    }
    env["PYTHONPATH"] = str(ROOT)
    return env
