"""IoTDB ``DELETE`` statements for one deletion entry of a sender, reaching only its devices.

A sender's ``.mods``/``.mods2`` entry names a path pattern. Sent as written, an entry
``root.**`` deletes every sender's points from the data centre's IoTDB, and a pattern
holding a comma (``root.h.d1,root.victim.**``) is two paths there. So an entry is
never sent as written: it is expanded against the devices the shipping sender owns
(device ownership, :mod:`receiver.load.owners`: each device has one owner), and each
owned device it reaches gets a statement whose path is built here, node by node, from
that device's own nodes.

Which devices an entry reaches is what it deleted at the edge: its pattern read by the
rules of the release that wrote it (:mod:`sealsync.formats.deletion`; ``rules`` of the
record), whatever release the data centre runs. For an owned device ``D``:

* 0.13 and later (the whole series path, ``*`` one node, ``**`` one or more, a glob
  within one node): a pattern ending in ``**`` that matches ``D`` and one more node
  covers every series of ``D``: ``D.*``; a pattern whose nodes but its last match ``D``
  covers the series of ``D`` its last node names: ``D.<last>`` (a measurement, ``*`` or
  a glob);
* 0.12 (a prefix of the series it covers; ``*`` one whole node, any other node a name
  as written): a pattern that matches the first nodes of ``D`` covers every series of
  ``D``: ``D`` on a 0.12 data centre (its own prefix reading), ``D.*`` on a later one; a
  pattern one node longer than ``D`` whose nodes but its last match ``D`` covers the
  series its last node names (``*``: every one); a last node holding ``*`` names no
  series (0.12 deletes nothing for ``DELETE FROM root.sg.d1.s*``), so it gets none.

Where the data centre cannot say what the edge meant, the device gets no statement and
the caller says so: a glob on a 0.12 data centre (0.12 reads ``s*`` as a name), a glob
IoTDB reads as a regular expression.

A dialect ``"0.12"`` server reads the statement's own path as a prefix too (0.12; 0.13
reads it whole), so ``D.*`` and ``D`` also reach the devices below ``D``, and ``D.m``
those below ``D.m``. Such a statement is not sent when it would reach a device another
sender owns: the caller says so. 1.x and 2.x read ``D.*`` as the series of ``D`` alone.

How a path is written (seen on 0.12.0 and 2.0.1-beta): 1.x and 2.x (dialect ``"2.0"``)
take any name in backquotes, a backquote in it doubled (``SqlLexer.g4``'s
``BQUOTA_STRING`` knows no other escape; a quoted identifier is a name, never a
wildcard), so every node but ``root`` goes quoted.
0.12 keeps a node's double quotes as part of its name (``root.sg."a.b"`` is the device
it writes, and ``root.sg."d1"`` is not ``root.sg.d1``), so each node goes exactly as the
device's files name it, if it is a bare name of the characters 0.12 reads as one, or
quoted without a quote or backslash inside. A glob goes bare when it is one run of
letters, digits and underscores with a star at one end or both, as the grammars read
one (``PathParser.g4``). A node that fits none of these, or holds a control character,
cannot be written safely: no statement for that device, and the caller says so.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from sealsync.errors import FormatError
from sealsync.formats.deletion import (
    MAX_TIME,
    MIN_TIME,
    RULES_012,
    SeriesDeletion,
    is_glob,
    matches,
    node_name,
    regex_glob,
    split_path,
    split_path_012,
)
from sealsync.printable import printable

DIALECT_012, DIALECT_2 = "0.12", "2.0"

_BARE_012 = re.compile(r"[0-9A-Za-z_\-:@#/+%$\u2e80-\u9fff]+")
"""Names 0.12.0 took bare in ``CREATE TIMESERIES`` and ``DELETE FROM`` (``{`` it refused)."""
_QUOTED_012 = re.compile(r'"[^"\\\x00-\x1f\x7f]*"|`[^`\\\x00-\x1f\x7f]*`')
"""A node quoted as 0.12 (double quotes) or 0.13 (backquotes) writes it, nothing to escape."""
_GLOB = re.compile(r"\*[0-9A-Za-z_]+\*?|[0-9A-Za-z_]+\*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ANY = "\x00"
"""A last node no pattern names: only ``*``, ``**`` or a glob matching anything takes it."""


class Unwritable(ValueError):
    """A node that no statement of the dialect can hold safely."""


@dataclass
class Scoped:
    """The statements for one entry, and why some owned devices got none."""

    statements: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _whole(pattern: tuple[str, ...], device: str, rules: str) -> bool:
    """Whether ``pattern``, read whole by ``rules`` (0.13 and later), matches ``device``
    and one more node of any name; FormatError for a glob no reading is sure of."""
    return matches(SeriesDeletion(pattern, MIN_TIME, MAX_TIME, None, "", rules), device, _ANY)


def _prefix_012(pattern: tuple[str, ...], names: tuple[str, ...]) -> bool:
    return all(p == "*" or p == n for p, n in zip(pattern, names, strict=True))


def _quote_2(name: str) -> str:
    if not name or _CONTROL.search(name):
        raise Unwritable(f"the name {printable(name)!s}")
    return "`" + name.replace("`", "``") + "`"


def _raw_012(node: str) -> str:
    if _BARE_012.fullmatch(node) or _QUOTED_012.fullmatch(node):
        return node
    raise Unwritable(f"the node {printable(node)}")


def _last(node: str, dialect: str, rules: str) -> str:
    """The statement's last node from the pattern's: a wildcard, a glob or a name."""
    if node == "*":
        return node
    if is_glob(node, rules):
        if dialect == DIALECT_2 and _GLOB.fullmatch(node):
            return node
        raise Unwritable(f"the glob {printable(node)}")
    return _quote_2(node_name(node)) if dialect == DIALECT_2 else _raw_012(node)


def _device(nodes: tuple[str, ...], dialect: str) -> list[str]:
    """The device's nodes as the dialect writes them; ``root`` first and bare."""
    if not nodes or nodes[0] != "root":
        raise Unwritable("a device that does not start with root")
    if dialect == DIALECT_2:
        return ["root", *(_quote_2(node_name(n)) for n in nodes[1:])]
    return ["root", *(_raw_012(n) for n in nodes[1:])]


def device_path(device: str, dialect: str) -> str:
    """``device`` (as the files name it) written for a statement of ``dialect``;
    :class:`Unwritable` if it cannot be written safely."""
    try:
        nodes = split_path(device)
    except ValueError:
        raise Unwritable(f"the device {printable(device)}") from None
    return ".".join(_device(nodes, dialect))


def series_path(device: str, measurement: str, dialect: str) -> str:
    """The series ``measurement`` of ``device`` written for a statement of ``dialect``."""
    last = _quote_2(node_name(measurement)) if dialect == DIALECT_2 else _raw_012(measurement)
    return f"{device_path(device, dialect)}.{last}"


def _where(deletion: SeriesDeletion) -> str:
    bounds = []
    if deletion.start != MIN_TIME:
        bounds.append(f"time >= {deletion.start}")
    if deletion.end != MAX_TIME:
        bounds.append(f"time <= {deletion.end}")
    return f" WHERE {' AND '.join(bounds)}" if bounds else ""


class OwnedDevices:
    """The devices of one sender, and every other sender's, for a file's entries."""

    def __init__(self, owned: Sequence[str], others: Sequence[str]) -> None:
        self.owned = sorted(owned)
        self._others = sorted(others)

    def others_below(self, device: str) -> list[str]:
        """Devices of other senders whose path continues ``device``'s."""
        prefix = device + "."
        start = bisect.bisect_left(self._others, prefix)
        end = bisect.bisect_left(self._others, device + "/")  # "/" sorts right after "."
        return self._others[start:end]


def _reach(deletion: SeriesDeletion, device: str, dialect: str) -> tuple[str, ...] | None:
    """The pattern's nodes after ``device``'s in the statement for it (``()``: the
    device itself, as 0.12 reads a prefix), or None when it covers no series of it."""
    pattern, rules = deletion.pattern, deletion.rules
    if rules == RULES_012:
        names = split_path_012(device)
        if len(pattern) <= len(names) and _prefix_012(pattern, names[: len(pattern)]):
            return () if dialect == DIALECT_012 else ("*",)
        if len(pattern) == len(names) + 1 and _prefix_012(pattern[:-1], names):
            return None if pattern[-1] != "*" and "*" in pattern[-1] else (pattern[-1],)
        return None
    if pattern[-1] == "**":
        return ("*",) if _whole(pattern, device, rules) else None
    if _whole((*pattern[:-1], "*"), device, rules):
        return (pattern[-1],)
    return None


def _reaches_012(statement: SeriesDeletion, device: str) -> bool:
    """Whether a 0.12 data centre's ``DELETE FROM <statement>`` reaches a series of
    ``device`` (a name the statement's nodes match is one the receiver's files wrote)."""
    try:
        return matches(statement, device, _ANY)
    except FormatError:
        return True  # a device 0.12 cannot split: assume the worst


def scoped_statements(deletion: SeriesDeletion, dialect: str, devices: OwnedDevices) -> Scoped:
    """Per owned device the entry covers, one ``DELETE`` over its range (see the module
    doc); a device that cannot be written, or whose statement a 0.12 server would let
    reach another sender's device, gets a line in ``refused`` instead."""
    out = Scoped()
    where = _where(deletion)
    glob = regex_glob(deletion)
    if glob is not None:  # which series it meant is not sure: no device gets a statement
        out.refused.append(
            f"any device: IoTDB reads the glob {printable(glob)} as a regular expression"
        )
        return out
    for device in devices.owned:
        try:
            nodes = split_path(device)
            rest = _reach(deletion, device, dialect)
        except ValueError:
            continue  # not a path (a Parquet file's device): no series in IoTDB
        except FormatError as exc:
            out.refused.append(f"device {printable(device)}: {exc}")
            continue
        if rest is None:
            continue
        try:
            last = [_last(n, dialect, deletion.rules) for n in rest]
            path = ".".join(_device(nodes, dialect) + last)
        except Unwritable as exc:
            out.refused.append(f"device {printable(device)}: {exc} cannot be written in a DELETE")
            continue
        if dialect == DIALECT_012:
            # the statement's own path, as 0.12 reads one: every path it is a prefix of
            below = SeriesDeletion((*nodes, *rest), MIN_TIME, MAX_TIME, None, "", RULES_012)
            reached = [
                other
                for other in devices.others_below(device)
                if not rest or _reaches_012(below, other)
            ]
            if reached:
                out.refused.append(
                    f"device {printable(device)}: IoTDB 0.12 reads DELETE FROM {path} as a "
                    f"prefix, which reaches {printable(reached[0])} of another sender"
                )
                continue
        out.statements.append(f"DELETE FROM {path}{where}")
    return out
