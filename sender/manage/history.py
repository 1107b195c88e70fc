"""``last_round.json``: what the last finished round to a receiver did, for ``status``.

Written atomically per data dir when a round ends (successful or not), beside
``last_local_files.txt``. It is a report, never an input to selection or recovery, so
losing it costs nothing but a line of ``sealsync status``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sealsync import durable
from sender.manage.layout import SenderPaths

RECORD_FILE = "last_round.json"


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
