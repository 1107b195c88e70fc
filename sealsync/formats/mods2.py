"""``X.mods2``: the binary deletion file IoTDB 2.x keeps beside a data file.

Read as IoTDB 2.x's ``ModificationFile`` reads it (``iotdb-core/datanode/.../
dataregion/modification/``): entries back to back from the first byte to the last, no
header, each a ``ModEntry`` (``ModEntry.createFrom``):

* one type byte: ``0x01`` a tree-model deletion (``TreeDeletionEntry``), ``0x00`` a
  table-model deletion (``TableDeletionEntry``);
* the closed time range: start, then end, each a big-endian int64;
* tree: the path pattern, a string; table: a ``DeletionPredicate`` -- the table name
  (a string), an id predicate (``IDPredicate``, one type byte: 0 ``NOP`` none; 1
  ``FullExactMatch``, a whole device id as ``StringArrayDeviceID.serialize`` writes it:
  an unsigned varint count, then each segment a string; 2 ``SegmentExactMatch``, a
  string, null for a NULL tag, then the segment's index, a varint, 0 the table name and
  1 the first tag; 3 ``And``, a varint count then each predicate), then a varint count
  of measurement names and each name (a string; none: every column).

A string is a varint length then that many UTF-8 bytes, a length of -1 a null string;
a varint is zigzag-encoded, seven bits a byte, low bits first, high bit set on every
byte but the last (``ReadWriteIOUtils.writeVar``, ``ReadWriteForEncodingUtils.writeVarInt``).
Entries carry no file offset: a deletion covers every chunk of its file.

A tree entry becomes a :class:`~sealsync.formats.deletion.SeriesDeletion`, a table
entry a :class:`~sealsync.formats.deletion.TableDeletion`, its predicate as the
conditions that must all hold (at most 256 in one entry and :data:`MAX_CONDITIONS` in
the file, a device id of at most 256 segments). An
entry that does not read -- an unknown type, a truncated tail, a bad string -- makes
the file unreadable; :class:`FormatError` names its byte offset.

``X.compaction.mods2`` is not read and not shipped: IoTDB writes every deletion that
reaches a file being compacted to the file's own ``X.mods2`` and, as a cascade, to
``X.compaction.mods2``, which it later moves onto the target's ``.mods2``
(``ModificationFile.write``, ``getCompactionMods``). Its entries are in ``.mods2``
files the sender ships already.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

from sealsync.errors import FormatError
from sealsync.formats.deletion import (
    MAX_DELETIONS,
    MAX_PATTERN_BYTES,
    MAX_PATTERN_NODES,
    Deletion,
    Segments,
    SeriesDeletion,
    TableDeletion,
    check_pattern,
    too_large,
    too_many,
)
from sealsync.formats.table_device import trimmed
from sealsync.protocol.spec import MAX_DELETION_FILE_SIZE

MAX_MODS2_SIZE = MAX_DELETION_FILE_SIZE
"""The largest ``.mods2`` read: as for a ``.mods`` (:data:`sealsync.formats.mods.MAX_MODS_SIZE`)."""
MAX_STRING = MAX_PATTERN_BYTES
"""The longest string an entry may hold (a pattern, a table or measurement name)."""
MAX_CONDITIONS = 1 << 20
"""The most id predicate conditions one file may hold, all entries together: each is a
record the loader keeps and tests against the devices of its table (IoTDB writes a
few per ``DELETE``)."""
TREE, TABLE = 0x01, 0x00
_NOP, _FULL, _SEGMENT, _AND = 0, 1, 2, 3
_MAX_AND_DEPTH = 64


class _Reader:
    """The entries' primitives read from ``stream`` (``size`` bytes in all): every
    length is checked against :data:`MAX_STRING` and the bytes left before it is read."""

    def __init__(self, stream: BinaryIO, size: int) -> None:
        self.stream = stream
        self.size = size
        self.at = 0
        self.entry = 0  # where the entry being read starts
        self.conditions = 0  # id predicate conditions read so far, of every entry

    def fail(self, what: str) -> FormatError:
        return FormatError(f".mods2 byte {self.at} (entry at byte {self.entry}): {what}")

    def take(self, n: int, what: str) -> bytes:
        if self.at + n > self.size:
            raise self.fail(f"the file ends inside {what}")
        out = self.stream.read(n)
        if len(out) != n:
            raise self.fail(f"the file ends inside {what} (it shrank while read)")
        self.at += n
        return out

    def byte(self, what: str) -> int:
        return self.take(1, what)[0]

    def int64(self, what: str) -> int:
        return int.from_bytes(self.take(8, what), "big", signed=True)

    def varint(self, what: str) -> int:
        """``ReadWriteForEncodingUtils.readVarInt``: an unsigned varint, zigzag-decoded."""
        value = self.uvarint(what) & 0xFFFFFFFF
        return (value >> 1) ^ -(value & 1)

    def uvarint(self, what: str) -> int:
        """An unsigned varint (``ReadWriteForEncodingUtils.readUnsignedVarInt``): no zigzag."""
        value = shift = 0
        while True:
            b = self.byte(what)
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift >= 35:
                raise self.fail(f"{what}: a varint longer than 5 bytes")

    def string_or_null(self, what: str) -> str | None:
        """``ReadWriteIOUtils.readVarIntString``: a length of -1 is a null string."""
        at = self.at
        n = self.varint(what)
        if n == -1:
            return None
        if not 0 <= n <= MAX_STRING:
            self.at = at
            raise self.fail(f"{what}: length {n} (at most {MAX_STRING})")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.at = at
            raise self.fail(f"{what} is not UTF-8") from None

    def string(self, what: str) -> str:
        at = self.at
        found = self.string_or_null(what)
        if found is None:
            self.at = at
            raise self.fail(f"{what}: length -1 (at most {MAX_STRING})")
        return found

    def device(self) -> Segments:
        """``StringArrayDeviceID.deserialize``: an unsigned varint count (0: one empty
        segment), then each segment; trailing nulls dropped, as its constructor does."""
        at = self.at
        count = self.uvarint("a device id's segment count")
        if count > MAX_PATTERN_NODES:
            self.at = at
            raise self.fail(f"a device id of {count} segments (at most {MAX_PATTERN_NODES})")
        if count == 0:
            return ("",)
        found = trimmed([self.string_or_null("a device id's segment") for _ in range(count)])
        if not found:
            self.at = at
            raise self.fail("a device id whose every segment is null")
        return found

    def predicate(self, out: _Conditions, depth: int = 0) -> None:
        """An id predicate (``IDPredicate.createFrom``) into ``out``: every condition of
        a conjunction, at most :data:`MAX_PATTERN_NODES` in one entry."""
        kind = self.byte("an id predicate")
        if kind == _NOP:
            return
        if kind == _SEGMENT:
            value = self.string_or_null("an id predicate's segment")
            at = self.at
            index = self.varint("an id predicate's segment index")
            if index < 0:
                self.at = at
                raise self.fail(f"an id predicate's segment index {index}")
            out.segments.append((index, value))
        elif kind == _FULL:
            out.devices.append(self.device())
        elif kind == _AND:
            if depth >= _MAX_AND_DEPTH:
                self.at -= 1
                raise self.fail(f"id predicates nested more than {_MAX_AND_DEPTH} deep")
            count = self.varint("an id predicate's count")
            if not 0 <= count <= self.size - self.at:  # each part is a byte at least
                raise self.fail(f"an id predicate of {count} parts")
            for _ in range(count):
                self.predicate(out, depth + 1)
        else:
            self.at -= 1
            raise self.fail(f"unknown id predicate type {kind}")
        if len(out.segments) + len(out.devices) > MAX_PATTERN_NODES:
            raise self.fail(f"an id predicate of more than {MAX_PATTERN_NODES} conditions")
        if kind != _AND:
            self.conditions += 1
            if self.conditions > MAX_CONDITIONS:
                raise self.fail(f"more than {MAX_CONDITIONS} id predicate conditions in one file")


class _Conditions:
    """An id predicate's conditions, all of which must hold."""

    def __init__(self) -> None:
        self.segments: list[tuple[int, str | None]] = []
        self.devices: list[Segments] = []


def parse(data: bytes) -> list[Deletion]:
    """The entries of a ``.mods2`` file's bytes, in file order."""
    return _parse(_Reader(io.BytesIO(data), len(data)))


def _parse(r: _Reader) -> list[Deletion]:
    """The entries ``r`` reads, in file order; at most :data:`MAX_DELETIONS` of them."""
    out: list[Deletion] = []
    while r.at < r.size:
        r.entry = r.at
        if len(out) >= MAX_DELETIONS:
            raise too_many(".mods2", f"entry at byte {r.entry}")
        kind = r.byte("an entry type")
        if kind not in (TREE, TABLE):
            r.at -= 1
            raise r.fail(f"unknown entry type 0x{kind:02x}")
        start = r.int64("a start time")
        end = r.int64("an end time")
        where = f".mods2 entry at byte {r.entry}"
        if kind == TREE:
            path = r.string("a path pattern")
            out.append(SeriesDeletion(check_pattern(path, where), start, end, None, where))
            continue
        table = r.string("a table name")
        conditions = _Conditions()
        r.predicate(conditions)
        count = r.varint("a measurement count")
        if not count <= r.size - r.at:  # each name is a byte at least
            raise r.fail(f"{count} measurements")
        names = tuple(r.string("a measurement name") for _ in range(max(count, 0)))
        out.append(
            TableDeletion(
                table,
                start,
                end,
                tuple(conditions.segments),
                tuple(conditions.devices),
                names,
                where,
            )
        )
    return out


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint(n: int) -> bytes:
    """``ReadWriteForEncodingUtils.writeVarInt``: zigzag, then unsigned."""
    return _uvarint(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def _string(text: str | None) -> bytes:
    """``ReadWriteIOUtils.writeVar``: a zigzag length (-1 for null), then UTF-8."""
    if text is None:
        return _varint(-1)
    raw = text.encode("utf-8")
    return _varint(len(raw)) + raw


def nop() -> bytes:
    """``IDPredicate.NOP``: every device of the table."""
    return bytes([_NOP])


def segment_match(value: str | None, index: int) -> bytes:
    """``IDPredicate.SegmentExactMatch``: segment ``index`` (0 the table) equal to ``value``."""
    return bytes([_SEGMENT]) + _string(value) + _varint(index)


def full_match(segments: tuple[str | None, ...]) -> bytes:
    """``IDPredicate.FullExactMatch``: the whole device id (``StringArrayDeviceID.serialize``)."""
    return bytes([_FULL]) + _uvarint(len(segments)) + b"".join(_string(s) for s in segments)


def and_match(*parts: bytes) -> bytes:
    """``IDPredicate.And`` of ``parts``."""
    return bytes([_AND]) + _varint(len(parts)) + b"".join(parts)


def table_entry(
    table: str, start: int, end: int, predicate: bytes, measurements: tuple[str, ...] = ()
) -> bytes:
    """One table-model deletion as IoTDB 2.x writes it (``ModEntry.serialize``: the type
    byte, the ``TimeRange``; then ``DeletionPredicate.serialize``: the table name, the id
    predicate -- :func:`nop`, :func:`segment_match`, :func:`full_match`,
    :func:`and_match` -- and the measurement names, a zigzag count then each), for tests."""
    return (
        bytes([TABLE])
        + start.to_bytes(8, "big", signed=True)
        + end.to_bytes(8, "big", signed=True)
        + _string(table)
        + predicate
        + _varint(len(measurements))
        + b"".join(_string(m) for m in measurements)
    )


def tree_entry(path: str, start: int, end: int) -> bytes:
    """One tree-model deletion as IoTDB 2.x writes it (``ModEntry.serialize``: the type
    byte, the ``TimeRange``'s start and end; then ``TreeDeletionEntry``'s pattern,
    ``ReadWriteIOUtils.writeVar`` of its full path), for the simulator and tests: a
    ``.mods2`` is these entries appended one after another."""
    return (
        bytes([TREE])
        + start.to_bytes(8, "big", signed=True)
        + end.to_bytes(8, "big", signed=True)
        + _string(path)
    )


def read(path: str | os.PathLike[str]) -> list[Deletion]:
    """The deletions in ``path``; none when it does not exist."""
    return read_version(path)[0]


def read_version(
    path: str | os.PathLike[str],
) -> tuple[list[Deletion], tuple[int, int] | None]:
    """The deletions in ``path`` and the ``(size, mtime_ns)`` of the file read (from one
    open file, as :func:`sealsync.formats.mods.read_version`); ``([], None)`` if absent.
    A file over :data:`MAX_MODS2_SIZE` is refused by its size, unread; the rest is read
    entry by entry through a buffer."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size > MAX_MODS2_SIZE:
                raise too_large(".mods2", st.st_size, MAX_MODS2_SIZE)
            found = _parse(_Reader(f, st.st_size))
    except FileNotFoundError:
        return [], None
    return found, (st.st_size, st.st_mtime_ns)
