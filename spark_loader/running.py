"""A ``sealsync load`` in progress on a state dir: the process holding ``load.lock``.

``status`` must say that a load is running (its figures are then the previous run's,
and what it shows as pending is being loaded), without disturbing it: a probe that
took the lock, even for an instant, could make a ``load`` starting at that moment stop
with exit 75. So the kernel is asked instead: ``/proc/locks`` lists every ``flock``
with its holder's pid and the locked file's device and inode, read without taking
anything. Where that list cannot be read or does not name the file's device (a file
system that reports another one), the lock is probed with a shared lock after all,
and the pid is then unknown.

The run's start is its process's, from ``/proc/<pid>/stat`` and the boot time.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from spark_loader.state import LOCK_FILE

PROC_LOCKS = Path("/proc/locks")


@dataclass(frozen=True)
class Running:
    """A load holding the lock: its pid and start (None where the system does not say)."""

    pid: int | None
    started: float | None


def running_load(state_dir: Path) -> Running | None:
    """The load holding ``state_dir``'s lock, or None when no load runs there."""
    path = Path(state_dir) / LOCK_FILE
    try:
        st = os.stat(path)
    except OSError:  # never run (no lock file), or unreadable: nothing to say it runs
        return None
    holders = _flock_holders(st.st_dev, st.st_ino)
    if holders is None:
        return Running(None, None) if _probe(path) else None
    if not holders:
        return None
    pid = holders[0]
    return Running(pid, process_start(pid))


def _flock_holders(dev: int, ino: int) -> list[int] | None:
    """The pids holding an exclusive ``flock`` on the file (dev, ino), as ``/proc/locks``
    says; None when it cannot tell (unreadable, or the inode listed on another device)."""
    try:
        text = PROC_LOCKS.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    want = (os.major(dev), os.minor(dev), ino)
    pids: list[int] = []
    same_inode = False
    for line in text.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 8744 fe:00:10174555 0 EOF"; waiters have "->"
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        parts = fields[5].split(":")
        try:
            where = (int(parts[0], 16), int(parts[1], 16), int(parts[2]))
            pid = int(fields[4])
        except (ValueError, IndexError):
            continue
        if where == want:
            pids.append(pid)
        elif where[2] == ino:
            same_inode = True
    if not pids and same_inode:
        return None
    return pids


def _probe(path: Path) -> bool:
    """Whether another process holds the lock, by asking for it shared for an instant."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def process_start(pid: int) -> float | None:
    """When process ``pid`` started (Unix time), or None if the system does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        ticks = int(stat[stat.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")
