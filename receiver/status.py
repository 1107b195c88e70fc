"""``sealsync status`` of a receiver config: whether a receiver runs on this storage,
the known senders, devices per owner, rounds in flight and files waiting to load.

Read-only: it takes no lock and changes nothing, so it is safe while the receiver
serves (its answer is then a snapshot of that moment).
"""

from __future__ import annotations

from typing import Any

from receiver.auth import SenderKeys
from receiver.layout import sender_folders
from receiver.load.apply import read_load_log
from receiver.load.owners import DeviceOwners
from receiver.lock import holder
from sealsync.config import ReceiverConfig
from sealsync.synclog import read_sync_log
from sealsync.units import iso_time


def receiver_status(config: ReceiverConfig) -> dict[str, Any]:
    """The status document of one receiver (``--json`` prints it as it is)."""
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
            "last_round": iso_time(last_round.get(b.uuid)),
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


def render_receiver(doc: dict[str, Any]) -> list[str]:
    """Human lines for a receiver status document (the caller escapes control characters)."""
    lines: list[str] = []
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
    return lines
