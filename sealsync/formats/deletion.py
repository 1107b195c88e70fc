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
* :class:`TableDeletion` -- a table-model deletion of 2.x. Parsed so a file holding
  one reads, never applied: the loader refuses the file with one line instead of
  guessing which rows the predicate meant.

Path patterns follow IoTDB 0.13 and later (``PartialPath.matchFullPath``,
``PathPatternUtil``): a pattern matches a series path of the same shape node by
node; ``*`` is any one node, ``**`` one or more nodes (anywhere in the pattern), and a
node that starts or ends with ``*`` (``d*``, ``*1``) matches names by that glob.
Nodes are split at dots outside backquotes (1.x, 2.x) or double quotes (0.12);
inside backquotes a doubled backquote is one. A quoted node is a name, never a
wildcard. IoTDB 0.12 matched a pattern as a *prefix* (``root.sg.d1`` covered every
series under ``d1``); where that reading and the later one disagree for a series of
the file, :func:`matches` refuses rather than guess which release wrote the line.

The Java reader of the loader matches with the same rules
(``io.sealsync.tsfile.PathPattern``); both are held to one table of cases,
``tests/path_pattern_cases.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sealsync.errors import FormatError
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa

MIN_TIME, MAX_TIME = -(1 << 63), (1 << 63) - 1
MAX_PATTERN_BYTES = 4096
"""The longest path pattern a deletion may carry (UTF-8 bytes): far past any IoTDB
path, and short enough that matching one against every series of a file stays cheap."""
MAX_PATTERN_NODES = 256
"""The most nodes a path pattern may have; IoTDB's paths are a few levels deep."""
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

    @property
    def path(self) -> str:
        return ".".join(self.pattern)


@dataclass(frozen=True)
class TableDeletion:
    """A 2.x table-model deletion: kept as read, applied never (see the module doc)."""

    table: str
    start: int
    end: int
    predicate: str  # IoTDB's id predicate, described
    measurements: tuple[str, ...]  # empty: every column
    where: str


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


def _node_matches(pattern: str, name: str) -> bool:
    if _is_quoted(pattern):
        return node_name(pattern) == name
    if pattern in ("*", "**"):
        return True
    if pattern.startswith("*") or pattern.endswith("*"):
        return _glob_matches(pattern, name)
    return pattern == name


def _match(pattern: tuple[str, ...], names: tuple[str, ...]) -> bool:
    """IoTDB 0.13+ matching of ``pattern`` against a path's node names, in time
    proportional to the pattern's nodes times the path's (each node tested once per
    place it may start at)."""
    # reach: how many names the pattern's nodes so far can have consumed
    reach: set[int] = {0}
    for node in pattern:
        if node == "**":  # one or more names: everything past the first place reached
            nxt = set(range(min(reach) + 1, len(names) + 1))
        else:
            nxt = {j + 1 for j in reach if j < len(names) and _node_matches(node, names[j])}
        if not nxt:
            return False
        reach = nxt
    return len(names) in reach


def _only_as_prefix(pattern: tuple[str, ...], names: tuple[str, ...]) -> bool:
    """Whether IoTDB 0.12, which read a pattern as a prefix of the paths it covers, would
    delete from this path where 0.13 and later do not: the pattern is shorter than the
    path and matches its first nodes. (0.12 knew no ``**`` and no globs in a node.)"""
    return (
        "**" not in pattern
        and len(pattern) < len(names)
        and all(_node_matches(p, n) for p, n in zip(pattern, names, strict=False))
    )


def series_names(device: str, measurement: str) -> tuple[str, ...]:
    """The node names of series ``measurement`` of ``device`` (a device path as the
    TsFile names it; the measurement one node, quoted or not)."""
    return tuple(node_name(n) for n in split_path(device)) + (node_name(measurement),)


def matches(deletion: SeriesDeletion, device: str, measurement: str) -> bool:
    """Whether ``deletion`` covers series ``measurement`` of ``device``.

    FormatError when IoTDB 0.12 (prefix patterns) and 0.13+ (whole-path patterns)
    disagree for this series: applying either reading might delete what the IoTDB that
    wrote the line kept, so the file is refused with the cause.
    """
    try:
        names = series_names(device, measurement)
    except ValueError as exc:
        raise FormatError(f"series {device}.{measurement}: {exc}") from None
    if _only_as_prefix(deletion.pattern, names):
        raise FormatError(
            f"{deletion.where}: pattern {deletion.path} covers {device}.{measurement} in "
            "IoTDB 0.12 (a prefix) but not in 0.13 and later (a whole path); not applied "
            "(delete those points in IoTDB again with a whole-path pattern, e.g. ending in .**)"
        )
    return _match(deletion.pattern, names)


def check_pattern(path: str, where: str) -> tuple[str, ...]:
    """``path`` split into nodes, or FormatError naming ``where`` and the cause (one
    over :data:`MAX_PATTERN_BYTES` or :data:`MAX_PATTERN_NODES` included)."""
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATTERN_BYTES:
        raise FormatError(
            f"{where}: a path pattern of {size} bytes, over the limit of {MAX_PATTERN_BYTES}"
        )
    try:
        nodes = split_path(path)
    except ValueError as exc:
        raise FormatError(f"{where}: path {path!r}: {exc}") from None
    if len(nodes) > MAX_PATTERN_NODES:
        raise FormatError(
            f"{where}: a path pattern of {len(nodes)} nodes, over the limit of {MAX_PATTERN_NODES}"
        )
    if node_name(nodes[0]) != "root":
        raise FormatError(f"{where}: path {path!r} does not start with root")
    return nodes


def too_large(kind: str, size: int, limit: int) -> FormatError:
    """The one line for a deletion file over its size limit."""
    return FormatError(
        f"{kind} of {size} bytes, over the limit of {limit} bytes for a deletion file "
        f"(at most {MAX_DELETIONS} deletions); not read"
    )


def too_many(kind: str, where: str) -> FormatError:
    """The one line for a deletion file holding more than :data:`MAX_DELETIONS`."""
    return FormatError(f"{kind} {where}: more than {MAX_DELETIONS} deletions in one file; not read")


def refuse_table_deletions(deletions: Sequence[Deletion]) -> None:
    """FormatError for the first table-model deletion: the loader applies none."""
    for d in deletions:
        if isinstance(d, TableDeletion):
            raise FormatError(
                f"{d.where}: a table-model deletion (table {d.table}, {d.predicate}) is not "
                "applied by this loader; the file stays out of the table"
            )


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


def apply(
    table: pa.Table | pa.RecordBatch, deletions: Sequence[Deletion], file_size: int | None = None
) -> pa.Table:
    """``table`` (device, time and one column per measurement, as the Python TsFile
    reader gives a file) without the points ``deletions`` remove; a row that had points
    and has none left goes.

    Without chunk offsets at hand, a deletion that covers only the chunks below an
    offset is applied only when that offset is past ``file_size`` (then it covers every
    chunk); otherwise FormatError, as for table-model deletions. A row whose time or
    device is null is no point of any series, so nothing removes it.

    Each series' deletions are merged into disjoint ranges first (:func:`merged_ranges`):
    a file's rows cost a binary search in them each, not a pass per deletion.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(table, pa.Table):
        table = pa.Table.from_batches([table])
    refuse_table_deletions(deletions)
    series_deletions: list[SeriesDeletion] = []
    for d in deletions:
        assert isinstance(d, SeriesDeletion)
        if d.below_offset is not None and (file_size is None or d.below_offset < file_size):
            raise FormatError(
                f"{d.where}: deletes only from chunks below offset {d.below_offset} of the "
                "data file, which needs the Java TsFile reader (it knows where chunks start)"
            )
        series_deletions.append(d)
    if not series_deletions or table.num_rows == 0:
        return table
    by_pattern: dict[tuple[str, ...], list[SeriesDeletion]] = {}
    for d in series_deletions:
        by_pattern.setdefault(d.pattern, []).append(d)
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
        for n in names:
            ranges = [
                (d.start, d.end)
                for group in by_pattern.values()
                if matches(group[0], device, n)
                for d in group
            ]
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
