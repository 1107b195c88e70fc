"""``sealsync status``: what an operator needs to know about a sender or a receiver.

Read-only: it takes no lock and changes nothing, so it is safe while a round runs or
the receiver serves (its answer is then a snapshot of that moment).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sealsync.config import LoaderConfig, ReceiverConfig, SenderConfig
from sealsync.printable import printable


def _when(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


def sender_status(config: SenderConfig) -> dict[str, Any]:
    """Per receiver: the last attempt and the last success; per data dir: last round,
    files synced, pending, refused."""
    from sender.manage.history import last_attempt, last_success_time, read_round_record
    from sender.manage.identity import sender_uuid
    from sender.manage.layout import SchemaPaths, SenderPaths
    from sender.plan import effective_last, plan_dir
    from sender.transfer.refusals import read_refusals, refused_path

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
                    "last_round": _when(record.get("finished")),
                    "last_round_ok": record.get("ok"),
                    "last_successful_round": _when(record.get("last_ok")),
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
                "last_success": _when(last_success_time(last)),
                "data_dirs": dirs,
            }
        )
    return {
        "role": "sender",
        "uuid": _dashed(sender_uuid(config.schema_dir)),
        "receivers": receivers,
    }


def _attempt_doc(line: dict[str, Any]) -> dict[str, Any]:
    """A history line as ``status`` shows it: times in ISO 8601, no running totals."""

    def count(key: str) -> int:
        value = line.get(key)
        return value if isinstance(value, int) else 0

    def stamp(key: str) -> str | None:
        value = line.get(key)
        return _when(value) if isinstance(value, int | float) else None

    return {
        "started": stamp("start"),
        "ended": stamp("end"),
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
    from sealsync.output import human_bytes

    return (
        f"{text}: shipped {attempt['shipped_files']} files "
        f"({human_bytes(attempt['shipped_bytes'])}), deleted {attempt['deleted_files']}"
    )


def _dashed(value: str) -> str:
    import uuid

    return str(uuid.UUID(value))


def receiver_status(config: ReceiverConfig) -> dict[str, Any]:
    """Whether a receiver runs on this storage (its lock, its pid), known senders,
    device count per owner, rounds in flight, files waiting to load."""
    from receiver.auth import SenderKeys
    from receiver.layout import sender_folders
    from receiver.load.apply import read_load_log
    from receiver.load.owners import DeviceOwners
    from receiver.lock import holder
    from sealsync.synclog import read_sync_log

    running = holder(config.schema_dir, config.data_dirs)
    with DeviceOwners(config.schema_dir) as owners:
        by_owner = owners.by_owner()
    folders = sender_folders(list(config.data_dirs))
    last_round: dict[str, float] = {}
    in_flight = []
    for folder in folders:
        try:
            mtime = folder.root.stat().st_mtime
        except OSError:
            continue
        last_round[folder.uuid] = max(last_round.get(folder.uuid, 0.0), mtime)
        if folder.sync_log.exists():
            log = read_sync_log(folder.sync_log)
            done = read_load_log(folder.load_log)
            waiting = [n for n in log.new if n not in done.loaded]
            waiting += [n for n in log.deleted if n not in done.deleted]
            in_flight.append(
                {
                    "sender": folder.uuid,
                    "ip": folder.ip,
                    "folder": str(folder.root),
                    "arrived_complete": folder.sync_end.exists(),
                    "waiting_to_load": len(waiting),
                }
            )
    senders = [
        {
            "uuid": b.uuid,
            "key_fingerprint": b.fingerprint,
            "last_address": b.last_ip,
            "first_seen": b.first_seen,
            "last_round": _when(last_round.get(b.uuid)),
            "devices_owned": len(by_owner.get(b.uuid, [])),
        }
        for b in sorted(SenderKeys(config.schema_dir).bindings().values(), key=lambda b: b.uuid)
    ]
    return {
        "role": "receiver",
        "listen": config.listen,
        "running": running is not None,
        "pid": running.pid if running is not None else None,
        "senders": senders,
        "devices_per_owner": {u: len(d) for u, d in sorted(by_owner.items())},
        "rounds_in_flight": in_flight,
    }


def loader_status(config: LoaderConfig) -> dict[str, Any]:
    """The last run's figures, files pending, the table's totals (the loader owns the
    formats: ``spark_loader.status``)."""
    from spark_loader.status import loader_status as status

    return status(config)


def render(doc: dict[str, Any]) -> list[str]:
    """Human lines for a status document, control characters escaped: names, reasons and
    devices in it come from disk and from other machines (``--json`` escapes its own)."""
    lines: list[str] = []
    if doc["role"] == "sender":
        lines.append(f"sender {doc['uuid']}")
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
                    f"    pending:               {d['pending_new']} new, "
                    f"{d['pending_deleted']} deleted"
                )
                if d["recovery_pending"]:
                    lines.append(f"    recovery pending:      {d['recovery_pending']}")
                lines.append(f"    refused:               {len(d['refused'])}")
                lines.extend(f"      {x['name']}: {x['reason']}" for x in d["refused"])
                if d["rejected"]:
                    lines.append(f"    rejected names:        {len(d['rejected'])}")
                    lines.extend(f"      {x['name']}: {x['reason']}" for x in d["rejected"])
    elif doc["role"] == "receiver":
        if not doc["running"]:
            lines.append(f"receiver not running (configured to listen on {doc['listen']})")
        else:
            pid = f"pid {doc['pid']}" if doc["pid"] is not None else "pid unknown"
            lines.append(f"receiver running ({pid}), listening on {doc['listen']}")
        lines.append(f"senders ({len(doc['senders'])}):")
        for s in doc["senders"]:
            lines.append(
                f"  {s['uuid']}  {s['key_fingerprint']}  last from {s['last_address']}"
                f"  last round {s['last_round'] or 'never'}"
                f"  devices {s['devices_owned']}"
            )
        lines.append("devices per owner:")
        lines.extend(f"  {u}: {n}" for u, n in doc["devices_per_owner"].items())
        lines.append(f"rounds in flight: {len(doc['rounds_in_flight'])}")
        lines.extend(
            f"  {r['sender']} from {r['ip']}: {r['waiting_to_load']} waiting to load"
            f"{'' if r['arrived_complete'] else ', still arriving'}"
            for r in doc["rounds_in_flight"]
        )
    else:
        from spark_loader.status import render as render_loader

        lines.extend(render_loader(doc))
    return [printable(line) for line in lines]


def status_of(config: SenderConfig | ReceiverConfig | LoaderConfig) -> dict[str, Any]:
    if isinstance(config, SenderConfig):
        return sender_status(config)
    if isinstance(config, ReceiverConfig):
        return receiver_status(config)
    return loader_status(config)
