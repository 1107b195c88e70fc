"""``<state_dir>/last_run.json``: what the last ``sealsync load`` did, however it ended.

``status`` shows it and the metrics textfile is written from it, so both say the same.
A run records itself at its end, failed or not (a missing or empty data dir, no
Java, a full disk, Ctrl-C): start, end, outcome (``ok``, ``failed``, ``interrupted``),
the error and its kind, what it ingested and removed, the senders whose files wait
and why (``held``: the others' went in), the table's totals after it,
the time of the last successful run, and running totals over all runs (the metrics'
counters, which must not go back when a run fails). A run stopped by the lock (another
``load`` holds it) records nothing: the run holding it records its own.

Replaced atomically (``durable.atomic_write``); an unreadable file reads as "never",
and the next run starts the totals again (Prometheus takes a counter reset in stride).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sealsync import durable
from sealsync.config import LoaderConfig
from sealsync.errors import LocalIOError, SealsyncError, describe_os_error
from spark_loader.metrics import write_loader_metrics
from spark_loader.outcomes import FAILED, INTERRUPTED, OK, OUTCOMES
from spark_loader.report import LoadReport
from spark_loader.state import load_state

LAST_RUN_FILE = "last_run.json"
#: The report's figures a run records (``LoadReport`` attributes).
FIGURES = (
    "ingested",
    "removed",
    "unchanged",
    "rows_written",
    "rows_removed",
    "kept_missing",
    "expired",
)
#: Which figures add up into the running totals.
SUMMED = ("ingested", "removed", "rows_written", "rows_removed")


def path(state_dir: Path) -> Path:
    return Path(state_dir) / LAST_RUN_FILE


def read(state_dir: Path) -> dict[str, Any] | None:
    """The last run's record, or None (never run, or unreadable)."""
    try:
        doc = json.loads(path(state_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("outcome") in OUTCOMES else None


def record(
    state_dir: Path,
    *,
    start: float,
    end: float,
    outcome: str,
    figures: dict[str, int],
    skipped: int,
    table_files: int,
    table_rows: int,
    error: str | None = None,
    kind: str | None = None,
    quarantined: list[str] | None = None,
    held: dict[str, str] | None = None,
    lag: float | None = None,
    ttl_now: int | None = None,
) -> dict[str, Any]:
    """Write this run's record, the totals carried on from the previous one."""
    previous = read(state_dir) or {}
    totals = _totals(previous.get("totals"))
    totals["runs"] += 1
    totals["outcomes"][outcome] = totals["outcomes"].get(outcome, 0) + 1
    if kind is not None:
        totals["failures"][kind] = totals["failures"].get(kind, 0) + 1
    for key in SUMMED:
        totals[key] += int(figures.get(key, 0))
    doc: dict[str, Any] = {
        "start": start,
        "end": end,
        "outcome": outcome,
        "error": error,
        "kind": kind,
        **{key: int(figures.get(key, 0)) for key in FIGURES},
        "skipped": skipped,
        "table_files": table_files,
        "table_rows": table_rows,
        "last_success": end if outcome == OK else previous.get("last_success"),
        "quarantined": sorted(quarantined or []),
        "held": dict(sorted((held or {}).items())),
        "lag_seconds": lag,
        "ttl_now": ttl_now,
        "totals": totals,
    }
    durable.atomic_write(path(state_dir), json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def quarantined(state_dir: Path) -> set[str]:
    """The senders the last run quarantined (a file of theirs killed its job alone)."""
    last = read(state_dir) or {}
    found = last.get("quarantined")
    return {str(u) for u in found} if isinstance(found, list) else set()


def held(state_dir: Path) -> dict[str, str]:
    """The senders whose files waited in the last run, and why."""
    last = read(state_dir) or {}
    found = last.get("held")
    if not isinstance(found, dict):
        return {}
    return {str(sender): str(why) for sender, why in found.items()}


def _totals(value: object) -> dict[str, Any]:
    """Running totals from an earlier record; anything malformed starts again at 0."""
    base: dict[str, Any] = {"runs": 0, "outcomes": {}, "failures": {}, **{k: 0 for k in SUMMED}}
    if not isinstance(value, dict):
        return base
    for key in ("runs", *SUMMED):
        if isinstance(value.get(key), int):
            base[key] = value[key]
    for key in ("outcomes", "failures"):
        counts = value.get(key)
        if isinstance(counts, dict):
            base[key] = {str(k): v for k, v in counts.items() if isinstance(v, int)}
    return base


def record_run(
    config: LoaderConfig,
    report: LoadReport,
    start: float,
    exc: BaseException | None,
    changes_since: float | None = None,
) -> None:
    """Write ``last_run.json`` and the metrics textfile for this run, however it ended
    (LocalIOError naming the file if one cannot be written). ``changes_since``: when
    the receiver made the first change this run took in (a following loader), so the
    record says how long after it the table had it (``lag_seconds``)."""
    if exc is None:
        outcome = OK if report.ok else FAILED
        kind = None if report.ok else "skipped_files"
        error = None if report.ok else _left(report)
    elif isinstance(exc, KeyboardInterrupt):
        outcome, kind, error = INTERRUPTED, None, "interrupted"
    else:
        outcome = FAILED
        kind = exc.kind if isinstance(exc, SealsyncError) else "internal"
        error = str(exc) or type(exc).__name__
    state = load_state(Path(config.state_dir))
    end = time.time()
    lag = None if changes_since is None or outcome != OK else max(0.0, end - changes_since)
    try:
        doc = record(
            Path(config.state_dir),
            start=start,
            end=end,
            outcome=outcome,
            figures={key: getattr(report, key) for key in FIGURES},
            skipped=len(report.skipped),
            table_files=len(state.files),
            table_rows=sum(r.rows for r in state.files.values()),
            error=error,
            kind=kind,
            quarantined=sorted(report.quarantined),
            held=report.held,
            lag=lag,
            ttl_now=report.ttl_now,
        )
    except OSError as err:
        raise LocalIOError(describe_os_error(err, "write the loader's last run record")) from err
    if config.metrics_textfile is not None:
        write_loader_metrics(config.metrics_textfile, doc)


def _left(report: LoadReport) -> str:
    """What a run that ended was left with: files skipped, senders whose files wait."""
    parts = []
    if report.skipped:
        parts.append(f"{len(report.skipped)} files skipped")
    if report.held:
        parts.append(f"the files of {len(report.held)} senders wait ({', '.join(report.held)})")
    return "; ".join(parts)
