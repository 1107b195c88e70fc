"""Cron-quiet: with ``-q`` a run stopped by the lock (exit 75) prints nothing at all,
while every other exit keeps its line (real processes, real locks)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from config_helpers import HOLDER, make_receiver, make_sender

pytestmark = pytest.mark.slow  # lock holders and commands are other processes

ROOT = Path(__file__).resolve().parent.parent
SEALSYNC = [sys.executable, "-m", "sealsync"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SEALSYNC, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


@contextmanager
def held_elsewhere(path: Path) -> Iterator[None]:
    """Hold the lock file at ``path`` from another process for the ``with`` body."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "locked\n"
        try:
            yield
        finally:
            proc.stdin.close()
            assert proc.wait(timeout=10) == 0


def sender_lock(root: Path) -> Path:
    return root / "edge/schema/sync/127.0.0.1_5555/sync.lock"


@pytest.mark.parametrize("where", [["-q", "send"], ["send", "-q"], ["send", "--quiet"]])
def test_send_locked_with_quiet_exits_75_printing_nothing(tmp_path: Path, where: list[str]) -> None:
    config = make_sender(tmp_path)
    with held_elsewhere(sender_lock(tmp_path)):
        quiet = run(*where, "--config", str(config))
        loud = run("send", "--config", str(config))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (75, "", "")
    assert loud.returncode == 75 and loud.stdout == ""
    assert loud.stderr.startswith("sealsync: error: another sender holds the lock")
    assert loud.stderr.count("\n") == 1


def test_other_exits_keep_their_line_with_quiet(tmp_path: Path) -> None:
    config = make_sender(tmp_path)  # its receiver (127.0.0.1:5555) is not running
    unreachable = run("send", "-q", "--config", str(config))
    assert unreachable.returncode == 1 and unreachable.stdout == ""
    assert unreachable.stderr.startswith("sealsync: error: ")
    assert unreachable.stderr.count("\n") == 1
    missing = run("send", "-q", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "nope.toml" in missing.stderr


def test_serve_locked_with_quiet_exits_75_printing_nothing(tmp_path: Path) -> None:
    config = make_receiver(tmp_path)
    with held_elsewhere(tmp_path / "dc/schema/sync/receiver.lock"):
        quiet = run("serve", "--init", "-q", "--config", str(config))
        loud = run("serve", "--config", str(config))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (75, "", "")
    assert loud.returncode == 75
    assert "another receiver" in loud.stderr and loud.stderr.count("\n") == 1
