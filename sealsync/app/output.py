"""What the commands print: progress on a terminal, one summary line under cron.

A person at a terminal wants to see a long transfer move (bytes, rate, ETA); cron
mails whatever a job prints, so without a terminal there are no bars and no control
characters, only one summary line per receiver that shipped or deleted something
(or left something undone), and one line per problem; a round with nothing to do
prints nothing unless ``-v``.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from sealsync.printable import printable, unescaped
from sealsync.units import human_bytes

MIB = 1024 * 1024


def format_rate(rate: int) -> str:
    """A bandwidth cap for people: ``4.0 MiB/s``, or ``unlimited`` for 0."""
    return f"{human_bytes(rate)}/s" if rate else "unlimited"


def _eta(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class TerminalProgress:
    """A one-line progress display for ``sync_to_receiver``'s ``progress`` callback.

    Draws only when ``stream`` is a terminal (and not quiet), at most ten times a
    second, and erases itself when a data dir ends so summaries print on a clean line.
    """

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None):
        self.label = printable(label)
        # its own \r and padding, not escaped; what it draws is escaped here
        self.stream = unescaped(stream or sys.stderr)
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._total = 0
        self._sent = 0
        self._started = time.monotonic()
        self._drawn = 0.0
        self._width = 0

    def __call__(self, event: str, **fields: Any) -> None:
        if not self.enabled:
            return
        if event == "dir_start":
            self._total, self._sent = int(fields.get("bytes", 0)), 0
            self._started = time.monotonic()
        elif event == "bytes":
            self._sent = int(fields.get("sent", self._sent))
            self._total = int(fields.get("total", self._total)) or self._total
            self._draw()
        elif event in ("dir_end", "retry"):
            self.clear()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._drawn < 0.1:
            return
        self._drawn = now
        elapsed = max(now - self._started, 1e-6)
        rate = self._sent / elapsed
        line = f"{self.label}: {human_bytes(self._sent)}"
        if self._total:
            pct = 100.0 * self._sent / self._total
            line += f" / {human_bytes(self._total)} ({pct:.0f}%)"
        line += f"  {human_bytes(rate)}/s"
        if self._total and rate > 0 and self._sent < self._total:
            line += f"  ETA {_eta((self._total - self._sent) / rate)}"
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def clear(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


def attempt_summary(report: Any) -> str:
    """One line per receiver: what a cron mail or a log grep needs."""
    d = report.to_dict()
    dirs = d["dirs"]
    deleted = sum(len(x["deleted"]) for x in dirs)
    refused = sum(len(x["refused"]) for x in dirs)
    failed = sum(len(x["failed"]) for x in dirs)
    seconds = d["seconds"] or 0.0
    rate = d["shipped_bytes"] / seconds if seconds else 0.0
    state = "ok" if d["ok"] else "INCOMPLETE"
    cap = f", bwlimit {format_rate(d['bwlimit'])}" if d.get("bwlimit") else ""
    found = [x["reconcile"] for x in dirs if x.get("reconcile") is not None]
    if found:
        merged = {k: [n for f in found for n in f[k]] for k in ("missing", "different", "extra")}
        cap += f"; reconcile: {reconcile_counts(merged)}"
    return (
        f"{d['receiver']} ({d['address']}): {state}: shipped {d['shipped_files']} files "
        f"({human_bytes(d['shipped_bytes'])}, {human_bytes(rate)}/s), deleted {deleted}, "
        f"refused {refused}, failed {failed}, {seconds:.1f} s{cap}"
    )


def reconcile_counts(found: dict[str, list[str]]) -> str:
    """``2 missing, 1 different, 3 extra`` on the receiver (send --reconcile)."""
    return (
        f"{len(found['missing'])} missing, {len(found['different'])} different, "
        f"{len(found['extra'])} extra on the receiver"
    )


def attempt_problems(report: Any) -> list[str]:
    """One line per file left unsynced and per data dir that did not finish."""
    lines = []
    for x in report.to_dict()["dirs"]:
        if x["note"]:
            lines.append(f"{report.receiver}: {x['data_dir']}: {x['note']}")
        for name, why in sorted(x["refused"].items()):
            lines.append(f"{report.receiver}: refused {name}: {why}")
        for name, why in sorted(x["failed"].items()):
            lines.append(f"{report.receiver}: not synced {name}: {why}")
    return lines


def summary_wanted(report: Any, verbose: int = 0) -> bool:
    """Whether a round's summary goes to stdout: cron mails any output, so a round that
    shipped and deleted nothing and left nothing undone stays silent unless ``-v``."""
    if verbose > 0 or not report.ok or any(d.reconcile is not None for d in report.dirs):
        return True  # a reconcile was asked for by hand: its findings are the answer
    return bool(report.shipped_files) or any(d.deleted for d in report.dirs)
