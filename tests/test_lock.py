"""The per-receiver sender lock: real files, a real second process, exit code 75.

filelock does not lock under pyfakefs, so everything here uses tmp_path.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from config_helpers import held_elsewhere, make_sender

from sealsync.errors import EXIT_LOCKED, LockHeld
from sender.lock import receiver_lock

pytestmark = pytest.mark.slow  # lock holders are other processes

ROOT = Path(__file__).resolve().parent.parent
SEALSYNC = [sys.executable, "-m", "sealsync"]


def lock_path(schema_dir: Path, key: str = "127.0.0.1_5555") -> Path:
    return schema_dir / "sync" / key / "sync.lock"


def test_lock_lives_in_the_schema_dir_and_is_released(tmp_path: Path) -> None:
    with receiver_lock(tmp_path, "127.0.0.1", 5555) as path:
        assert path == lock_path(tmp_path)
        assert path.exists()
    # released: another process can take it now
    with held_elsewhere(lock_path(tmp_path)):
        pass


def test_lock_held_by_another_process_raises_at_once(tmp_path: Path) -> None:
    path = lock_path(tmp_path)
    with held_elsewhere(path), pytest.raises(LockHeld) as info:
        with receiver_lock(tmp_path, "127.0.0.1", 5555):
            pytest.fail("the lock was taken twice")
    assert info.value.exit_code == EXIT_LOCKED == 75
    assert str(info.value) == f"another sender holds the lock for 127.0.0.1:5555 ({path})"
    # and once the other process let go, it is ours
    with receiver_lock(tmp_path, "127.0.0.1", 5555):
        pass


def test_locks_of_different_receivers_are_independent(tmp_path: Path) -> None:
    with held_elsewhere(lock_path(tmp_path)):
        with receiver_lock(tmp_path, "127.0.0.1", 5556) as path:
            assert path == lock_path(tmp_path, "127.0.0.1_5556")


def other_process_can_lock(path: Path) -> bool:
    probe = (
        "import sys\nfrom filelock import FileLock, Timeout\n"
        "try:\n    FileLock(sys.argv[1], timeout=0).acquire()\n"
        "except Timeout:\n    sys.exit(75)\n"
    )
    rc = subprocess.run([sys.executable, "-c", probe, str(path)], timeout=30).returncode
    assert rc in (0, 75)
    return rc == 0


def test_lock_is_reentrant_within_one_process(tmp_path: Path) -> None:
    path = lock_path(tmp_path)
    with receiver_lock(tmp_path, "127.0.0.1", 5555):
        with receiver_lock(tmp_path, "127.0.0.1", 5555):
            assert not other_process_can_lock(path)
        assert not other_process_can_lock(path)  # the inner release kept the outer hold
    assert other_process_can_lock(path)


def test_send_exits_75_when_another_sender_holds_the_lock(tmp_path: Path) -> None:
    config = make_sender(tmp_path)
    with held_elsewhere(lock_path(tmp_path / "edge/schema")):
        result = subprocess.run(
            [*SEALSYNC, "send", "--config", str(config)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    assert result.returncode == 75
    assert result.stdout == ""
    assert result.stderr == (
        "sealsync: error: another sender holds the lock for 127.0.0.1:5555 "
        f"({lock_path(tmp_path / 'edge/schema')})\n"
    )
