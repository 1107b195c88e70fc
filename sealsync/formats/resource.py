"""``X.resource``: the binary sidecar IoTDB 2.x writes once a data file is sealed.

The sender needs only its presence (it is written whole, after the data file is
complete: the seal, docs/design.md §1.3); the receiver never trusts what it says. It is
read and written here so that the simulator's edge (:mod:`sealsync.simulator`) writes
the bytes IoTDB does, and a test can compare the two field by field.

The layout is IoTDB 2.x's ``TsFileResource.serialize``/``deserialize``
(``iotdb-core/datanode/.../dataregion/tsfile/``), with TsFile's Java primitives
(big-endian fixed-width integers; :mod:`sealsync.formats.javaio`):

* a version byte, ``1``;
* the time index: a type byte, then for ``3`` (``ArrayDeviceTimeIndex``, what 2.x
  writes) an int32 device count ``n``, ``n`` pairs of int64 start and end times (the
  device's first and last point in the file), then ``n`` times a device id
  (``StringArrayDeviceID``: an unsigned varint count of segments, each a zig-zag
  varint length, -1 for null, and UTF-8 bytes) and the int32 index of its pair; for
  ``1`` (``PlainDeviceTimeIndex``, the 1.x layout 2.x still reads) the same with each
  device id a string with an int32 length;
* the highest and the lowest plan index, int64 each (``Long.MIN_VALUE`` and
  ``Long.MAX_VALUE`` when none was recorded);
* the shared modification file: a string with an int32 length, -1 for none, and when
  it names a ``.mods2`` the int64 offset of the file's entries in it;
* blocks to the end: a type byte, ``0`` empty, ``1`` the file's consensus progress
  (``ProgressIndex``: an int16 type, then its own fields), kept here as bytes.

IoTDB 0.12 to 1.1 write the same layout with a plain device time index, the
modification file's field only when the file has one, and no blocks; 1.2 and later
always write the field (null when none) and a block after it (``TsFileResource.
serialize`` of each release), which is how :mod:`sealsync.formats.mods` tells a 1.2+
``.mods`` from an older one.

A tree-model device id is split as TsFile splits it (``splitDeviceIdString``): its
first three nodes are one segment (the "table" of the tree model), each further node
one segment, and a path of at most three nodes is its nodes but the last, then the
last. So ``root.sg.d1`` is ``("root.sg", "d1")`` and ``root.sg.a.d3`` is
``("root.sg.a", "d3")``. Names join the segments with dots, a null segment as
``null``, as :mod:`sealsync.formats.tsfile_meta` names a TsFile's tree-model devices.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from sealsync.errors import FormatError
from sealsync.formats.common import read_up_to
from sealsync.formats.deletion import split_path
from sealsync.formats.javaio import Cursor, Malformed, utf8

VERSION = 1
PLAIN_DEVICE_TIME_INDEX, FILE_TIME_INDEX, ARRAY_DEVICE_TIME_INDEX = 1, 2, 3
EMPTY_BLOCK, PROGRESS_INDEX_BLOCK = 0, 1
IOT_PROGRESS_INDEX = 2  # ProgressIndexType
NO_MAX_PLAN_INDEX, NO_MIN_PLAN_INDEX = -(1 << 63), (1 << 63) - 1
TABLE_SEGMENTS = 3  # TSFileConfig.DEFAULT_SEGMENT_NUM_FOR_TABLE_NAME
MAX_RESOURCE_SIZE = 1 << 30  # what the protocol accepts for a sidecar

DeviceId = tuple[str | None, ...]
_I32, _I64, _I16 = struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">h")


@dataclass(frozen=True)
class Resource:
    """What one ``X.resource`` says, in file order."""

    version: int
    time_index_type: int
    device_ids: tuple[DeviceId, ...]  # in the order of their (start, end) pairs
    times: tuple[tuple[int, int], ...]  # (start, end) of each device id above
    max_plan_index: int
    min_plan_index: int
    mod_file: str | None  # the shared modification file it names, if any
    mod_file_offset: int | None  # where its entries start in that file (a .mods2)
    progress_index: bytes | None  # a progress index block's bytes, None: an empty block
    blocks: int = 0  # blocks after the modification file's field (IoTDB 1.2 and later write one)

    @property
    def devices(self) -> dict[str, tuple[int, int]]:
        """Each device's name and (start, end) times."""
        return dict(zip(map(device_name, self.device_ids), self.times, strict=True))


def device_segments(device: str) -> DeviceId:
    """A tree-model device path as TsFile 2.x stores it (see the module doc)."""
    nodes = split_path(device)
    if len(nodes) <= 1:
        return tuple(nodes)
    if len(nodes) <= TABLE_SEGMENTS:
        return (".".join(nodes[:-1]), nodes[-1])
    return (".".join(nodes[:TABLE_SEGMENTS]), *nodes[TABLE_SEGMENTS:])


def device_name(segments: DeviceId) -> str:
    return ".".join("null" if s is None else s for s in segments)


# ---------------------------------------------------------------------------- writing


def _uvar(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _var_string(text: str | None) -> bytes:
    """``ReadWriteIOUtils.writeVar``: a zig-zag varint length (-1: null), UTF-8."""
    if text is None:
        return _uvar(1)  # zig-zag of -1
    raw = text.encode("utf-8")
    return _uvar(len(raw) << 1) + raw


def _int_string(text: str | None) -> bytes:
    """``ReadWriteIOUtils.write(String)``: an int32 length (-1: null), UTF-8."""
    if text is None:
        return _I32.pack(-1)
    raw = text.encode("utf-8")
    return _I32.pack(len(raw)) + raw


def serialize(
    devices: Mapping[str, tuple[int, int]],
    *,
    max_plan_index: int = NO_MAX_PLAN_INDEX,
    min_plan_index: int = NO_MIN_PLAN_INDEX,
    progress_index: bytes | None = None,
) -> bytes:
    """The bytes of a sealed file's ``.resource`` as IoTDB 2.x writes it: an array
    device time index of ``devices`` (name -> (start, end)) in the mapping's order, no
    shared modification file, and a progress index block if given (else an empty one)."""
    ids = [device_segments(name) for name in devices]
    out = bytearray([VERSION, ARRAY_DEVICE_TIME_INDEX])
    out += _I32.pack(len(ids))
    for start, end in devices.values():
        out += _I64.pack(start) + _I64.pack(end)
    for index, segments in enumerate(ids):
        out += _uvar(len(segments))
        for segment in segments:
            out += _var_string(segment)
        out += _I32.pack(index)
    out += _I64.pack(max_plan_index) + _I64.pack(min_plan_index)
    out += _int_string(None)
    if progress_index is None:
        out.append(EMPTY_BLOCK)
    else:
        out.append(PROGRESS_INDEX_BLOCK)
        out += progress_index
    return bytes(out)


def iot_progress_index(search_index: int, peer: int = 1) -> bytes:
    """An ``IoTProgressIndex`` as a progress index block holds it: its type (2), one
    peer, and the consensus search index of the last write in the file. A one-node
    IoTDB 2.x writes this for a flushed file, its DataNode (id 1) the one peer."""
    return _I16.pack(IOT_PROGRESS_INDEX) + _I32.pack(1) + _I32.pack(peer) + _I64.pack(search_index)


# ---------------------------------------------------------------------------- reading


def _device_ids(cur: Cursor, kind: int, n: int) -> list[tuple[DeviceId, int]]:
    out = []
    for _ in range(n):
        if kind == ARRAY_DEVICE_TIME_INDEX:
            count = cur.count(1)
            segments: DeviceId = tuple(
                None if (s := cur.var_bytes_or_none()) is None else utf8(s, "a device id")
                for _ in range(count)
            )
        else:
            raw = cur.i32_bytes_or_none()
            if raw is None:
                raise Malformed(f"a null device id at {cur.at()}")
            segments = device_segments(utf8(raw, "a device id"))
        out.append((segments, cur.i32()))
    return out


def parse(data: bytes) -> Resource:
    """A ``.resource``'s bytes; :class:`FormatError` naming the byte offset if they do
    not read as IoTDB 2.x writes them."""
    cur = Cursor(data, 0, 0, len(data))
    try:
        version = cur.u8()
        if version != VERSION:
            raise Malformed(f"version {version}, not {VERSION}")
        kind = cur.u8()
        if kind not in (PLAIN_DEVICE_TIME_INDEX, ARRAY_DEVICE_TIME_INDEX):
            raise Malformed(f"time index type {kind} (IoTDB 2.x writes {ARRAY_DEVICE_TIME_INDEX})")
        n = cur.i32()
        if n < 0 or n * 16 > cur.left():
            raise Malformed(f"device count {n} larger than its bytes at {cur.at()}")
        pairs = [(cur.i64(), cur.i64()) for _ in range(n)]
        ids = _device_ids(cur, kind, n)
        if sorted(index for _, index in ids) != list(range(n)):
            raise Malformed("device indexes are not 0 to the device count, each once")
        by_index = sorted(ids, key=lambda entry: entry[1])
        max_plan, min_plan = cur.i64(), cur.i64()
        mod_file = offset = None
        if cur.left():
            raw = cur.i32_bytes_or_none()
            mod_file = None if raw is None else utf8(raw, "the modification file's name")
            if mod_file is not None and mod_file.endswith(".mods2"):
                offset = cur.i64()
        progress = None
        blocks = 0
        while cur.left():
            blocks += 1
            block = cur.u8()
            if block == PROGRESS_INDEX_BLOCK:
                progress = cur.raw(cur.left())
            elif block != EMPTY_BLOCK:
                raise Malformed(f"unknown block type {block} at {cur.at() - 1}")
    except Malformed as e:
        raise FormatError(f".resource: {e}") from None
    return Resource(
        version=version,
        time_index_type=kind,
        device_ids=tuple(segments for segments, _ in by_index),
        times=tuple(pairs),
        max_plan_index=max_plan,
        min_plan_index=min_plan,
        mod_file=mod_file,
        mod_file_offset=offset,
        progress_index=progress,
        blocks=blocks,
    )


def read(path: str | os.PathLike[str]) -> Resource:
    """The ``.resource`` at ``path`` (:class:`FormatError` if it does not read)."""
    raw = read_up_to(path, MAX_RESOURCE_SIZE)
    if len(raw) > MAX_RESOURCE_SIZE:
        raise FormatError(f".resource larger than {MAX_RESOURCE_SIZE} bytes")
    return parse(raw)
