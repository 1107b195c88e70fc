"""What an attempt at one receiver did, one ``DirReport`` per data dir (its round):
the CLI's summary, ``--json`` output and exit code.

Filled in as the attempt goes (a round carried on over a new connection after a dropped
one adds to the same report), so ``shipped`` and ``deleted`` are cumulative over
connections, while ``failed`` and ``refused`` describe the last connection's outcome
for files still unsynced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DirReport:
    index: int
    data_dir: str
    shipped: list[str] = field(default_factory=list)
    """Files the receiver verified this run, in verdict order."""
    shipped_bytes: int = 0
    """Bytes of the verified files' streams (data file plus sidecars)."""
    deleted: list[str] = field(default_factory=list)
    """Deletions the receiver acknowledged."""
    failed: dict[str, str] = field(default_factory=dict)
    """Files left unsynced after their retries (name -> reason); next run tries again."""
    refused: dict[str, str] = field(default_factory=dict)
    """Files the receiver refused or that wait for a device release (name -> reason)."""
    rejected: dict[str, str] = field(default_factory=dict)
    """Entries of the data dir never shipped (hostile names, links); informational."""
    note: str | None = None
    """Why this data dir's round did not run to the end (receiver busy, error)."""
    complete: bool = False
    """The round ran to ROUND_DONE (or had nothing to do)."""
    loaded: bool | None = None
    """The receiver said it had applied the whole round when it answered ROUND_DONE."""
    seconds: float = 0.0
    transfer_bytes: int = 0
    """Bytes written to the receiver for this data dir's round (frames included)."""
    transfer_seconds: float = 0.0
    """From the round's first write to its last file byte: the time ``bwlimit`` paces."""
    reconcile: dict[str, list[str]] | None = None
    """With ``--reconcile``: the names found missing, different and extra on the
    receiver (:mod:`sender.reconcile`)."""

    @property
    def ok(self) -> bool:
        """Everything selected is synced: nothing failed, refused or left for later."""
        return self.complete and not self.failed and not self.refused and self.note is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "data_dir": self.data_dir,
            "ok": self.ok,
            "shipped": list(self.shipped),
            "shipped_bytes": self.shipped_bytes,
            "deleted": list(self.deleted),
            "failed": dict(self.failed),
            "refused": dict(self.refused),
            "rejected": dict(self.rejected),
            "note": self.note,
            "complete": self.complete,
            "loaded": self.loaded,
            "seconds": round(self.seconds, 3),
            "transfer_bytes": self.transfer_bytes,
            "transfer_seconds": round(self.transfer_seconds, 3),
            **({"reconcile": self.reconcile} if self.reconcile is not None else {}),
        }


@dataclass
class AttemptReport:
    receiver: str
    address: str
    dirs: list[DirReport] = field(default_factory=list)
    schema_bytes: int = 0
    """Schema log bytes the receiver acknowledged this run."""
    attempts: int = 0
    """Connections made: 1, plus one per reconnect after a dropped connection."""
    seconds: float = 0.0
    bwlimit: int = 0
    """The attempt's bandwidth cap in bytes per second; 0 is none."""

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.dirs)

    @property
    def shipped_files(self) -> int:
        return sum(len(d.shipped) for d in self.dirs)

    @property
    def shipped_bytes(self) -> int:
        return sum(d.shipped_bytes for d in self.dirs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "receiver": self.receiver,
            "address": self.address,
            "ok": self.ok,
            "attempts": self.attempts,
            "schema_bytes": self.schema_bytes,
            "shipped_files": self.shipped_files,
            "shipped_bytes": self.shipped_bytes,
            "seconds": round(self.seconds, 3),
            "bwlimit": self.bwlimit,
            "dirs": [d.to_dict() for d in self.dirs],
        }


def new_report(receiver: str, address: str, data_dirs: Sequence[object]) -> AttemptReport:
    """An empty report for an attempt at one receiver: one entry per data dir."""
    return AttemptReport(
        receiver=receiver,
        address=address,
        dirs=[DirReport(i, str(d)) for i, d in enumerate(data_dirs)],
    )
