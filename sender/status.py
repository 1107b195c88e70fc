"""``sealsync status`` of a sender config: per receiver, the last attempt and the last
success; per data dir, the last round, files synced, pending, refused.

Read-only: it takes no lock and changes nothing, so it is safe while a round runs (its
answer is then a snapshot of that moment).
"""

from __future__ import annotations

import uuid
from typing import Any

from sealsync.config import SenderConfig
from sealsync.units import human_bytes, iso_time
from sender.manage.history import last_attempt, last_success_time, read_round_record
from sender.manage.identity import sender_uuid
from sender.manage.layout import SchemaPaths, SenderPaths
from sender.plan import effective_last, plan_dir
from sender.transfer.refusals import read_refusals, refused_path


def sender_status(config: SenderConfig) -> dict[str, Any]:
    """The status document of one sender (``--json`` prints it as it is)."""
    receivers = []
    for r in config.receivers:
        dirs = []
        for data_dir in config.data_dirs:
            paths = SenderPaths(data_dir, r.host, r.port)
            synced, recovery = effective_last(paths)
            planned = plan_dir(data_dir, r)
            record = read_round_record(paths) or {}
            refusals = read_refusals(refused_path(paths))
            dirs.append(
                {
                    "data_dir": str(data_dir),
                    "last_round": iso_time(record.get("finished")),
                    "last_round_ok": record.get("ok"),
                    "last_successful_round": iso_time(record.get("last_ok")),
                    "synced_files": len(synced),
                    "pending_new": len(planned.new),
                    "pending_deleted": len(planned.deleted),
                    "rejected": [{"name": n, "reason": why} for n, why in planned.rejected],
                    "refused": [
                        {"name": n, "reason": ref.reason} for n, ref in sorted(refusals.items())
                    ],
                    "recovery_pending": recovery,
                }
            )
        last = last_attempt(SchemaPaths(config.schema_dir, r.host, r.port))
        receivers.append(
            {
                "name": r.name,
                "address": r.address,
                "last_attempt": _attempt_doc(last) if last is not None else None,
                "last_success": iso_time(last_success_time(last)),
                "data_dirs": dirs,
            }
        )
    return {
        "role": "sender",
        "uuid": str(uuid.UUID(sender_uuid(config.schema_dir))),
        "receivers": receivers,
    }


def _attempt_doc(line: dict[str, Any]) -> dict[str, Any]:
    """A history line as ``status`` shows it: times in ISO 8601, no running totals."""

    def count(key: str) -> int:
        value = line.get(key)
        return value if isinstance(value, int) else 0

    return {
        "started": iso_time(line.get("start")),
        "ended": iso_time(line.get("end")),
        "outcome": line.get("outcome"),
        "kind": line.get("kind"),
        "error": line.get("error"),
        "shipped_files": count("new"),
        "shipped_bytes": count("bytes"),
        "deleted_files": count("deleted"),
        "refused_files": count("refused"),
        "failed_files": count("failed"),
    }


def _attempt_line(attempt: dict[str, Any] | None) -> str:
    if attempt is None:
        return "never"
    text = f"{attempt['ended'] or '?'} {attempt['outcome']}"
    if attempt["error"]:
        return f"{text}: {attempt['error']}"
    return (
        f"{text}: shipped {attempt['shipped_files']} files "
        f"({human_bytes(attempt['shipped_bytes'])}), deleted {attempt['deleted_files']}"
    )


def render_sender(doc: dict[str, Any]) -> list[str]:
    """Human lines for a sender status document (the caller escapes control characters)."""
    lines = [f"sender {doc['uuid']}"]
    for r in doc["receivers"]:
        lines.append(f"receiver {r['name']} ({r['address']})")
        lines.append(f"  last attempt: {_attempt_line(r['last_attempt'])}")
        lines.append(f"  last success: {r['last_success'] or 'never'}")
        for d in r["data_dirs"]:
            lines.append(f"  data dir {d['data_dir']}")
            last = d["last_round"] or "never"
            state = {True: "ok", False: "incomplete", None: ""}[d["last_round_ok"]]
            lines.append(f"    last round:            {last} {state}".rstrip())
            lines.append(f"    last successful round: {d['last_successful_round'] or 'never'}")
            lines.append(f"    files synced:          {d['synced_files']}")
            lines.append(
                f"    pending:               {d['pending_new']} new, {d['pending_deleted']} deleted"
            )
            if d["recovery_pending"]:
                lines.append(f"    recovery pending:      {d['recovery_pending']}")
            lines.append(f"    refused:               {len(d['refused'])}")
            lines.extend(f"      {x['name']}: {x['reason']}" for x in d["refused"])
            if d["rejected"]:
                lines.append(f"    rejected names:        {len(d['rejected'])}")
                lines.extend(f"      {x['name']}: {x['reason']}" for x in d["rejected"])
    return lines
