"""``refused.txt``: files a receiver refused, remembered so they are not resent blindly.

A file refused for a device conflict would be refused again on every run until an
operator releases the device (``sealsync owners release``) on the receiver; shipping
it each time costs the whole transfer for nothing. So a conflict is remembered with
the file's devices, and the next round first asks the receiver who owns them
(OWNERS_QUERY), resending only once none is owned by another sender.

Format: one JSON object per line, sorted by name,
``{"name": ..., "status": "conflict"|"refused", "reason": ..., "devices": [...]}``.
JSON, because device ids may contain any character a separator could be (tabs,
commas, spaces); JSON escapes newlines, so one entry is always one line. The file
lives in the receiver's sender folder: ``<data dir>/sync-sender/<host>_<port>/refused.txt``,
replaced atomically. Plain "refused" entries (not a valid data file, receiver could
not store it) are kept for ``status`` and reports but are resent every round, since
the cause may be transient.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sealsync import durable
from sealsync.names import data_name_problem
from sealsync.protocol import Verdict
from sender.manage.layout import SenderPaths

log = logging.getLogger(f"sealsync.{__name__}")

REFUSED_FILE = "refused.txt"


def refused_path(paths: SenderPaths) -> Path:
    return paths.folder / REFUSED_FILE


@dataclass(frozen=True)
class Refusal:
    name: str
    status: str
    """``conflict`` or ``refused`` (the receiver's verdict)."""
    reason: str
    devices: tuple[str, ...] = ()
    """The file's devices as read when it was refused; empty if they could not be read."""

    def to_line(self) -> str:
        body = {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "devices": list(self.devices),
        }
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_line(cls, line: str) -> Refusal | None:
        try:
            body = json.loads(line)
            name, status, reason = body["name"], body["status"], body["reason"]
            devices = body["devices"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(name, str) or data_name_problem(name) is not None:
            return None
        if status not in (Verdict.CONFLICT, Verdict.REFUSED) or not isinstance(reason, str):
            return None
        if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
            return None
        return cls(name, status, reason, tuple(devices))


def read_refusals(path: Path) -> dict[str, Refusal]:
    """The remembered refusals by name; damaged lines are skipped (worst case: a resend)."""
    out: dict[str, Refusal] = {}
    for line in durable.read_lines(path):
        if not line.strip():
            continue
        entry = Refusal.from_line(line)
        if entry is None:
            log.warning("%s: ignoring a damaged line: %r", path, line[:200])
            continue
        out[entry.name] = entry
    return out


class RefusalBook:
    """The refusals of one data dir towards one receiver, saved only when changed."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries = read_refusals(self.path)
        self._saved = dict(self.entries)

    def get(self, name: str) -> Refusal | None:
        return self.entries.get(name)

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget files that were synced or are gone since they were refused."""
        keep = set(names)
        self.entries = {n: e for n, e in self.entries.items() if n in keep}

    def record(self, entry: Refusal) -> None:
        self.entries[entry.name] = entry

    def forget(self, name: str) -> None:
        self.entries.pop(name, None)

    def save(self) -> None:
        if self.entries == self._saved:
            return
        if not self.entries:
            durable.remove(self.path)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lines = [self.entries[n].to_line() for n in sorted(self.entries)]
            durable.write_lines(self.path, lines)
        self._saved = dict(self.entries)
