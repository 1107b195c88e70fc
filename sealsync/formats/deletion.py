"""A deletion IoTDB recorded beside a sealed file, as both of its formats give it.

IoTDB writes deletions in two formats: the text ``X.mods`` of 0.11-1.x
(:mod:`sealsync.formats.mods`) and the binary ``X.mods2`` of 2.x
(:mod:`sealsync.formats.mods2`). Each parser turns its format into the records here,
so the loader applies one kind of record whatever release wrote the file:

* :class:`SeriesDeletion` -- a tree-model deletion: every point of every series whose
  path the pattern matches, with ``start <= time <= end`` (a closed interval), is gone.
  In 0.12-1.x the deletion carries the data file's length when it was written and
  removes points only from chunks that start below it (``ModificationUtils``/
  ``QueryUtils.modifyChunkMetaData``: ``fileOffset > offsetOfChunkHeader``), so points
  written to the same file after the ``DELETE`` survive; ``.mods2`` entries carry no
  offset and cover every chunk (``below_offset`` None).
* :class:`TableDeletion` -- a table-model deletion of 2.x (``TableDeletionEntry``):
  every point of a device of its table whose tags its predicate matches, of the fields
  it names (none named: every field), with ``start <= time <= end``, is gone. The
  predicate is a conjunction (``IDPredicate``: ``NOP`` none, ``And`` its parts) of
  segment conditions (``SegmentExactMatch``: the device's segment at an index -- the
  table name at 0, then its tags in order -- equal to a string, or null for a NULL tag;
  a segment past the device's last is null, as a device id drops trailing nulls) and
  whole-device conditions (``FullExactMatch``: the device id equal to one, table name
  included). A table-model device is matched only by table-model deletions and a tree
  device only by tree ones, as in IoTDB, where every tree pattern starts with ``root``.

Which series a pattern covers depends on the IoTDB release that wrote it, and each
record says which rules it is read by (``rules``):

* :data:`RULES_012` -- IoTDB 0.12 (``PartialPath.matchFullPath`` of 0.12, used by
  ``QueryContext.getPathModifications``): the pattern is a *prefix* of the series paths
  it covers (``root.sg`` covers every series below it), a node ``*`` is any one node,
  and every other node is compared as written, quotes included (``d*`` is the name
  ``d*``, which no series has: 0.12 accepts ``DELETE FROM root.sg.d*.s1``, writes it,
  and deletes nothing). Paths split as 0.12's ``MetaUtils.splitPathToDetachedPath``
  splits them: at dots outside double quotes; a backquote is a character like any other.
* :data:`RULES_013` -- IoTDB 0.13 to 1.1 (``PartialPath.matchFullPath``): a pattern
  matches a series path of the same shape node by node; ``*`` is any one node, ``**``
  one or more nodes (anywhere in the pattern), and a node holding ``*`` anywhere
  (``d*``, ``a*b``) matches names by that glob.
* :data:`RULES_12` -- IoTDB 1.2 and later, ``.mods2`` included (``PathPatternUtil``):
  as 0.13, but only a node that starts or ends with ``*`` is a glob (``a*b`` is a name).

In the last two, nodes split at dots outside backquotes or double quotes; inside
backquotes a doubled backquote is one; a quoted node is a name, never a wildcard. IoTDB
turns a glob into a Java regular expression (``*`` becoming ``.*``); a glob holding
another character a regular expression reads specially (``$``, ``{``...) is refused
rather than read either way. Which rules a ``.mods`` is read by is
:func:`sealsync.formats.mods.rules_for` (docs/formats.md).

Every matcher here runs in time linear in the pattern and the path (a glob included).
The Java reader of the loader matches with the same rules
(``io.sealsync.tsfile.PathPattern``); both are held to one table of cases,
``tests/path_pattern_cases.json``. A record crosses to the Java reader as its nodes with
its rules first (:func:`to_wire`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sealsync.errors import FormatError
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from sealsync.formats.table_device import is_table_device
from sealsync.formats.table_device import segments as table_segments

if TYPE_CHECKING:
    import pyarrow as pa

MIN_TIME, MAX_TIME = -(1 << 63), (1 << 63) - 1
MAX_PATTERN_BYTES = 4096
"""The longest path pattern a deletion may carry (UTF-8 bytes): far past any IoTDB
path, and short enough that matching one against every series of a file stays cheap."""
MAX_PATTERN_NODES = 256
"""The most nodes a path pattern may have; IoTDB's paths are a few levels deep."""
RULES_012 = "0.12"
"""IoTDB 0.12's reading of a deletion's path: a prefix; ``*`` one node; names as written."""
RULES_013 = "0.13"
"""IoTDB 0.13 to 1.1: the whole path; ``*``, ``**``; a node holding ``*`` is a glob."""
RULES_12 = "1.2"
"""IoTDB 1.2 and later (``.mods2`` too): as 0.13, a glob only where ``*`` starts or ends
the node."""
RULES = (RULES_012, RULES_013, RULES_12)
WIRE_RULES = "\x00rules="
"""What starts the first node of a record's nodes on the wire when its rules are not
:data:`RULES_12`; no pattern node can (a pattern's first node is ``root``)."""
_REGEX_SPECIAL = frozenset("\\^$.|?+()[]{}")
"""Characters a Java regular expression reads specially; ``*`` is the glob's own."""
MAX_DELETIONS = 100_000
"""The most deletions one ``.mods`` or ``.mods2`` may hold. Each is a record the loader
keeps for the file's run and matches against every series of the file; IoTDB writes one
per ``DELETE`` pattern that reached the file, so a file past this many was not written by
a database's own deletions."""


@dataclass(frozen=True)
class SeriesDeletion:
    """Points of the series ``pattern`` matches with ``start <= time <= end``, in the
    chunks that start below ``below_offset`` (None: in every chunk)."""

    pattern: tuple[str, ...]  # the nodes, as the file writes them (quotes kept)
    start: int
    end: int
    below_offset: int | None
    where: str  # "line 3" / "byte 17": where the file holds it, for messages
    rules: str = RULES_12  # which release's reading of the pattern (module doc)

    @property
    def path(self) -> str:
        return ".".join(self.pattern)


Segments = tuple[str | None, ...]
"""A table-model device's segments: the table name, then its tags (None: NULL)."""


@dataclass(frozen=True)
class TableDeletion:
    """A 2.x table-model deletion (see the module doc): the points of ``measurements``
    (none: every field) of the devices of ``table`` that every one of ``segments``
    (index, value) and ``devices`` (a whole device id) matches, in [start, end]."""

    table: str
    start: int
    end: int
    segments: tuple[tuple[int, str | None], ...]
    devices: tuple[Segments, ...]
    measurements: tuple[str, ...]  # empty: every column
    where: str

    @property
    def predicate(self) -> str:
        """The predicate, described for messages."""
        parts = [f"segment {i} = {v!r}" for i, v in self.segments]
        parts += [f"device {list(d)!r}" for d in self.devices]
        return " and ".join(parts) or "every device"

    def covers(self, device: Segments, measurement: str) -> bool:
        """Whether this deletes points of ``measurement`` of ``device`` (its segments,
        trailing nulls dropped)."""
        if not device or device[0] != self.table:
            return False
        if self.measurements and measurement not in self.measurements:
            return False
        n = len(device)
        return all((device[i] if i < n else None) == v for i, v in self.segments) and all(
            d == device for d in self.devices
        )


Deletion = SeriesDeletion | TableDeletion


def split_path(text: str) -> tuple[str, ...]:
    """The nodes of a path or pattern, each as written (quotes kept); ValueError names
    what is wrong (an empty node, an unclosed quote)."""
    nodes: list[str] = []
    i, n = 0, len(text)
    while True:
        if i < n and text[i] in '`"':
            quote = text[i]
            j = i + 1
            while True:
                k = text.find(quote, j)
                if k < 0:
                    raise ValueError(f"unclosed {quote} in {text!r}")
                if quote == "`" and k + 1 < n and text[k + 1] == "`":
                    j = k + 2  # a doubled backquote is one, inside the node
                    continue
                break
            node, i = text[i : k + 1], k + 1
            if i < n and text[i] != ".":
                raise ValueError(f"{node} is followed by {text[i]!r}, not a dot, in {text!r}")
        else:
            k = text.find(".", i)
            k = n if k < 0 else k
            node, i = text[i:k], k
        if not node:
            raise ValueError(f"an empty node in {text!r}")
        nodes.append(node)
        if i >= n:
            return tuple(nodes)
        i += 1  # the dot
        if i >= n:
            raise ValueError(f"an empty node in {text!r}")


def split_path_012(text: str) -> tuple[str, ...]:
    """The nodes of a path as IoTDB 0.12 splits one (``MetaUtils.splitPathToDetachedPath``):
    at dots outside double quotes, each node as written (a double quote escaped by a
    backslash does not close one; a backquote is a plain character); ValueError for an
    empty node, a quote not closed before a dot or the end, or a single quote."""
    nodes: list[str] = []
    start = i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == ".":
            if i == start:
                raise ValueError(f"an empty node in {text!r}")
            nodes.append(text[start:i])
            start = i + 1
        elif c == '"':
            end = text.find('"', i + 1)
            while end != -1 and text[end - 1] == "\\":
                end = text.find('"', end + 1)
            if end == -1 or (end != n - 1 and text[end + 1] != "."):
                raise ValueError(f"a double quote not closed before a dot in {text!r}")
            nodes.append(text[start : end + 1])
            if end == n - 1:
                return tuple(nodes)
            i, start = end + 1, end + 2
        elif c == "'":
            raise ValueError(f"a single quote in {text!r}")
        i += 1
    if start >= n:
        raise ValueError(f"an empty node in {text!r}")
    nodes.append(text[start:])
    return tuple(nodes)


def node_name(node: str) -> str:
    """A node's name: its text without enclosing quotes (a doubled backquote is one)."""
    if len(node) >= 2 and node[0] == node[-1] == "`":
        return node[1:-1].replace("``", "`")
    if len(node) >= 2 and node[0] == node[-1] == '"':
        return node[1:-1]
    return node


def _is_quoted(node: str) -> bool:
    return len(node) >= 2 and node[0] == node[-1] and node[0] in '`"'


def _glob_matches(pattern: str, name: str) -> bool:
    """Whether ``name`` matches the glob node ``pattern`` (``*``: any run of characters),
    in time linear in their lengths.

    A regular expression of ``.*`` between the parts backtracks: ``*a*a*a...*b``
    against a long run of ``a`` took hours. Here the first part must start the name,
    the last end it, and each one between is taken at its leftmost place after the one
    before: if any placement fits, the leftmost ones do, since they leave the most of
    the name to the parts after.
    """
    parts = pattern.split("*")
    first, last = parts[0], parts[-1]
    if len(first) + len(last) > len(name) or not name.startswith(first):
        return False
    if not name.endswith(last):
        return False
    at, end = len(first), len(name) - len(last)
    for part in parts[1:-1]:
        if part:
            found = name.find(part, at, end)
            if found < 0:
                return False
            at = found + len(part)
    return True


def is_glob(node: str, rules: str = RULES_12) -> bool:
    """Whether ``node`` (not ``*`` or ``**``) matches names by a glob under ``rules``:
    0.13 to 1.1 take any unquoted node holding ``*`` (``PartialPath.matchPath``), 1.2 and
    later one that starts or ends with it (``PathPatternUtil.hasWildcard``), 0.12 none."""
    if rules == RULES_012 or _is_quoted(node) or "*" not in node or node in ("*", "**"):
        return False
    return rules == RULES_013 or node.startswith("*") or node.endswith("*")


def _node_matches(pattern: str, name: str, rules: str) -> bool:
    if _is_quoted(pattern):
        return node_name(pattern) == name
    if pattern in ("*", "**"):
        return True
    if is_glob(pattern, rules):
        return _glob_matches(pattern, name)
    return pattern == name


def _match(pattern: tuple[str, ...], names: tuple[str, ...], rules: str) -> bool:
    """IoTDB 0.13+ matching of ``pattern`` against a path's node names, in time
    proportional to the pattern's nodes times the path's (each node tested once per
    place it may start at)."""
    # reach: how many names the pattern's nodes so far can have consumed
    reach: set[int] = {0}
    for node in pattern:
        if node == "**":  # one or more names: everything past the first place reached
            nxt = set(range(min(reach) + 1, len(names) + 1))
        else:
            nxt = {j + 1 for j in reach if j < len(names) and _node_matches(node, names[j], rules)}
        if not nxt:
            return False
        reach = nxt
    return len(names) in reach


def _match_012(pattern: tuple[str, ...], names: tuple[str, ...]) -> bool:
    """IoTDB 0.12's matching: ``pattern`` is a prefix of the path, node by node, each
    ``*`` or equal to the path's node as written."""
    return len(pattern) <= len(names) and all(
        p == "*" or p == n for p, n in zip(pattern, names, strict=False)
    )


def series_names(device: str, measurement: str, rules: str = RULES_12) -> tuple[str, ...]:
    """The node names of series ``measurement`` of ``device`` (a device path as the
    TsFile names it; the measurement one node, quoted or not) as ``rules`` compare
    them: 0.12 its nodes as written, later releases their names."""
    if rules == RULES_012:
        return (*split_path_012(device), measurement)
    return tuple(node_name(n) for n in split_path(device)) + (node_name(measurement),)


def regex_glob(deletion: SeriesDeletion) -> str | None:
    """A glob node of ``deletion`` that IoTDB reads as a regular expression with special
    characters other than ``*`` (``s{2}*``, ``a$*``), or None."""
    for node in deletion.pattern:
        if is_glob(node, deletion.rules) and not _REGEX_SPECIAL.isdisjoint(node):
            return node
    return None


def matches(deletion: SeriesDeletion, device: str, measurement: str) -> bool:
    """Whether ``deletion`` covers series ``measurement`` of ``device`` under its rules.

    FormatError for a series path that does not split, and for a glob IoTDB reads as a
    regular expression with characters of its own (neither reading is sure).
    """
    try:
        names = series_names(device, measurement, deletion.rules)
    except ValueError as exc:
        raise FormatError(f"series {device}.{measurement}: {exc}") from None
    if deletion.rules == RULES_012:
        return _match_012(deletion.pattern, names)
    node = regex_glob(deletion)
    if node is not None:
        raise FormatError(
            f"{deletion.where}: pattern {deletion.path}: IoTDB reads the node {node} as a "
            "regular expression; not applied (delete those points in IoTDB again with a "
            "glob of letters, digits and *)"
        )
    return _match(deletion.pattern, names, deletion.rules)


def check_pattern(path: str, where: str, rules: str = RULES_12) -> tuple[str, ...]:
    """``path`` split into nodes as ``rules`` split it, or FormatError naming ``where``
    and the cause (one over :data:`MAX_PATTERN_BYTES` or :data:`MAX_PATTERN_NODES`
    included)."""
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATTERN_BYTES:
        raise FormatError(
            f"{where}: a path pattern of {size} bytes, over the limit of {MAX_PATTERN_BYTES}"
        )
    try:
        nodes = split_path_012(path) if rules == RULES_012 else split_path(path)
    except ValueError as exc:
        raise FormatError(f"{where}: path {path!r}: {exc}") from None
    if len(nodes) > MAX_PATTERN_NODES:
        raise FormatError(
            f"{where}: a path pattern of {len(nodes)} nodes, over the limit of {MAX_PATTERN_NODES}"
        )
    first = nodes[0] if rules == RULES_012 else node_name(nodes[0])
    if first != "root":
        raise FormatError(f"{where}: path {path!r} does not start with root")
    return nodes


WIRE_TABLE = "\x00table"
"""The first node of a table-model deletion on the wire (:func:`to_wire`); no pattern
node is it."""


def to_wire(deletion: Deletion) -> list[str | None]:
    """The record's nodes as the loader's readers take them. A tree deletion: its
    pattern's nodes, its rules first, as a node no pattern has, unless they are
    :data:`RULES_12`. A table deletion: :data:`WIRE_TABLE`, the table, the count of
    measurements and each, then each segment condition as ``s``, its index and its
    value (None: NULL) and each whole device as ``d``, its segment count and each."""
    if isinstance(deletion, TableDeletion):
        out: list[str | None] = [WIRE_TABLE, deletion.table, str(len(deletion.measurements))]
        out.extend(deletion.measurements)
        for index, value in deletion.segments:
            out += ["s", str(index), value]
        for device in deletion.devices:
            out += ["d", str(len(device)), *device]
        return out
    nodes: list[str | None] = list(deletion.pattern)
    if deletion.rules != RULES_12:
        nodes.insert(0, WIRE_RULES + deletion.rules)
    return nodes


def from_wire(nodes: Sequence[str | None], start: int, end: int, where: str) -> Deletion:
    """:func:`to_wire`'s nodes (and the record's range and place) back as the record;
    a tree record covers every chunk (the caller sets its offset)."""
    if nodes and nodes[0] == WIRE_TABLE:
        return _table_from_wire(nodes, start, end, where)
    if any(n is None for n in nodes):
        raise FormatError(f"{where}: a null node in a deletion's pattern")
    pattern = [str(n) for n in nodes]
    rules = RULES_12
    if pattern and pattern[0].startswith(WIRE_RULES):
        rules = pattern[0][len(WIRE_RULES) :]
        if rules not in RULES:
            raise FormatError(f"a deletion read by unknown rules {rules!r}")
        pattern = pattern[1:]
    return SeriesDeletion(tuple(pattern), start, end, None, where, rules)


def _table_from_wire(nodes: Sequence[str | None], start: int, end: int, where: str) -> Deletion:
    try:
        table, count = str(nodes[1]), int(str(nodes[2]))
        at = 3 + count
        measurements = tuple(str(n) for n in nodes[3:at])
        if len(measurements) != count:
            raise ValueError(count)
        segments: list[tuple[int, str | None]] = []
        devices: list[Segments] = []
        while at < len(nodes):
            if nodes[at] == "s":
                segments.append((int(str(nodes[at + 1])), nodes[at + 2]))
                at += 3
            elif nodes[at] == "d":
                n = int(str(nodes[at + 1]))
                devices.append(tuple(nodes[at + 2 : at + 2 + n]))
                if len(devices[-1]) != n:
                    raise ValueError(n)
                at += 2 + n
            else:
                raise ValueError(nodes[at])
    except (IndexError, ValueError):
        raise FormatError(f"{where}: a table-model deletion that does not read back") from None
    return TableDeletion(table, start, end, tuple(segments), tuple(devices), measurements, where)


def too_large(kind: str, size: int, limit: int) -> FormatError:
    """The one line for a deletion file over its size limit."""
    return FormatError(
        f"{kind} of {size} bytes, over the limit of {limit} bytes for a deletion file "
        f"(at most {MAX_DELETIONS} deletions); not read"
    )


def too_many(kind: str, where: str) -> FormatError:
    """The one line for a deletion file holding more than :data:`MAX_DELETIONS`."""
    return FormatError(f"{kind} {where}: more than {MAX_DELETIONS} deletions in one file; not read")


def merged_ranges(ranges: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Closed ranges ``[start, end]`` as sorted, disjoint ones (starts, ends): a time is
    in one of ``ranges`` exactly when it is in one of these, found by a binary search.
    What a point costs to test then grows with the log of the deletions, not with them."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end in sorted(r for r in ranges if r[0] <= r[1]):
        if ends and start <= ends[-1] + 1:  # overlapping or adjacent: one range
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


def covered(times: np.ndarray, ranges: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Which of ``times`` fall in the disjoint sorted ``ranges`` (:func:`merged_ranges`)."""
    starts, ends = ranges
    if not len(starts):
        return np.zeros(len(times), dtype=bool)
    at = np.searchsorted(starts, times, side="right") - 1
    inside = at >= 0
    inside[inside] = times[inside] <= ends[at[inside]]
    return inside


def _ranges(
    device: str,
    parts: Segments | None,
    measurement: str,
    by_pattern: dict[tuple[tuple[str, ...], str], list[SeriesDeletion]],
    by_table: dict[str, list[TableDeletion]],
) -> list[tuple[int, int]]:
    """The time ranges deleted from series ``measurement`` of ``device``: by its table's
    deletions if it is a table-model device (``parts``: its segments), else by the tree
    ones."""
    if parts is not None:
        found = by_table.get(str(parts[0]), [])
        return [(d.start, d.end) for d in found if d.covers(parts, measurement)]
    return [
        (d.start, d.end)
        for group in by_pattern.values()
        if matches(group[0], device, measurement)
        for d in group
    ]


def _segments(device: str) -> Segments | None:
    """A table-model device's segments; None for a tree device."""
    if not is_table_device(device):
        return None
    try:
        return table_segments(device)
    except ValueError as exc:
        raise FormatError(f"device {device!r}: {exc}") from None


def apply(
    table: pa.Table | pa.RecordBatch, deletions: Sequence[Deletion], file_size: int | None = None
) -> pa.Table:
    """``table`` (device, time and one column per measurement, as the Python TsFile
    reader gives a file) without the points ``deletions`` remove; a row that had points
    and has none left goes.

    Without chunk offsets at hand, a deletion that covers only the chunks below an
    offset is applied only when that offset is past ``file_size`` (then it covers every
    chunk); otherwise FormatError. A table-model device (:mod:`.table_device`) is
    matched by its segments against the table deletions. A row whose time or
    device is null is no point of any series, so nothing removes it.

    Each series' deletions are merged into disjoint ranges first (:func:`merged_ranges`):
    a file's rows cost a binary search in them each, not a pass per deletion.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(table, pa.Table):
        table = pa.Table.from_batches([table])
    series_deletions: list[SeriesDeletion] = []
    table_deletions: list[TableDeletion] = []
    for d in deletions:
        if isinstance(d, TableDeletion):
            table_deletions.append(d)
            continue
        if d.below_offset is not None and (file_size is None or d.below_offset < file_size):
            raise FormatError(
                f"{d.where}: deletes only from chunks below offset {d.below_offset} of the "
                "data file, which needs the Java TsFile reader (it knows where chunks start)"
            )
        series_deletions.append(d)
    if not (series_deletions or table_deletions) or table.num_rows == 0:
        return table
    by_pattern: dict[tuple[tuple[str, ...], str], list[SeriesDeletion]] = {}
    for d in series_deletions:
        by_pattern.setdefault((d.pattern, d.rules), []).append(d)
    by_table: dict[str, list[TableDeletion]] = {}
    for t in table_deletions:
        by_table.setdefault(t.table, []).append(t)
    names = [n for n in table.column_names if n not in (DEVICE_COLUMN, TIME_COLUMN)]
    devices = [d for d in pc.unique(table.column(DEVICE_COLUMN)).to_pylist() if d is not None]
    time_column = table.column(TIME_COLUMN)
    times = pc.fill_null(time_column, 0).to_numpy()
    timed = pc.is_valid(time_column).to_numpy(zero_copy_only=False)
    gone = {n: np.zeros(table.num_rows, dtype=bool) for n in names}
    touched = np.zeros(table.num_rows, dtype=bool)
    for device in devices:
        rows = np.flatnonzero(
            pc.fill_null(pc.equal(table.column(DEVICE_COLUMN), device), False).to_numpy(
                zero_copy_only=False
            )
            & timed
        )
        parts = _segments(device)
        for n in names:
            ranges = _ranges(device, parts, n, by_pattern, by_table)
            if not ranges:
                continue
            hit = rows[covered(times[rows], merged_ranges(ranges))]
            gone[n][hit] = True
            touched[hit] = True
    keep = ~touched
    for n in names:
        column = table.column(n)
        if gone[n].any():
            column = pc.if_else(pa.array(gone[n]), pa.nulls(table.num_rows, column.type), column)
            table = table.set_column(table.column_names.index(n), n, column)
        keep |= pc.is_valid(column).to_numpy(zero_copy_only=False)
    return table.filter(pa.array(keep))
