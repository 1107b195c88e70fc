"""IoTDB ``DELETE`` statements for one deletion entry of a sender, reaching only its devices.

A sender's ``.mods``/``.mods2`` entry names a path pattern. Sent as written, an entry
``root.**`` deletes every sender's points from the data centre's IoTDB, and a pattern
holding a comma (``root.h.d1,root.victim.**``) is two paths there. So an entry is
never sent as written: it is expanded against the devices the shipping sender owns
(device ownership, :mod:`receiver.load.owners`: each device has one owner), and each
owned device it reaches gets a statement whose path is built here, node by node, from
that device's own nodes.

Which devices an entry reaches: the pattern is read as IoTDB 0.13 and later read one
(:mod:`sealsync.formats.deletion`: the whole series path, ``*`` one node, ``**`` one or
more, ``d*``/``*d``/``*d*`` a glob within one node), and for dialect ``"0.12"`` also as
0.12 reads a path, a prefix of the series it covers (0.12.0 deletes every series below
``DELETE FROM root.sg.d1``). For an owned device ``D``:

* a pattern ending in ``**`` that matches ``D`` and one more node covers every series
  of ``D``: ``D.*``;
* a pattern whose nodes but its last match ``D`` covers the series of ``D`` its last
  node names: ``D.<last>`` (a measurement, ``*`` or a glob);
* dialect ``"0.12"``: a pattern without ``**`` that matches the first nodes of ``D``
  covers every series under ``D``, as 0.12 read it: ``D``.

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
    SeriesDeletion,
    matches,
    node_name,
    split_path,
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


def _whole(pattern: tuple[str, ...], device: str) -> bool:
    """Whether ``pattern``, read whole (0.13 and later), matches ``device`` and one more
    node of any name."""
    probe = SeriesDeletion(pattern, MIN_TIME, MAX_TIME, None, "")
    try:
        return matches(probe, device, _ANY)
    except FormatError:  # only 0.12's prefix reading would cover it: not a whole match
        return False


def _is_glob(node: str) -> bool:
    """A wildcard within one node, as IoTDB tells one (``PathPatternUtil.hasWildcard``)."""
    return node[0] not in '`"' and (node.startswith("*") or node.endswith("*"))


def _quote_2(name: str) -> str:
    if not name or _CONTROL.search(name):
        raise Unwritable(f"the name {printable(name)!s}")
    return "`" + name.replace("`", "``") + "`"


def _raw_012(node: str) -> str:
    if _BARE_012.fullmatch(node) or _QUOTED_012.fullmatch(node):
        return node
    raise Unwritable(f"the node {printable(node)}")


def _last(node: str, dialect: str) -> str:
    """The statement's last node from the pattern's: a wildcard, a glob or a name."""
    if node == "*":
        return node
    if _is_glob(node):
        if _GLOB.fullmatch(node):
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


def _reach(pattern: tuple[str, ...], device: str, dialect: str) -> tuple[str, ...] | None:
    """The pattern's nodes after ``device``'s in the statement for it (``()``: the
    device itself, as 0.12 reads a prefix), or None when it covers no series of it."""
    if dialect == DIALECT_012 and "**" not in pattern and _whole((*pattern, "**"), device):
        return ()
    if pattern[-1] == "**":
        return ("*",) if _whole(pattern, device) else None
    if _whole((*pattern[:-1], "*"), device):
        return (pattern[-1],)
    return None


def scoped_statements(deletion: SeriesDeletion, dialect: str, devices: OwnedDevices) -> Scoped:
    """Per owned device the entry covers, one ``DELETE`` over its range (see the module
    doc); a device that cannot be written, or whose statement a 0.12 server would let
    reach another sender's device, gets a line in ``refused`` instead."""
    out = Scoped()
    where = _where(deletion)
    for device in devices.owned:
        try:
            nodes = split_path(device)
        except ValueError:
            continue  # not a path (a Parquet file's device): no series in IoTDB
        rest = _reach(deletion.pattern, device, dialect)
        if rest is None:
            continue
        try:
            path = ".".join(_device(nodes, dialect) + [_last(n, dialect) for n in rest])
        except Unwritable as exc:
            out.refused.append(f"device {printable(device)}: {exc} cannot be written in a DELETE")
            continue
        if dialect == DIALECT_012:
            reached = [
                other
                for other in devices.others_below(device)
                if _whole((*nodes, *rest, "**"), other) or not rest
            ]
            if reached:
                out.refused.append(
                    f"device {printable(device)}: IoTDB 0.12 reads DELETE FROM {path} as a "
                    f"prefix, which reaches {printable(reached[0])} of another sender"
                )
                continue
        out.statements.append(f"DELETE FROM {path}{where}")
    return out
