"""Sizes and times as people read them, for every role's log lines and status.

A receiver's log, a sender's status and the command line all say "1.5 MiB" and
"2026-01-01T10:00:00+00:00" the same way, so the wording lives below all of them.
"""

from __future__ import annotations

import datetime as dt


def human_bytes(n: float) -> str:
    """``512 B``, ``1.5 MiB``: binary units, one decimal above bytes."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - loop always returns


def iso_time(ts: object) -> str | None:
    """A Unix time as ISO 8601 in UTC to the second; None for anything that is not a
    number (a record read from disk may hold null, or junk)."""
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")
