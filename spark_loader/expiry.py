"""The edges' TTL in the table: rows IoTDB no longer answers are not in it.

A run takes one ``now`` at its start (:class:`Expiry`). Every row the run writes —
a file ingested, a group of overlapping files resolved (:mod:`.resolve`) — passes
:meth:`Expiry.keep` in the Spark job that writes it: a row of a device with a TTL
(:class:`sealsync.ttl.TtlRules`) is kept while ``time >= now - ttl``, IoTDB's own
test. Every data file the run writes carries the rules' fingerprint and that ``now``
in a Delta tag (:data:`TTL_TAG`), so a later run knows what each partition was
filtered with, from the table itself.

**Rows that expire later.** A partition already in the table is rewritten from its
source file when some of its rows may have expired since it was written
(:meth:`Expiry.due`): a rule that may match its devices moved its cutoff past the
partition's first point, over points the partition may hold. It goes through the
rewrite of overlapping groups (:mod:`.resolve`, as a group of its own when it
overlaps no other file), so the new files replace the old ones in the run's one
commit, and a rewrite that fails changes nothing. A partition written under other
rules (a TTL changed, added or removed: rows hidden before may come back) is
rewritten once. Without rules, and with no partition written under any, nothing
here runs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from sealsync.ttl import PRECISIONS, TtlRules, database_of, ttl_path
from spark_loader.discovery import SourceFile
from spark_loader.resolve import Bounds, read_member
from spark_loader.table import Partition
from spark_loader.table_layout import KEY_COLUMN

#: The tag of a data file written under TTL rules: ``{"rules": digest, "now": n}``.
TTL_TAG = "sealsync.ttl"


@dataclass(frozen=True)
class Expiry:
    """The TTL rules and the run's ``now`` (in the databases' precision)."""

    rules: TtlRules
    precision: str
    now: int

    @classmethod
    def at(cls, rules: TtlRules, precision: str, now: float | None = None) -> Expiry:
        """``now`` in seconds since the epoch; None: the clock, read once."""
        now_ns = time.time_ns() if now is None else int(round(now * 1e9))
        return cls(rules, precision, now_ns // (1_000_000 // PRECISIONS[precision]))

    @property
    def active(self) -> bool:
        return bool(self.rules)

    @property
    def fingerprint(self) -> str:
        return self.rules.fingerprint(self.precision)

    def cutoff(self, ms: int, now: int | None = None) -> int:
        """The first time still alive under a TTL of ``ms`` at ``now`` (the run's)."""
        return (self.now if now is None else now) - ms * PRECISIONS[self.precision]

    def tags(self) -> dict[str, str]:
        """The tag of every data file this run writes (none without rules)."""
        if not self.active:
            return {}
        return {TTL_TAG: json.dumps({"rules": self.fingerprint, "now": self.now})}

    def due(self, tags: dict[str, str], bounds: Bounds | None, database: str | None = None) -> bool:
        """Whether a partition with these tags and bounds must be rewritten for the
        rows to be what IoTDB answers at the run's ``now``; ``database``: its file's
        table-model database (:func:`sealsync.ttl.database_of`)."""
        written = _written(tags.get(TTL_TAG))
        if written is None and TTL_TAG in tags:
            return True  # a tag this release cannot read: filter again
        if not self.active:
            return written is not None  # written under rules since removed
        if written is not None and written[0] != self.fingerprint:
            return True
        if bounds is None:
            return False  # no points
        low, high, first, last = bounds
        low, high = ttl_path(low, database), ttl_path(high, database)
        one = self.rules.rule_for(low) if low == high else None  # one device: its rule
        for rule in self.rules.rules if low != high else [one] if one else []:
            if rule.ms is None or not self.rules.may_match(rule, low, high):
                continue
            new = self.cutoff(rule.ms)
            old = None if written is None else self.cutoff(rule.ms, written[1])
            if old is None:
                if first < new:
                    return True
            elif max(old, first) < new and old <= last:
                return True
        return False

    def keep(self, frame: Any, databases: dict[int, str] | None = None) -> Any:
        """``frame`` without the rows the rules have expired at the run's ``now``;
        ``databases``: the table-model database of each file (by its key) that has one."""
        if not self.active:
            return frame
        from pyspark.sql import functions as F

        path = device = F.col(DEVICE_COLUMN)
        if databases and any(rule.table_model for rule in self.rules.rules):
            database = None
            for key, name in sorted(databases.items()):
                test = F.col(KEY_COLUMN) == F.lit(key)
                database = F.when(test, name) if database is None else database.when(test, name)
            assert database is not None
            path = F.coalesce(F.concat(database, F.lit("."), device), device)
        cutoff = None
        for rule in self.rules.rules:  # most specific first: the first match decides
            prefix = rule.prefix
            test = path == F.lit(rule.pattern)
            if prefix is not None:
                below = path.startswith(prefix)
                test = (test | below) if rule.table_model else below
            value = F.lit(None if rule.ms is None else self.cutoff(rule.ms)).cast("long")
            cutoff = F.when(test, value) if cutoff is None else cutoff.when(test, value)
        assert cutoff is not None
        return frame.where(cutoff.isNull() | (F.col(TIME_COLUMN) >= cutoff))


def due_partitions(
    expiry: Expiry, partitions: dict[str, Partition], listed: dict[str, SourceFile]
) -> frozenset[str]:
    """The ids of the partitions of ``listed`` files (listed, readable, staying) whose
    rows the TTL changed since they were written (:meth:`Expiry.due`): the run rewrites
    them through :mod:`.resolve`. A held sender's files and a file kept without its
    source are not listed: they wait."""
    due = set()
    for fid, partition in partitions.items():
        source = listed.get(fid)
        if source is None:
            continue
        tags = partition.tags
        if not expiry.active and TTL_TAG not in tags:
            continue  # no rules, never filtered: nothing to read
        if expiry.due(tags, read_member(source, partition).bounds, database_of(source.name)):
            due.add(fid)
    return frozenset(due)


def _written(text: str | None) -> tuple[str, int] | None:
    """(rules digest, now) of a partition's TTL tag, None if absent or unreadable."""
    if text is None:
        return None
    try:
        doc = json.loads(text)
        return str(doc["rules"]), int(doc["now"])
    except (ValueError, KeyError, TypeError):
        return None
