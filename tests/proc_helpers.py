"""What ``/proc`` says of a process, for tests that stop, kill and reap real ones."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first, then the
    parent's PID), or None once the process is gone. The name may hold spaces and
    parentheses, so the fields start after its last ``)``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def state(pid: int) -> str | None:
    """``R``, ``S``, ``T`` (stopped), ``Z`` (exited, not reaped)..., or None if gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def alive(pid: int) -> bool:
    """Running, sleeping or stopped: not gone and not a zombie."""
    return state(pid) not in (None, "Z")


def clip(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters, ``...`` marking a cut: a command line in
    a one-line report."""
    return text if len(text) <= width else text[: width - 3] + "..."


def command_line(pid: int) -> str:
    """The command line of ``pid``, its words joined by spaces; ``?`` once it is gone."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return " ".join(w.decode(errors="replace") for w in words if w)


class RssSampler:
    """Peak VmRSS of a process (and of it with all its descendants: a receiver's or a
    command's worker processes), sampled every ``every`` seconds while in a ``with``."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.pid = pid
        self.every = every
        self.peak_kb = 0
        self.peak_tree_kb = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            own = _rss_kb(self.pid)
            if own is None:
                return
            tree = own + sum(_rss_kb(p) or 0 for p in _descendants(self.pid))
            self.peak_kb = max(self.peak_kb, own)
            self.peak_tree_kb = max(self.peak_tree_kb, tree)
            self.samples += 1


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return 0


def _descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
