"""``X.mods``: the text deletion file IoTDB 0.11-1.x keeps beside a data file.

Read as IoTDB's ``LocalTextModificationAccessor`` reads it (0.12: ``server/.../engine/
modification/io/``; 1.x: ``iotdb-core/datanode/.../modification/io/``): one
modification per line, fields split at commas,

* ``DELETION,<path>,<fileOffset>,<startTime>,<endTime>`` -- every point of the series
  ``<path>`` (a series path or pattern, :mod:`sealsync.formats.deletion`) with
  ``startTime <= time <= endTime``, in the chunks that start below ``fileOffset`` (the
  data file's length when the deletion was written; ``Long.MAX_VALUE`` while the file
  is being compacted);
* ``DELETION,<path>,<version>,<endTime>`` -- older writers: the same with start
  ``Long.MIN_VALUE`` (IoTDB reads the third field as the offset here too);
* a line that is exactly ``aborted`` (0.11-0.13 write it when writing a modification
  failed) cancels the modification read just before it, once per line.

IoTDB tells the forms apart as its reader does: when the third field from the end is
an integer the line is the 5-field form and the path is every field between the type
and it (a path may hold commas); otherwise the 4-field form. Java's split drops
trailing empty fields, so ``...,5,`` reads as ``...,5``.

Which release wrote the file decides how its paths read (:mod:`sealsync.formats.deletion`:
0.12 reads a path as a prefix and ``d*`` as a name, 0.13 to 1.1 as a whole path with
globs, 1.2 and later as a whole path with globs only at a node's ends). The data file,
its ``.resource`` and its ``.mods`` are written by the same code in 0.12, 0.13, 1.0 and
1.1 (``TsFileIOWriter``, ``TsFileResource.serialize``, ``LocalTextModificationAccessor.
encodeDeletion`` of each), so :func:`rules_for` decides by what differs:

* a ``.resource`` beside the data file with a block after its modification file's
  field (1.2 and later always write one; :mod:`sealsync.formats.resource`): 1.2's rules;
* else a ``**`` node in any line (0.12's grammar has none: ``DELETE FROM root.sg.**``
  is a syntax error there): 0.13's rules;
* else 0.12's. A 0.13, 1.0 or 1.1 edge whose ``.mods`` has no ``**`` line is read as
  0.12 reads it; the two readings differ only for a glob inside a node (``d*``) and for
  a pattern that reaches a device nested below another (docs/formats.md).

IoTDB's reader logs a line it cannot decode and ignores the rest of the file; here
such a file is unreadable as a whole (:class:`FormatError` names the line), since
loading it would keep points IoTDB may have deleted. So is an ``aborted`` with no
modification before it (IoTDB fails on it the same way) and a last line without its
line end (a write in progress; 1.x truncates such a line when it restarts).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from sealsync.errors import FormatError
from sealsync.formats import resource
from sealsync.formats.deletion import (
    MAX_DELETIONS,
    MAX_PATTERN_BYTES,
    MAX_TIME,
    MIN_TIME,
    RULES_012,
    RULES_013,
    RULES_12,
    SeriesDeletion,
    check_pattern,
    split_path,
    too_large,
    too_many,
)
from sealsync.protocol.spec import MAX_DELETION_FILE_SIZE

MAX_MODS_SIZE = MAX_DELETION_FILE_SIZE
"""The largest ``.mods`` read (bytes), refused by its size before any of it is read.
The protocol carries sidecars of up to 1 GiB, but every deletion becomes a record the
loader holds and hands to its readers with the file (see
:data:`~sealsync.formats.deletion.MAX_DELETIONS`); receivers refuse a larger one when it
is announced."""
MAX_LINE = MAX_PATTERN_BYTES + 128
"""The longest line a deletion can take: its pattern, the word, three longs, commas."""
ABORTED = "aborted"
SUFFIX, RESOURCE = ".mods", ".resource"
_LONG = re.compile(r"[+-]?[0-9]+")


def _long(text: str) -> int | None:
    """``text`` as Java's ``Long.parseLong`` reads it, or None where it throws."""
    if not _LONG.fullmatch(text):
        return None
    value = int(text)
    return value if MIN_TIME <= value <= MAX_TIME else None


@dataclass(frozen=True)
class _Line:
    """A decoded line whose path is not split yet: how depends on the file's writer."""

    path: str
    offset: int
    start: int
    end: int
    where: str


def _decode(line: str, where: str) -> _Line:
    fields = line.split(",")
    while len(fields) > 1 and fields[-1] == "":
        fields.pop()  # Java's String.split drops trailing empty strings
    if fields[0] != "DELETION":
        raise FormatError(f"{where}: unknown modification type {fields[0][:40]!r}")
    if len(fields) < 4:
        raise FormatError(f"{where}: {len(fields)} fields, a deletion has 4 or 5")
    offset = _long(fields[-3])
    if offset is not None:
        path_fields, start_text, end_text = fields[1:-3], fields[-2], fields[-1]
    else:
        path_fields, start_text, end_text = fields[1:-2], None, fields[-1]
        offset = _long(fields[-2])
        if offset is None:
            raise FormatError(f"{where}: version {fields[-2][:40]!r} is not a long")
    start = MIN_TIME if start_text is None else _long(start_text)
    end = _long(end_text)
    if start is None or end is None:
        bad = end_text if end is None else start_text
        raise FormatError(f"{where}: time {str(bad)[:40]!r} is not a long")
    path = ",".join(path_fields)
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATTERN_BYTES:
        check_pattern(path, where)  # its one line for the size
    return _Line(path, offset, start, end, where)


def _multi_level(path: str) -> bool:
    """Whether ``path`` has a ``**`` node (which only 0.13 and later write)."""
    if "**" not in path:
        return False
    try:
        return "**" in split_path(path)
    except ValueError:
        return False


def rules_for(paths: Iterable[str], resource_path: str | os.PathLike[str] | None) -> str:
    """The rules the paths of one ``.mods`` are read by (see the module doc):
    ``resource_path`` is its data file's ``.resource`` (None, absent or unreadable: no
    evidence from it)."""
    if resource_path is not None:
        try:
            if resource.read(resource_path).blocks:
                return RULES_12
        except (OSError, FormatError, ValueError):
            pass  # no .resource, or none IoTDB wrote: the lines decide
    return RULES_013 if any(_multi_level(p) for p in paths) else RULES_012


def _records(lines: list[_Line], rules: str) -> list[SeriesDeletion]:
    return [
        SeriesDeletion(
            check_pattern(d.path, d.where, rules), d.start, d.end, d.offset, d.where, rules
        )
        for d in lines
    ]


def parse(text: str, rules: str | None = None) -> list[SeriesDeletion]:
    """The deletions of a ``.mods`` text in file order, ``aborted`` ones taken out, read
    by ``rules`` (None: as :func:`rules_for` decides from the text alone); FormatError
    names the first line that does not read."""
    data = text.encode("utf-8", "surrogatepass")
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]  # what follows the last line end: a line without one
    decoded = _parse_lines(lines if lines[-1] else lines[:-1])
    return _records(decoded, rules or rules_for((d.path for d in decoded), None))


def _parse_lines(lines: Iterable[bytes]) -> list[_Line]:
    """The lines of a ``.mods`` given line by line (each with its line end but the
    last, if that one has none): one line in memory at a time besides the records."""
    out: list[_Line] = []
    number = 0
    for raw in lines:
        number += 1
        if not raw.endswith(b"\n"):
            raise FormatError(
                f".mods line {number} has no line end: IoTDB is still writing it (the next "
                "round ships the whole line)"
            )
        if len(raw) > MAX_LINE:
            raise FormatError(
                f".mods line {number}: {len(raw)} bytes, longer than any deletion "
                f"(patterns are at most {MAX_PATTERN_BYTES} bytes)"
            )
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f".mods line {number}: not UTF-8 text") from None
        line = line[:-2] if line.endswith("\r\n") else line[:-1]
        if line == ABORTED:
            if not out:
                raise FormatError(f".mods line {number}: 'aborted' with no modification before it")
            out.pop()
            continue
        if len(out) >= MAX_DELETIONS:
            raise too_many(".mods", f"line {number}")
        out.append(_decode(line, f".mods line {number}"))
    return out


def line(path: str, offset: int, start: int, end: int) -> str:
    """One deletion in the 5-field form IoTDB 0.12-1.x writes (with its line end)."""
    return f"DELETION,{path},{offset},{start},{end}\n"


def read(path: str | os.PathLike[str]) -> list[SeriesDeletion]:
    """The deletions in ``path``; none when it does not exist."""
    return read_version(path)[0]


def read_version(
    path: str | os.PathLike[str],
) -> tuple[list[SeriesDeletion], tuple[int, int] | None]:
    """The deletions in ``path`` and the ``(size, mtime_ns)`` of the file they were read from.

    Both come from one open file, so a caller that identifies a ``.mods`` by its size
    and mtime (the Spark loader) can tell whether the deletions it read are the version
    it identified, even if the file is replaced meanwhile. ``([], None)`` if absent.
    A file over :data:`MAX_MODS_SIZE` is refused by its size, unread; the rest is read
    a line at a time. Its paths are read by the rules :func:`rules_for` gives, from the
    lines and the ``.resource`` beside the data file.
    """
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size > MAX_MODS_SIZE:
                raise too_large(".mods", st.st_size, MAX_MODS_SIZE)
            decoded = _parse_lines(_bounded_lines(f, MAX_MODS_SIZE))
    except FileNotFoundError:
        return [], None
    text = os.fspath(path)
    beside = text[: -len(SUFFIX)] + RESOURCE if text.endswith(SUFFIX) else None
    found = _records(decoded, rules_for((d.path for d in decoded), beside))
    return found, (st.st_size, st.st_mtime_ns)


def _bounded_lines(f: Iterable[bytes], limit: int) -> Iterable[bytes]:
    """``f``'s lines, refusing past ``limit`` bytes in all (a file that grows while read)."""
    seen = 0
    for raw in f:
        seen += len(raw)
        if seen > limit:
            raise too_large(".mods", seen, limit)
        yield raw
