"""The TsFile on-disk metadata, read and checked in Python: format versions 3 and 4.

Why: before the receiver accepts a file it must know that the file is a whole TsFile
and which devices it holds (the ownership rule), for files of every IoTDB release
from 0.12 on. The file's own metadata answers both, and walking all of it proves the
file complete and consistent without decoding a page. The ``tsfile`` package's C++
reader cannot serve here: it reads format 4 only, and it trusts what it reads (a bad
length becomes a wild pointer), while received files are untrusted. This module
reads the layouts as apache/tsfile's Java reader does (``TsFileSequenceReader`` and
its format-3 deserializers; format 3 is what IoTDB 0.12 to 1.3 write, 4 IoTDB 2.x)::

    "TsFile" <version>                         head: one byte 3 or 4
    chunk groups                               data region: chunk headers and pages
    0x02                                       separator, at ``meta_offset``
    TimeseriesMetadata lists, index nodes      index region
    TsFileMetadata                             ``meta_len`` bytes
    <meta_len: int32> "TsFile"                 tail

``TsFileMetadata`` holds the root of the index tree (format 3), or one root per
table plus the table schemas (format 4), then ``meta_offset``, a bloom filter and
(format 4) properties. The tree's device nodes lead to each device's measurement
nodes, whose leaves lead to ``TimeseriesMetadata`` lists; each ``TimeseriesMetadata``
lists its chunks' offsets. A device id is one string in format 3 and a list of
segments in format 4 (rendered joined by dots, a null segment as ``null``; a device of
a table the file has a schema of, a table-model device, as :mod:`.table_device` names
it: the table plus its tags, unambiguously).

What is checked: magic at both ends, the version, every length and count against
the bytes that hold it, every node's type for its level, every child offset inside
the index region and in order, every entry's key (a leaf device entry's excepted)
equal to the first key of what it points at, the nodes and ``TimeseriesMetadata``
lists tiling the index region exactly, every statistics block of its data type, and
every chunk header at its offset: marker, measurement name, data type, encoding and
compression codes, its data inside the data region, no two chunks overlapping.
Hostile input costs at most a walk of the file's metadata: no recursion, no
allocation larger than the file, every count bounded by the bytes left. What is not
checked: page contents (TsFile has no checksums; the transfer's MD5 covers flipped
bytes that still parse).
"""

from __future__ import annotations

import os
import struct
from array import array
from dataclasses import dataclass, field

import numpy as np

from sealsync.errors import FormatError
from sealsync.formats import table_device
from sealsync.formats.common import one_line, unreadable
from sealsync.formats.javaio import I32, I64, Cursor, Malformed, utf8, uvar_at

KIND = "TsFile"
MAGIC = b"TsFile"
HEAD_LEN = len(MAGIC) + 1  # magic + version byte
TAIL_LEN = 4 + len(MAGIC)  # int32 metadata length + magic
VERSIONS = (3, 4)
#: Who writes each accepted format version, for what operators are shown.
WRITERS = {3: "IoTDB 0.12, 0.13 and 1.x", 4: "TsFile 2.x, IoTDB 2.x"}
SEPARATOR = 0x02

#: Version strings of the formats before 3 (six ASCII digits after the magic), and
#: the IoTDB releases that write them; ``TSFileConfig`` of IoTDB 0.9 to 0.13.
OLD_VERSIONS = {b"000001": (1, "IoTDB 0.9"), b"000002": (2, "IoTDB 0.10–0.11")}
#: What IoTDB 0.8 wrote instead of magic and version.
V08_HEAD = b"TsFilev0.8.0"

# MetadataIndexNodeType
INTERNAL_DEVICE, LEAF_DEVICE, INTERNAL_MEASUREMENT, LEAF_MEASUREMENT = 0, 1, 2, 3

# TSDataType codes that may appear in a file (7 is UNKNOWN, never written)
BOOLEAN, INT32, INT64, FLOAT, DOUBLE, TEXT, VECTOR = 0, 1, 2, 3, 4, 5, 6
TIMESTAMP, DATE, BLOB, STRING = 8, 9, 10, 11
DATA_TYPES = frozenset((0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11))
#: TSEncoding codes (PLAIN .. CAMEL); which of them the loader reads is
#: sealsync.formats.tsfile_support's to say.
ENCODINGS = frozenset(range(15))
#: CompressionType codes a writer can produce: UNCOMPRESSED, SNAPPY, GZIP, LZ4, ZSTD, LZMA2.
COMPRESSIONS = frozenset((0, 1, 2, 7, 8, 9))
#: ColumnCategory of a format-4 table schema: TAG, FIELD, ATTRIBUTE, TIME.
COLUMN_CATEGORIES = frozenset(range(4))

#: Bytes of a statistics block after its count, start and end time, per data type
#: (variable for TEXT and STRING: int32-length binaries, 2 and 4 of them).
_STAT_FIXED = {
    BOOLEAN: 1 + 1 + 8,  # first, last, sum
    INT32: 4 * 4 + 8,  # min, max, first, last, sum (int64)
    DATE: 4 * 4 + 8,
    INT64: 4 * 8 + 8,  # min, max, first, last, sum (double)
    TIMESTAMP: 4 * 8 + 8,
    FLOAT: 4 * 4 + 8,
    DOUBLE: 5 * 8,
    VECTOR: 0,  # the time column of an aligned device: times only
    BLOB: 0,
}
_STAT_BINARIES = {TEXT: 2, STRING: 4}

# Chunk header markers (MetaMarker): one or more pages, with the aligned-column masks.
_CHUNK_KINDS = (0x01, 0x05)
TIME_MASK, VALUE_MASK = 0x80, 0x40
_MASKS = (0, TIME_MASK, VALUE_MASK)

#: Longest walk of index nodes from a root to a leaf: a real tree of degree 256 is a
#: few levels deep even for millions of devices and series.
MAX_DEPTH = 32
#: The most entries one index node may have. Writers make at most
#: ``max_degree_of_index_node`` (256 unless configured); a node's entries are held while
#: the nodes below it are walked, so this bounds what the walk holds at each level.
MAX_FANOUT = 1 << 14
#: The most chunks (chunk references), and the most index regions (nodes and series
#: lists), one file may list. A database flushing a million series at once lists a
#: million; every one is kept as two 8-byte offsets until the end of the walk, and
#: walked at a few microseconds each: these bound the walk's time whatever the size.
MAX_CHUNKS = 1 << 22
MAX_REGIONS = 1 << 22
#: The most devices one file may hold: each is kept, checked for ownership and logged.
MAX_DEVICES = 1 << 20
#: The largest ``TsFileMetadata`` (root nodes, table schemas, bloom filter) read.
MAX_FILE_METADATA = 64 << 20

DeviceKey = bytes | tuple[bytes | None, ...]
"""A device id as stored: one string (format 3) or its segments, None for null (4)."""
_Entry = tuple[DeviceKey, int]  # an index entry: key (device id or measurement), offset
_Node = tuple[list[_Entry], int, int]  # MetadataIndexNode: entries, end offset, type


_SMALL_FILE = 4 << 20
"""Files up to this size are read whole at once; larger ones through windows (below),
so that only the pages holding chunk headers and metadata are read, and what is held
never grows with the file."""
_WHOLE_INDEX = 64 << 20
"""An index up to this size is read at once (one read, as fast as the walk gets); a
larger one a region at a time, through the windows below."""
_INDEX_WINDOW = 1 << 20
"""Bytes of the index read at once around a region (a writer puts a device's series
lists and nodes together); a larger region is read alone."""
_DATA_WINDOW = 64 << 10
"""Bytes of the data region read at once around a chunk header (small chunks lie
together; a large one costs one read of this size)."""


Corrupt = Malformed
"""The bytes contradict the format; the message says where. Internal: the file's
entry points turn it into one FormatError line."""


class OldVersion(Exception):
    """A TsFile of a format before 3; the message names the format and its writers."""


@dataclass(frozen=True)
class Summary:
    """What the metadata says about a file that passed every check."""

    version: int
    devices: tuple[str, ...]  # sorted, distinct
    series: int  # TimeseriesMetadata entries, an aligned device's time column included
    chunks: int
    points: int  # the series' statistics counts, an aligned device's time column excluded
    # (data type, encoding, measurement) of the first chunk of each pair, and the file
    # metadata's properties (format 4): what sealsync.formats.tsfile_support judges
    codecs: tuple[tuple[int, int, str], ...] = field(default=(), compare=False)
    properties: tuple[tuple[str, str | None], ...] = field(default=(), compare=False)
    # (device, measurement, data type) of each series, an aligned device's time column
    # excluded: what a data centre's schema must agree with before it loads the file
    series_types: tuple[tuple[str, str, int], ...] = field(default=(), compare=False)


def _skip_statistics(data: bytes, pos: int, data_type: int) -> int:
    """The position after a statistics block (``Statistics.deserialize``) at ``pos``:
    count, start and end time, then what the data type keeps. IndexError or
    struct.error past the end of ``data``; the caller bounds the result."""
    pos = uvar_at(data, pos)[1] + 16
    fixed = _STAT_FIXED.get(data_type)
    if fixed is not None:
        return pos + fixed
    for _ in range(_STAT_BINARIES[data_type]):
        (length,) = I32.unpack_from(data, pos)
        if length < 0:
            raise Corrupt("negative length in statistics")
        pos += 4 + length
    return pos


def _sorted(values: array[int]) -> np.ndarray:
    """``values`` sorted in place, seen as an int64 array (no copy: the order they were
    found in is not needed again)."""
    out = np.frombuffer(values, dtype=np.int64)
    out.sort()
    return out


class _Source:
    """A file's bytes as the walk reads them: all of it when given whole (a small
    file, or bytes); else the index whole when it is small enough, or else a region at
    a time, and each chunk header through a window over the data region, all read with
    ``pread``. What is held never grows with the file beyond :data:`_WHOLE_INDEX`, and
    the address space a worker may use is not taken by a mapping of the file.

    Windows save reads where a file's layout puts what is read next nearby, as
    writers do; a file laid out to make every window miss would make each read one
    window. So windows are read only while all the bytes read stay under twice the
    file's size; after that every read is exactly what is asked for."""

    def __init__(self, size: int, whole: bytes | None = None, fd: int = -1) -> None:
        self.size = size
        self.whole = whole
        self.fd = fd
        self._index = (b"", 0)
        self._data = (b"", 0)
        self._index_bounds = (0, size)
        self._budget = 2 * size  # bytes windows may read beyond what is asked for

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, where: slice) -> bytes:
        """The bytes ``where`` spans (a slice with a start and a stop, as Python's)."""
        start, stop, _ = where.indices(self.size)
        if self.whole is not None:
            return self.whole[start:stop]
        return self._read(start, stop)

    def _read(self, start: int, stop: int) -> bytes:
        if stop <= start:
            return b""
        data = os.pread(self.fd, stop - start, start)
        if len(data) != stop - start:
            raise Corrupt(f"the file is shorter than it was ({start + len(data)} bytes)")
        return data

    def _window(self, start: int, stop: int, low: int, high: int, size: int) -> tuple[int, int]:
        """Where to read for ``[start, stop)``: a window of ``size`` around it inside
        ``[low, high)`` while the budget lasts, else exactly it."""
        if stop - start >= size or self._budget <= 0:
            return start, stop
        begin = max(low, min(start - size // 2, high - size))
        end = min(high, begin + size)
        self._budget -= (end - begin) - (stop - start)
        return begin, end

    def bound_index(self, start: int, end: int) -> None:
        """Where the index region is: read whole now if small enough, and windows over
        it never reach outside it."""
        self._index_bounds = (start, end)
        if self.whole is None and end - start <= _WHOLE_INDEX:
            self._index = (self._read(start, end), start)

    def index(self, start: int, end: int) -> tuple[bytes, int]:
        """Bytes holding ``[start, end)`` of the index, and the file offset of their first."""
        if self.whole is not None:
            return self.whole, 0
        data, base = self._index
        if base <= start and end <= base + len(data):
            return self._index
        begin, stop = self._window(start, end, *self._index_bounds, _INDEX_WINDOW)
        self._index = (self._read(begin, stop), begin)
        return self._index

    def chunk_head(self, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` of the data region (a chunk header)."""
        if self.whole is not None:
            return self.whole[start:end]
        data, base = self._data
        if not (base <= start and end <= base + len(data)):
            begin, stop = self._window(start, end, start, self._index_bounds[0], _DATA_WINDOW)
            self._data = data, base = self._read(begin, stop), begin
        return data[start - base : end - base]


# --------------------------------------------------------------------------- the walk


@dataclass(slots=True)
class _Region:
    """A region of the index to parse: a node, or a list of TimeseriesMetadata."""

    start: int
    end: int
    kind: int  # the parent's node type: what the region holds
    key: DeviceKey  # the parent's entry for it: the first key the region holds
    device: int  # index into _Walk.device_ids, -1 above the leaf device level
    depth: int


class _Walk:
    """One file's metadata walked and checked; the result is :meth:`finish`."""

    def __init__(self, version: int, file: _Source) -> None:
        self.version = version
        self.file = file
        self.data = b""  # what is being parsed: the whole file, or a copy of a part
        self.base = 0  # the file offset of data[0]
        self.meta_offset = 0
        self.index_start = 0
        self.index_end = 0
        # Offsets as 8-byte machine integers, not tuples of Python ints (ten times the
        # bytes): the walk's memory stays below the file's size (docs/formats.md).
        self.region_starts = array("q")
        self.region_ends = array("q")
        self.device_ids: list[DeviceKey] = []
        self.chunk_starts = array("q")
        self.chunk_ends = array("q")
        self.aligned: set[int] = set()  # devices with a time column
        self.series = 0
        self.points = 0
        self.codecs: dict[tuple[int, int], bytes] = {}
        self.types: list[tuple[int, bytes, int]] = []  # (device index, name, data type)
        self.properties: dict[str, str | None] = {}
        self.tables: set[bytes] = set()  # the table-model tables (format 4's table schemas)
        self.parsed = 0  # bytes of index regions walked: bounds the walk to the file
        self.named = 0  # bytes of names compared with chunk headers: bounds those reads

    # ----------------------------------------------------------------- TsFileMetadata

    def file_metadata(self, meta_start: int, meta_end: int) -> list[_Region]:
        """Parse ``TsFileMetadata``; return the regions its root nodes point at."""
        if meta_end - meta_start > MAX_FILE_METADATA:
            raise Corrupt(
                f"file metadata of {meta_end - meta_start} bytes (at most {MAX_FILE_METADATA})"
            )
        self.data, self.base = self.file[meta_start:meta_end], meta_start
        cur = Cursor(self.data, self.base, meta_start, meta_end)
        roots: list[tuple[_Node, bytes | None]] = []
        if self.version == 3:
            roots.append((self._node_body(cur, device_level=True), None))
        else:
            for _ in range(cur.count(11)):  # table name -> root device node
                table = cur.var_bytes()
                roots.append((self._node_body(cur, device_level=True), table))
            for _ in range(cur.count(2)):  # table name -> table schema
                self.tables.add(cur.var_bytes())
                self._table_schema(cur)
        self.meta_offset = cur.i64()
        if cur.left():
            self._bloom_filter(cur)
        if self.version == 4 and cur.left():
            count = cur.var()  # properties: key, value (a zig-zag varint count)
            if not 0 <= 2 * count <= cur.left():
                raise Corrupt(f"bad property count {count}")
            for _ in range(count):
                key, value = cur.var_bytes_or_none(), cur.var_bytes_or_none()
                if key is not None:
                    self.properties[_text(key)] = None if value is None else _text(value)
        if cur.left():
            raise Corrupt(f"{cur.left()} bytes left over after the file metadata")
        if not HEAD_LEN <= self.meta_offset < meta_start:
            raise Corrupt(f"meta offset {self.meta_offset} outside the file body")
        self.index_start = self.meta_offset + 1
        self.index_end = meta_start
        self.file.bound_index(self.index_start, self.index_end)
        pending = []
        for (entries, end_offset, node_type), table_name in roots:
            if node_type not in (INTERNAL_DEVICE, LEAF_DEVICE):
                raise Corrupt(f"root index node of type {node_type}, not a device node")
            if table_name is not None and entries:
                first = entries[0][0]
                if not isinstance(first, tuple) or first[0] != table_name:
                    raise Corrupt("the index of a table starts with another table's device")
            pending.extend(self._children(entries, end_offset, node_type, -1, 0))
        return pending

    @staticmethod
    def _table_schema(cur: Cursor) -> None:
        for _ in range(cur.count(12)):  # columns: MeasurementSchema + category
            cur.i32_bytes_or_none()
            if cur.u8() not in DATA_TYPES:
                raise Corrupt(f"bad column data type at {cur.at() - 1}")
            if cur.u8() not in ENCODINGS:
                raise Corrupt(f"bad column encoding at {cur.at() - 1}")
            if cur.u8() not in COMPRESSIONS:
                raise Corrupt(f"bad column compression at {cur.at() - 1}")
            props = cur.i32()  # a key and a value each, int32 lengths
            if not 0 <= props * 8 <= cur.left():
                raise Corrupt(f"bad column property count at {cur.at() - 4}")
            for _ in range(2 * props):
                cur.i32_bytes_or_none()
            if cur.i32() not in COLUMN_CATEGORIES:
                raise Corrupt(f"bad column category at {cur.at() - 4}")

    def _load(self, start: int, end: int) -> None:
        """Make ``data`` hold the file's bytes ``[start, end)`` (and maybe more)."""
        self.data, self.base = self.file.index(start, end)

    def _bloom_filter(self, cur: Cursor) -> None:
        """Its bytes, then its size and hash count (format 4: only if it has bytes)."""
        size = cur.uvar()
        cur.skip(size)
        if size or self.version == 3:
            cur.uvar()
            cur.uvar()

    # ------------------------------------------------------------------ index nodes

    def _device_id(self, cur: Cursor) -> DeviceKey:
        """Format 3: ``PlainDeviceID``, one string; 4: ``StringArrayDeviceID``."""
        if self.version == 3:
            return cur.var_bytes()
        n = cur.count(1)
        if n == 0:
            return (b"",)
        return tuple(cur.var_bytes_or_none() for _ in range(n))

    def _node_body(self, cur: Cursor, device_level: bool) -> _Node:
        """``MetadataIndexNode``: entries (device id or measurement name, offset), end
        offset, node type."""
        entries: list[_Entry] = []
        count = cur.count(9)
        if count > MAX_FANOUT:
            raise Corrupt(f"an index node of {count} entries (at most {MAX_FANOUT})")
        for _ in range(count):
            key = self._device_id(cur) if device_level else cur.var_bytes()
            entries.append((key, cur.i64()))
        end_offset = cur.i64()
        return entries, end_offset, cur.u8()

    def _children(
        self,
        entries: list[_Entry],
        end_offset: int,
        node_type: int,
        device: int,
        depth: int,
    ) -> list[_Region]:
        """The regions a node's entries point at: each runs to the next entry's offset,
        the last to the node's end offset."""
        regions = []
        bounds = [offset for _, offset in entries] + [end_offset]
        for i, (key, offset) in enumerate(entries):
            dev = device
            if node_type == LEAF_DEVICE:
                dev = len(self.device_ids)
                if dev >= MAX_DEVICES:
                    raise Corrupt(f"more than {MAX_DEVICES} devices")
                self.device_ids.append(key)
            regions.append(_Region(offset, bounds[i + 1], node_type, key, dev, depth + 1))
        self._check_bounds(bounds)
        return regions

    def _check_bounds(self, bounds: list[int]) -> None:
        if len(bounds) < 2:
            return
        if bounds[0] < self.index_start or bounds[-1] > self.index_end:
            raise Corrupt("index offset outside the index region")
        for a, b in zip(bounds, bounds[1:], strict=False):
            if a >= b:
                raise Corrupt("index offsets out of order")

    def walk(self, pending: list[_Region]) -> None:
        stack = pending[::-1]
        while stack:
            region = stack.pop()
            if len(self.region_starts) >= MAX_REGIONS:
                raise Corrupt(f"more than {MAX_REGIONS} index nodes and series lists")
            self.region_starts.append(region.start)
            self.region_ends.append(region.end)
            self.parsed += region.end - region.start
            if self.parsed > self.index_end - self.index_start:
                raise Corrupt("index regions reached more than once")
            self._load(region.start, region.end)
            if region.kind == LEAF_MEASUREMENT:
                self._series_list(region)
                continue
            if region.depth > MAX_DEPTH:
                raise Corrupt("index tree deeper than any writer makes it")
            cur = Cursor(self.data, self.base, region.start, region.end)
            device_level = region.kind == INTERNAL_DEVICE
            entries, end_offset, node_type = self._node_body(cur, device_level)
            if cur.left():
                raise Corrupt(f"index node at {region.start} shorter than its region")
            allowed = (
                (INTERNAL_DEVICE, LEAF_DEVICE)
                if device_level
                else (INTERNAL_MEASUREMENT, LEAF_MEASUREMENT)
            )
            if node_type not in allowed:
                raise Corrupt(f"index node at {region.start} of type {node_type} at that level")
            if not entries:
                raise Corrupt(f"empty index node at {region.start}")
            if region.kind != LEAF_DEVICE and entries[0][0] != region.key:
                raise Corrupt(f"index node at {region.start} does not start with its key")
            children = self._children(entries, end_offset, node_type, region.device, region.depth)
            stack.extend(reversed(children))

    # ----------------------------------------------------------- TimeseriesMetadata

    def _series_list(self, region: _Region) -> None:
        """A run of ``TimeseriesMetadata`` filling the region, and every chunk they list.

        The hot loop of the walk (one pass per series and per chunk), so it reads the
        bytes inline instead of through :class:`Cursor`: values read past the region
        (``data`` may hold more) are never used, because every position is compared
        with the region's end before what was read there is acted on.
        """
        data, base = self.data, self.base
        pos, end = region.start - base, region.end - base
        expected_name: bytes | None = region.key if isinstance(region.key, bytes) else None
        try:
            while pos < end:
                kind = data[pos]
                field_start = pos + 1
                length, pos = uvar_at(data, field_start)
                length = ~(length >> 1) if length & 1 else length >> 1
                if not 0 <= length <= end - pos:
                    raise Corrupt(f"bad measurement name length at {base + field_start}")
                name = data[pos : pos + length]
                pos += length
                if expected_name is not None and name != expected_name:
                    raise Corrupt(f"series at {region.start} does not match its index entry")
                expected_name = None
                encoded_name = data[field_start:pos]  # as a chunk header holds it too
                data_type = data[pos]
                mask = self._chunk_mask(kind, data_type, region.device, base + pos)
                size, pos = uvar_at(data, pos + 1)
                if data_type != VECTOR:
                    self.points += uvar_at(data, pos)[0]
                    self.types.append((region.device, name, data_type))
                pos = _skip_statistics(data, pos, data_type)
                chunks_end = pos + size
                if chunks_end > end:
                    raise Corrupt(f"series at {base + field_start - 1} overruns its region")
                per_chunk_stats = kind & 0x3F
                while pos < chunks_end:
                    (offset,) = I64.unpack_from(data, pos)
                    pos += 8
                    if per_chunk_stats:
                        pos = _skip_statistics(data, pos, data_type)
                    if pos > chunks_end:
                        break
                    self._chunk_header(offset, encoded_name, data_type, mask)
                if pos != chunks_end:
                    raise Corrupt(f"chunk list at {base + chunks_end - size} not of its size")
                self.series += 1
        except (IndexError, struct.error):
            raise Corrupt(f"series list at {region.start} ends early") from None

    def _chunk_mask(self, kind: int, data_type: int, device: int, at: int) -> int:
        """The aligned-column mask the series' chunk headers must carry.

        The time column of an aligned device has data type VECTOR; the Java writer also
        marks it, and its value columns, in the series' kind byte, the C++ writer does
        not. So a device whose series list holds a VECTOR column is aligned, and the
        chunk headers (which every writer marks) must agree.
        """
        mask = kind & 0xC0
        if kind & 0x3F not in (0, 1) or mask not in _MASKS:
            raise Corrupt(f"bad series kind {kind} at {at}")
        if data_type not in DATA_TYPES:
            raise Corrupt(f"bad series data type {data_type} at {at}")
        if data_type == VECTOR:
            if mask == VALUE_MASK:
                raise Corrupt(f"value column of data type VECTOR at {at}")
            self.aligned.add(device)
            return TIME_MASK
        if mask == TIME_MASK:
            raise Corrupt(f"time column of data type {data_type} at {at}")
        return VALUE_MASK if mask or device in self.aligned else 0

    def _chunk_header(self, offset: int, encoded_name: bytes, data_type: int, mask: int) -> None:
        """The chunk header a ChunkMetadata points at (``ChunkHeader``): marker, name,
        data size, data type, compression, encoding; its data inside the data region."""
        limit = self.meta_offset
        if not HEAD_LEN <= offset < limit:
            raise Corrupt(f"chunk offset {offset} outside the data region")
        # Chunk headers never overlap and each holds its series' name, so the names
        # compared add up to less than the data region: a name megabytes long listed
        # for one chunk again and again is refused at once, not compared for hours.
        self.named += len(encoded_name)
        if self.named > limit:
            raise Corrupt(
                "the chunk lists name more header bytes than the data region holds "
                "(a chunk listed more than once)"
            )
        if len(self.chunk_starts) >= MAX_CHUNKS:
            raise Corrupt(f"more than {MAX_CHUNKS} chunks")
        # marker, the name as the series holds it, a data size of up to 5 bytes, 3 codes
        head = self.file.chunk_head(offset, min(offset + len(encoded_name) + 9, limit))
        marker = head[0]
        if marker & 0x3F not in _CHUNK_KINDS or marker & 0xC0 != mask:
            raise Corrupt(f"no chunk header at {offset} (marker {marker})")
        pos = 1 + len(encoded_name)
        if head[1:pos] != encoded_name:
            raise Corrupt(f"chunk at {offset} is not of the series that lists it")
        try:
            size, pos = uvar_at(head, pos)
            codes = head[pos : pos + 3]
            if len(codes) < 3:
                raise IndexError
        except IndexError:
            raise Corrupt(f"chunk header at {offset} runs past the data region") from None
        if codes[0] != data_type:
            raise Corrupt(f"chunk at {offset} of another data type than its series")
        if codes[1] not in COMPRESSIONS:
            raise Corrupt(f"chunk at {offset} has an unknown compression")
        if codes[2] not in ENCODINGS:
            raise Corrupt(f"chunk at {offset} has an unknown encoding")
        end = offset + pos + 3 + size
        if end > limit:
            raise Corrupt(f"chunk at {offset} runs past the data region")
        self.chunk_starts.append(offset)
        self.chunk_ends.append(end)
        self.codecs.setdefault((data_type, codes[2]), encoded_name)  # at most types x codes

    # ----------------------------------------------------------------- the result

    def finish(self) -> Summary:
        starts, ends = _sorted(self.region_starts), _sorted(self.region_ends)
        first, last = (starts[0], ends[-1]) if len(starts) else (self.index_end,) * 2
        if first != self.index_start or last != self.index_end:
            raise Corrupt("index regions do not reach the file metadata")
        if not np.array_equal(starts[1:], ends[:-1]):
            raise Corrupt("index regions overlap or leave a gap")
        del starts, ends
        starts, ends = _sorted(self.chunk_starts), _sorted(self.chunk_ends)
        overlap = np.flatnonzero(ends[:-1] > starts[1:])
        if overlap.size:
            raise Corrupt(f"chunks overlap at {int(starts[overlap[0] + 1])}")
        del starts, ends
        ids, self.device_ids = self.device_ids, []
        if len(set(ids)) != len(ids):
            raise Corrupt("a device is listed twice")
        by_index = list(map(self._device_name, ids))
        del ids
        known = range(len(by_index))
        types = tuple((by_index[d], _text(n), t) for d, n, t in self.types if d in known)
        self.types = []
        names = sorted(by_index)
        del by_index
        distinct = tuple(n for i, n in enumerate(names) if not i or n != names[i - 1])
        codecs = tuple(
            (t, e, _text(name[uvar_at(name, 0)[1] :])) for (t, e), name in self.codecs.items()
        )
        return Summary(
            self.version,
            distinct,
            self.series,
            len(self.chunk_starts),
            self.points,
            tuple(sorted(codecs)),
            tuple(sorted(self.properties.items())),
            types,
        )

    def _device_name(self, device: DeviceKey) -> str:
        """Format 3's string; format 4's segments joined by dots, a null one as
        ``null``, or for a device of a table-model table (one the file has a schema of)
        the table plus its tags, unambiguously (:mod:`.table_device`)."""
        if isinstance(device, bytes):
            return utf8(device, "device id")
        parts = [None if s is None else utf8(s, "device id") for s in device]
        if device[0] in self.tables:
            return table_device.name(parts)
        return ".".join("null" if s is None else s for s in parts)


def _text(raw: bytes) -> str:
    """A name or property from the file, for messages: never an error of its own."""
    return raw.decode("utf-8", "replace")


# --------------------------------------------------------------------------- entry points


def parse(file: bytes | _Source) -> Summary:
    """Check a whole file's bytes; :class:`Corrupt` or :class:`OldVersion` if wrong."""
    src = file if isinstance(file, _Source) else _Source(len(file), whole=file)
    size = src.size
    head = src[: len(V08_HEAD)]
    if head[: len(MAGIC)] != MAGIC:
        raise Corrupt("no TsFile magic at the head" if size else "empty file")
    _check_version(head)
    tail = src[size - TAIL_LEN :]
    if size < HEAD_LEN + TAIL_LEN or tail[-len(MAGIC) :] != MAGIC:
        raise Corrupt("no TsFile magic at the tail (truncated?)")
    (meta_len,) = I32.unpack_from(tail, 0)
    meta_start = size - TAIL_LEN - meta_len
    if meta_len <= 0 or meta_start <= HEAD_LEN:
        raise Corrupt(f"metadata length {meta_len} does not fit the file")
    walk = _Walk(head[len(MAGIC)], src)
    try:
        pending = walk.file_metadata(meta_start, size - TAIL_LEN)
        if src[walk.meta_offset : walk.meta_offset + 1] != bytes([SEPARATOR]):
            raise Corrupt("meta offset does not point at the index separator")
        walk.walk(pending)
        return walk.finish()
    except Corrupt as exc:
        raise Corrupt(f"metadata corrupt: {exc}") from None


def _check_version(head: bytes) -> None:
    """Refuse the formats before 3 by name; anything else but 3 and 4 as unknown."""
    if head == V08_HEAD:
        raise OldVersion(_old_format("TsFile format of IoTDB 0.8", 0))
    old = OLD_VERSIONS.get(head[len(MAGIC) : len(MAGIC) + 6])
    if old is not None:
        number, writers = old
        raise OldVersion(
            _old_format(f"TsFile format version {number} (written by {writers})", number)
        )
    version = head[len(MAGIC)] if len(head) > len(MAGIC) else -1
    if version not in VERSIONS:
        raise Corrupt(f"unknown TsFile version byte {version}")


def _old_format(what: str, number: int) -> str:
    """What to do with a file of a format before 3: each IoTDB release upgrades the data
    files of the one or two before it when started on their data directories."""
    steps = ["IoTDB 0.9 (to format 1)", "IoTDB 0.10 or 0.11 (to format 2)"][number:]
    then = "".join(f"{step}, then " for step in steps)
    return (
        f"{what} is not supported; upgrade the data with {then}IoTDB 0.12 or 0.13, which "
        "rewrite such files as format 3 when started on the old data directories, and send "
        "the upgraded files"
    )


def read(path: str | os.PathLike[str]) -> Summary:
    """Check a TsFile's whole metadata; FormatError naming the file and the cause."""
    try:
        with open(path, "rb", buffering=0) as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            if size <= _SMALL_FILE:
                return parse(os.pread(fd, size, 0))
            return parse(_Source(size, fd=fd))
    except Corrupt as exc:
        raise unreadable(path, KIND, str(exc)) from None
    except OldVersion as exc:
        raise FormatError(f"{os.fspath(path)}: {exc}") from None
    except OSError as exc:
        raise unreadable(path, KIND, one_line(exc)) from exc
