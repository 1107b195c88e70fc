"""What ``/proc`` says of a process, for tests that stop, kill and reap real ones."""

from __future__ import annotations

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
