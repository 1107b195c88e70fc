"""What the sender's rounds did, for ``status`` and the metrics.

Two records, both reports and never inputs to selection or recovery (losing them
costs nothing but lines of ``sealsync status`` and the metrics' history):

* ``last_round.json`` per data dir (beside ``last_local_files.txt``): what the last
  round that ran to its end did there, written atomically when the round ends.
* ``rounds.jsonl`` per receiver (beside ``sync.lock``): one JSON line per *attempt*,
  whatever its end — ok, failed before or during the round (receiver down or
  refusing, a local file that cannot be written), interrupted (Ctrl-C, SIGTERM) or
  busy (another sender held the lock). A failed attempt must be as visible as a good
  one: before this file, a receiver down for a day left ``status`` showing the last
  good round. Each line carries running totals and the time of the last success, so
  the file can be cut to its last lines without losing either.

Lines are appended with an fsync (``durable.AppendLog``) under ``rounds.lock``, a
short lock of its own, so that a run refused by ``sync.lock`` can record its attempt
while the holder records its own. Once the file is a tenth longer than
``HISTORY_LINES`` it is cut back to the last ``HISTORY_LINES`` by an atomic rewrite.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from sealsync import durable
from sealsync.errors import LocalIOError, describe_os_error
from sender.manage.layout import SchemaPaths, SenderPaths

RECORD_FILE = "last_round.json"

HISTORY_LINES = 2000
"""Attempts kept per receiver: a week of rounds every five minutes."""
HISTORY_LOCK_WAIT = 10.0
"""Longest an attempt waits to record itself while another run records its own."""

OK = "ok"
FAILED = "failed"
INTERRUPTED = "interrupted"
BUSY = "busy"
OUTCOMES = (OK, FAILED, INTERRUPTED, BUSY)


def record_path(paths: SenderPaths) -> Path:
    return paths.folder / RECORD_FILE


def write_round_record(paths: SenderPaths, summary: dict[str, Any]) -> None:
    """Record a finished round; ``last_ok`` keeps the time of the last successful one."""
    previous = read_round_record(paths) or {}
    now = time.time()
    record = {
        "finished": now,
        "ok": bool(summary.get("ok")),
        "shipped": len(summary.get("shipped", [])),
        "shipped_bytes": int(summary.get("shipped_bytes", 0)),
        "deleted": len(summary.get("deleted", [])),
        "refused": len(summary.get("refused", {})),
        "failed": len(summary.get("failed", {})),
        "note": summary.get("note"),
        "last_ok": now if summary.get("ok") else previous.get("last_ok"),
    }
    paths.folder.mkdir(parents=True, exist_ok=True)
    durable.atomic_write(record_path(paths), json.dumps(record, sort_keys=True) + "\n")


def read_round_record(paths: SenderPaths) -> dict[str, Any] | None:
    try:
        data = json.loads(record_path(paths).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------- rounds.jsonl


@dataclass(frozen=True)
class Attempt:
    """One attempt to sync with one receiver: one line of ``rounds.jsonl``."""

    receiver: str
    address: str
    start: float
    """Unix time the attempt began (before the lock)."""
    end: float
    outcome: str
    """One of ``OUTCOMES``."""
    kind: str | None = None
    """Why a failed attempt failed, as metrics count it (``SealsyncError.kind``,
    ``incomplete`` for a round that ended with files left); None when ok."""
    error: str | None = None
    """The one-line reason the CLI printed; None when ok."""
    new: int = 0
    """Files the receiver verified."""
    deleted: int = 0
    """Deletions the receiver acknowledged."""
    refused: int = 0
    """Files the receiver refused (or that wait for a device release)."""
    failed: int = 0
    """Files left unsynced after their retries."""
    bytes: int = 0
    """Bytes of the verified files (data files and sidecars)."""
    schema_bytes: int = 0
    connections: int = 0
    """Connections the round made (0: it never got to connect)."""

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


#: The running totals each line carries: the counts summed over every attempt.
TOTALS = ("new", "deleted", "refused", "failed", "bytes", "schema_bytes")


def append_attempt(
    paths: SchemaPaths, attempt: Attempt, keep: int = HISTORY_LINES
) -> dict[str, Any]:
    """Append ``attempt`` durably, with totals and last success; returns the line's dict.

    Raises LocalIOError (path and reason) when the record cannot be written.
    """
    try:
        paths.folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(paths.history_lock, timeout=HISTORY_LOCK_WAIT)
        try:
            lock.acquire()
        except Timeout:
            raise LocalIOError(
                f"cannot record the attempt in {paths.history}: {paths.history_lock} "
                f"stayed locked for {HISTORY_LOCK_WAIT:g} s"
            ) from None
        try:
            lines = durable.read_lines(paths.history)
            line = _with_totals(attempt, _last_entry(lines))
            text = json.dumps(line, sort_keys=True, separators=(",", ":"))
            with durable.AppendLog(paths.history) as log:
                log.append(text)
            if len(lines) + 1 > keep + keep // 10:
                durable.write_lines(paths.history, [*lines, text][-keep:])
        finally:
            lock.release()
    except OSError as exc:
        raise LocalIOError(describe_os_error(exc, "record the attempt in")) from exc
    return line


def _with_totals(attempt: Attempt, previous: dict[str, Any] | None) -> dict[str, Any]:
    prev_totals = (previous or {}).get("totals") or {}
    totals: dict[str, Any] = {k: _int(prev_totals.get(k)) + getattr(attempt, k) for k in TOTALS}
    for group, key in (("outcomes", attempt.outcome), ("failures", attempt.kind)):
        counts = {k: _int(v) for k, v in dict(prev_totals.get(group) or {}).items()}
        if key is not None and (group == "outcomes" or attempt.outcome == FAILED):
            counts[key] = counts.get(key, 0) + 1
        totals[group] = counts
    last_success = attempt.end if attempt.outcome == OK else (previous or {}).get("last_success")
    return {**asdict(attempt), "last_success": last_success, "totals": totals}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def read_history(paths: SchemaPaths) -> list[dict[str, Any]]:
    """The recorded attempts, oldest first; a torn or damaged line is left out."""
    entries = (_entry(line) for line in durable.read_lines(paths.history))
    return [e for e in entries if e is not None]


def last_attempt(paths: SchemaPaths) -> dict[str, Any] | None:
    """The last recorded attempt (it carries the totals and the last success), or None.

    Only the last lines are decoded: every run and every ``status`` asks for it.
    """
    return _last_entry(durable.read_lines(paths.history))


def last_success_time(entry: dict[str, Any] | None) -> float | None:
    """When the last successful attempt ended, from the last line (even if the line of
    that success has been cut from the file since)."""
    value = (entry or {}).get("last_success")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _entry(line: str) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and entry.get("outcome") in OUTCOMES else None


def _last_entry(lines: list[str]) -> dict[str, Any] | None:
    for line in reversed(lines):
        entry = _entry(line)
        if entry is not None:
            return entry
    return None
