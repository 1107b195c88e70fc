"""``sealsync status`` of a loader config: the last run, what is pending, the table.

Read-only, no lock: safe while a run is going (the answer is then a snapshot). The
last run comes from ``last_run.json`` (:mod:`.lastrun`), the table's totals from the
ingest state, and what is pending from a listing of the receiver's data dirs against
that state: files not in the table yet, and files in the table the receiver no longer
lists (whose rows leave only on evidence, :mod:`.removals`); a restored copy a run
matched by content counts as the file it was matched to (:mod:`.restored`). The senders whose files
waited in the last run, and why, are named (``held``: one sender's trouble, such as a
folder gone or a file it cannot identify, holds its files alone); so is a sender whose
listing is incomplete now (``troubled``), which the next run will hold. A load in
progress is named with its pid and start (``running``, :mod:`.running`): the last run
is then the one before it, and what is pending is what it is loading. A following
loader (``load --follow``) is named with its pid and the lag of its last run
(``following``, :mod:`.follow`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sealsync.config import LoaderConfig
from sealsync.units import iso_time
from spark_loader import lastrun, restored
from spark_loader.discovery import discover
from spark_loader.follow import read_follower
from spark_loader.running import running_load
from spark_loader.state import load_state


def loader_status(config: LoaderConfig) -> dict[str, Any]:
    """The status document of one loader (``--json`` prints it as it is)."""
    state_dir = Path(config.state_dir)
    state = load_state(state_dir) if state_dir.is_dir() else None
    recorded = state.files if state is not None else {}
    found = discover(list(config.receiver_data_dirs))
    files = found.files
    if state is not None:  # a copy matched by content counts as the file it matched
        files = restored.match(state, recorded, files, compare=False).files
    listed = {f.file_id for f in files}
    last = lastrun.read(state_dir)
    now = running_load(state_dir)
    follower = read_follower(state_dir)
    doc: dict[str, Any] = {
        "role": "loader",
        "table_path": str(config.table_path),
        "state_dir": str(config.state_dir),
        "running": None if now is None else {"pid": now.pid, "started": iso_time(now.started)},
        "following": None
        if follower is None
        else {
            "pid": follower.get("pid"),
            "started": iso_time(follower.get("started")),
            "window": follower.get("window"),
            "last_lag_seconds": last.get("lag_seconds") if last else None,
        },
        "last_run": None,
        "last_success": iso_time(last.get("last_success")) if last else None,
        "quarantined": sorted(lastrun.quarantined(state_dir)),
        "held": lastrun.held(state_dir),
        "troubled": found.troubled,
        "pending": {
            "new_files": len(listed - recorded.keys()),
            "missing_files": len(recorded.keys() - listed),
        },
        "table": {
            "files": len(recorded),
            "rows": sum(r.rows for r in recorded.values()),
        },
    }
    if last is not None:
        doc["last_run"] = {
            "started": iso_time(last.get("start")),
            "ended": iso_time(last.get("end")),
            "outcome": last.get("outcome"),
            "kind": last.get("kind"),
            "error": last.get("error"),
            **{key: last.get(key, 0) for key in (*lastrun.FIGURES, "skipped")},
            "ttl_now": last.get("ttl_now"),
        }
    return doc


def render_loader(doc: dict[str, Any]) -> list[str]:
    """Human lines for a loader status document (the caller escapes control characters)."""
    lines = [f"loader table {doc['table_path']} (state in {doc['state_dir']})"]
    now = doc.get("running")
    if now is not None:
        pid = f"pid {now['pid']}" if now["pid"] is not None else "pid unknown"
        since = f", started {now['started']}" if now["started"] else ""
        lines.append(
            f"  running:      a load is in progress ({pid}{since}); the last run below is "
            "the one before it"
        )
    following = doc.get("following")
    if following is not None:
        lag = following.get("last_lag_seconds")
        lag_text = (
            f"; its last run committed {lag:.1f} s after the receiver's load"
            if isinstance(lag, int | float)
            else ""
        )
        lines.append(
            f"  following:    pid {following['pid']} since {following['started'] or '?'} "
            f"(window {following['window']} s){lag_text}"
        )
    run = doc["last_run"]
    if run is None:
        lines.append("  last run:     never")
    else:
        text = f"{run['ended'] or '?'} {run['outcome']}"
        if run["error"]:
            text += f": {run['error']}"
        lines.append(f"  last run:     {text}")
        lines.append(
            f"                ingested {run['ingested']} files ({run['rows_written']} rows), "
            f"removed {run['removed']} ({run['rows_removed']} rows), skipped {run['skipped']}, "
            f"kept missing {run['kept_missing']}; started {run['started'] or '?'}"
        )
        if run.get("ttl_now") is not None:
            lines.append(
                f"                TTL applied at now = {run['ttl_now']} (the databases' "
                f"precision); {run['expired']} files rewritten for rows expired since"
            )
    lines.append(f"  last success: {doc['last_success'] or 'never'}")
    if doc.get("quarantined"):
        lines.append(
            f"  quarantined:  {len(doc['quarantined'])} senders whose files killed a Spark "
            f"job (their files load in jobs of their own): {', '.join(doc['quarantined'])}"
        )
    held = doc.get("held") or {}
    if held:
        lines.append(
            f"  held:         the files of {len(held)} senders waited in the last run "
            "(nothing of theirs loaded or removed; the others loaded):"
        )
        lines += [f"                {sender}: {why}" for sender, why in sorted(held.items())]
    troubled = {s: why for s, why in (doc.get("troubled") or {}).items() if s not in held}
    if troubled:
        lines.append(f"  troubled:     {len(troubled)} senders whose files the next run holds:")
        lines += [f"                {sender}: {why}" for sender, why in sorted(troubled.items())]
    pending = doc["pending"]
    lines.append(
        f"  pending:      {pending['new_files']} new files to ingest, "
        f"{pending['missing_files']} in the table but missing from the receiver"
    )
    table = doc["table"]
    lines.append(f"  table:        {table['files']} files, {table['rows']} rows")
    return lines
