"""``X.mods``: the points a database deleted from a data file after sealing it.

One deletion per line, ``DELETION,<device>,<until_ms>``: every point of ``<device>``
whose time is at most ``<until_ms>`` is gone (the device name may itself contain
commas; the time is the last field). IoTDB appends a line for each ``DELETE``
statement that reaches a sealed file, so the file only grows; its identity (size and
mtime) says whether the deletions changed.

The one reader of this format: the simulator writes it, the Spark loader applies it.
A line that does not parse makes the whole file unreadable (a deletion silently
skipped would keep deleted points in the table); an empty line is allowed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sealsync.errors import FormatError
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN

MAX_MODS_SIZE = 1 << 30  # what the protocol accepts for a sidecar
_MIN_TIME, _MAX_TIME = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True)
class Deletion:
    device: str
    until_ms: int

    def line(self) -> str:
        return f"DELETION,{self.device},{self.until_ms}\n"


def parse(text: str) -> list[Deletion]:
    """The deletions of a ``.mods`` text, in file order; FormatError names a bad line."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.rsplit(",", 1)
        head = parts[0].split(",", 1)
        if len(parts) != 2 or len(head) != 2 or head[0] != "DELETION" or not head[1]:
            raise FormatError(f".mods line {number}: not DELETION,<device>,<until_ms>")
        try:
            until = int(parts[1])
        except ValueError:
            raise FormatError(f".mods line {number}: time {parts[1]!r} is not an integer") from None
        if not _MIN_TIME <= until <= _MAX_TIME:
            raise FormatError(f".mods line {number}: time {until} out of range")
        out.append(Deletion(head[1], until))
    return out


def read(path: str | os.PathLike[str]) -> list[Deletion]:
    """The deletions in ``path``; none when it does not exist."""
    return read_version(path)[0]


def read_version(
    path: str | os.PathLike[str],
) -> tuple[list[Deletion], tuple[int, int] | None]:
    """The deletions in ``path`` and the ``(size, mtime_ns)`` of the file they were read from.

    Both come from one open file, so a caller that identifies a ``.mods`` by its size
    and mtime (the Spark loader) can tell whether the deletions it read are the version
    it identified, even if the file is replaced meanwhile. ``([], None)`` if absent.
    """
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read(MAX_MODS_SIZE + 1)
    except FileNotFoundError:
        return [], None
    version = (st.st_size, st.st_mtime_ns)
    if len(raw) > MAX_MODS_SIZE:
        raise FormatError(f".mods larger than {MAX_MODS_SIZE} bytes")
    try:
        return parse(raw.decode("utf-8")), version
    except UnicodeDecodeError:
        raise FormatError(".mods is not UTF-8 text") from None


def apply(table: pa.Table | pa.RecordBatch, deletions: list[Deletion]) -> pa.Table:
    """``table`` without the points ``deletions`` remove (needs time and device).

    A row whose time or device is null is no point of any device, so no deletion
    removes it (the Spark loader's filter on Parquet scans agrees).
    """
    if not isinstance(table, pa.Table):
        table = pa.Table.from_batches([table])
    if not deletions or table.num_rows == 0:
        return table
    gone = None
    for d in deletions:
        hit = pc.and_(
            pc.equal(table.column(DEVICE_COLUMN), d.device),
            pc.less_equal(table.column(TIME_COLUMN), d.until_ms),
        )
        gone = hit if gone is None else pc.or_(gone, hit)
    return table.filter(pc.invert(pc.fill_null(gone, False)))
