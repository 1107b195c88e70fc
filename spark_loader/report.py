"""What one loader run did, for the CLI's summary line, ``--json`` and exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoadReport:
    ingested: int = 0  # source files whose rows went into the table this run
    removed: int = 0  # source files whose rows left the table this run
    unchanged: int = 0  # source files already in the table
    #: Of those, files whose times changed whose content matched the record (a restored
    #: storage, spark_loader.restored): their rows stayed, their new times were recorded.
    restored: int = 0
    rows_written: int = 0
    rows_removed: int = 0
    changed: int = 0  # files deleted or replaced on the receiver during the run (next run)
    skipped: dict[str, str] = field(default_factory=dict)  # file -> reason; retried next run
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # repairs made (e.g. state rebuilt)
    #: Files in the table but missing from the receiver without a logged deletion:
    #: their rows are kept (spark_loader.removals); one of them, for the warning line.
    kept_missing: int = 0
    kept_example: str = ""
    #: Senders a file of which killed its Spark job even alone this run: their files
    #: run in batches of their own next run (spark_loader.run), the others' never wait.
    quarantined: set[str] = field(default_factory=set)
    #: Groups of overlapping files rewritten to one row per (device, time) (.resolve).
    resolved: int = 0
    #: Senders whose files all wait (nothing of theirs loaded or removed this run), and
    #: why: their trouble is theirs alone, every other sender's files went in
    #: (spark_loader.removals).
    held: dict[str, str] = field(default_factory=dict)
    #: Files already in the table rewritten because rows of theirs expired since (the
    #: edges' TTL, spark_loader.expiry), and the run's ``now`` it was applied at (in the
    #: databases' precision; None without TTL rules).
    expired: int = 0
    ttl_now: int | None = None

    @property
    def ok(self) -> bool:
        """False when some file could not be ingested, or some sender's files wait
        (CLI exit code 1: something was left)."""
        return not self.skipped and not self.held

    def skip(self, name: str, reason: str) -> None:
        self.skipped.setdefault(name, reason)

    def hold(self, sender: str, reason: str) -> None:
        self.held.setdefault(sender, reason)

    def held_lines(self) -> list[str]:
        """One line per held sender: whose files wait and why."""
        return [f"the files of sender {s} wait: {why}" for s, why in sorted(self.held.items())]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "ingested": self.ingested,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "restored": self.restored,
            "rows_written": self.rows_written,
            "rows_removed": self.rows_removed,
            "changed": self.changed,
            "skipped": dict(sorted(self.skipped.items())),
            "seconds": round(self.seconds, 3),
            "notes": list(self.notes),
            "kept_missing": self.kept_missing,
            "quarantined": sorted(self.quarantined),
            "held": dict(sorted(self.held.items())),
            "expired": self.expired,
            "ttl_now": self.ttl_now,
        }

    def summary(self) -> str:
        text = (
            f"ingested {self.ingested} files ({self.rows_written} rows), "
            f"removed {self.removed} ({self.rows_removed} rows), "
            f"unchanged {self.unchanged}, in {self.seconds:.1f}s"
        )
        if self.restored:
            text += f"; {self.restored} with changed times matched by content"
        if self.resolved:
            text += f"; resolved {self.resolved} groups of overlapping files"
        if self.expired:
            text += f"; rewrote {self.expired} files whose rows' TTL ran out"
        if self.kept_missing:
            text += f"; kept {self.kept_missing} missing"
        if self.skipped:
            text += f"; {len(self.skipped)} skipped"
        if self.quarantined:
            text += f"; {len(self.quarantined)} senders quarantined"
        if self.held:
            text += f"; the files of {len(self.held)} senders wait"
        return text

    def warning(self) -> str | None:
        """The one line about rows kept for files missing without evidence, if any."""
        if not self.kept_missing:
            return None
        return (
            f"kept the rows of {self.kept_missing} files missing from the receiver without "
            f"a logged deletion (such as {self.kept_example}); if they were really removed, "
            "`sealsync load --prune-missing` takes their rows out"
        )
