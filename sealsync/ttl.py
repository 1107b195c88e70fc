"""IoTDB's TTL rules as the loader applies them: which device keeps which points.

An edge's IoTDB hides the points a TTL has expired: a point of a device with TTL
``ttl`` is answered only while ``time >= now - ttl``, ``now`` and ``ttl`` in the
database's timestamp precision (the TTL is set in milliseconds and converted). The
loader's table answers the same when it is told the edge's rules (``[loader.ttl]``).

**Rules** are IoTDB 1.x/2.x's: a pattern is a prefix path ending in ``**``
(``root.db.**``: every device below ``root.db``) or a device path without wildcards
(``root.db.d1``: that device). A device takes the rule of its own path if there is
one, else the rule of the longest ``P.**`` with ``P`` a proper prefix of it, else no
TTL (IoTDB's ``getClosestTTL``). ``INF`` sets no expiry: it overrides a shorter
pattern's TTL, as IoTDB's does. IoTDB 0.12/0.13's per storage group TTL
(``SET TTL TO root.sg 3600000``) is the rule ``root.sg.**``.

**Table model** (IoTDB 2.x): a TTL is a property of a database (``CREATE DATABASE db
WITH (TTL=...)``) and of a table (``ALTER TABLE t SET PROPERTIES TTL=...``), a table
taking its database's when it is created (docs/design.md §6.3.1). The rule ``db.t`` is a
table's as ``SHOW TABLES DETAILS`` lists it, ``db`` every table of ``db`` without one, a
table whose name holds a dot written backquoted, as its device names write it
(:mod:`sealsync.formats.table_device`); a table's rule wins over its database's, and
``INF`` is a table's ``TTL='INF'``. A table-model row is matched by its *TTL path*,
``<database>.<device>``, its device being its table and tags: the database is the
folder IoTDB keeps the file in (:func:`database_of`), for no device name holds it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

#: Timestamp precisions IoTDB supports, as units per millisecond.
PRECISIONS = {"ms": 1, "us": 1_000, "ns": 1_000_000}
WILDCARD = "**"
INF = "INF"
_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"([0-9]+)\s*(ms|s|m|h|d)?")
#: IoTDB's largest TTL; a longer one is a mistake, not a wish for eternity (``INF``).
_MAX_MS = (1 << 63) - 1


def parse_duration(value: object) -> int | None:
    """A TTL in milliseconds, None for ``INF``: a positive integer (milliseconds, as
    IoTDB's ``SET TTL`` takes it) or a string such as ``"3600000"``, ``"3600000ms"``,
    ``"90s"``, ``"30m"``, ``"1h"``, ``"7d"`` or ``"INF"``. ValueError says why not."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f'must be a duration such as "1h" or 3600000 (ms), got {value!r}')
    if isinstance(value, str):
        text = value.strip()
        if text.upper() == INF:
            return None
        found = _DURATION.fullmatch(text)
        if found is None:
            raise ValueError(
                f'not a duration: {value!r} (a number and a unit: ms, s, m, h or d, as "1h", '
                'or "INF")'
            )
        ms = int(found.group(1)) * _UNITS_MS[found.group(2) or "ms"]
    else:
        ms = value
    if ms <= 0:
        raise ValueError(f"must be positive, got {value!r} (no TTL: leave the pattern out)")
    if ms > _MAX_MS:
        raise ValueError(f'{value!r} is longer than IoTDB allows; "INF" for no expiry')
    return ms


_DATABASE = re.compile(r"[A-Za-z0-9_]+")
"""A table-model database's name (IoTDB refuses a dot or a wildcard in one)."""
_TABLE_ROOTS = ("sequence", "unsequence")


def database_of(name: str) -> str | None:
    """The table-model database a received file belongs to, from its relative name
    (IoTDB keeps a file in ``sequence/<database>/<region>/<partition>/``); None for a
    tree-model file (its folder is a storage group or database path, ``root.…``)."""
    parts = name.split("/")
    if len(parts) < 3 or parts[0] not in _TABLE_ROOTS or parts[1].startswith("root."):
        return None
    return parts[1] if _DATABASE.fullmatch(parts[1]) else None


def ttl_path(device: str, database: str | None) -> str:
    """What a row's rule is found by (module docstring): a tree device's path, or a
    table-model device's database and device."""
    return device if database is None else f"{database}.{device}"


def parse_pattern(text: str) -> str:
    """A TTL path pattern as IoTDB accepts it, or ValueError: nodes separated by dots
    from ``root``, no wildcard but a last ``**``; or a table-model ``database`` or
    ``database.table``."""
    nodes = text.split(".")
    if nodes[0] != "root":
        return _parse_table_pattern(text)
    if any(not n for n in nodes):
        raise ValueError(f"{text!r} has an empty node")
    inner = nodes[:-1] if nodes[-1] == WILDCARD else nodes
    if any("*" in n for n in inner):
        raise ValueError(
            f"{text!r} has a wildcard other than a last **: IoTDB's TTL patterns are a "
            "device path or a prefix path ending in ** (root.db.**)"
        )
    if len(nodes) == 1:
        raise ValueError(f"{text!r} names no device: write root.**")
    return text


def _parse_table_pattern(text: str) -> str:
    database, dot, table = text.partition(".")
    if not _DATABASE.fullmatch(database):
        raise ValueError(
            f"{text!r} is neither a path from root. (a tree-model device or root.db.**) nor "
            "a table-model database or database.table"
        )
    if dot and (not table or "*" in table):
        raise ValueError(f"{text!r} names no table: write {database} or {database}.<table>")
    return text


@dataclass(frozen=True)
class Rule:
    pattern: str
    ms: int | None  # None: INF

    @property
    def table_model(self) -> bool:
        """A database's or a table's rule (``db``, ``db.t``): it matches its own TTL
        path and every one below it."""
        return not self.pattern.startswith("root.")

    @property
    def prefix(self) -> str | None:
        """What every path the rule matches below its own starts with (``P.`` of
        ``P.**``, ``db.`` of a database's); None for a device path."""
        if self.table_model:
            return self.pattern + "."
        return self.pattern[: -len(WILDCARD)] if self.pattern.endswith(WILDCARD) else None

    def matches(self, path: str) -> bool:
        """Whether the device with this TTL path (:func:`ttl_path`) falls under it."""
        prefix = self.prefix
        if prefix is None:
            return path == self.pattern
        return path.startswith(prefix) or (self.table_model and path == self.pattern)


@dataclass(frozen=True)
class TtlRules:
    """The edge's TTL rules, most specific first (the order a device is matched in)."""

    rules: tuple[Rule, ...] = ()

    @classmethod
    def of(cls, rules: Iterable[Rule]) -> TtlRules:
        def order(r: Rule) -> tuple[int, int, str]:
            # a device's own path first, then the longest prefix (a table's before its
            # database's): the first that matches wins
            return (0 if r.prefix is None else 1, -len(r.pattern), r.pattern)

        return cls(tuple(sorted(rules, key=order)))

    def __bool__(self) -> bool:
        return any(r.ms is not None for r in self.rules)

    def rule_for(self, path: str) -> Rule | None:
        """The rule IoTDB applies to the device with TTL path ``path``
        (:func:`ttl_path`), None if none."""
        for r in self.rules:
            if r.matches(path):
                return r
        return None

    def ttl_ms(self, path: str) -> int | None:
        """The device's TTL in milliseconds, None if its points never expire."""
        found = self.rule_for(path)
        return None if found is None else found.ms

    def may_match(self, rule: Rule, low: str, high: str) -> bool:
        """Whether a device whose TTL path is in ``[low, high]`` may take ``rule`` (a
        cheap over-answer: a more specific rule may still take all of them)."""
        prefix = rule.prefix
        if prefix is None:
            return low <= rule.pattern <= high
        start = rule.pattern if rule.table_model else prefix
        return low[: len(prefix)] <= prefix <= high or low <= start <= high

    def fingerprint(self, precision: str) -> str:
        """A short digest of the rules and the precision, for the table's tags."""
        body = json.dumps([precision, [[r.pattern, r.ms] for r in self.rules]])
        return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]
