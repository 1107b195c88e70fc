"""The serialisation primitives TsFile's metadata is written in, for tests that build
files byte by byte (``tests/test_formats_tsfile_meta.py``, ``tests/security/``): varints,
strings, big-endian longs, and an INT64 statistics block. Not a test module."""

from __future__ import annotations

import struct


def uvar(n: int) -> bytes:
    """An unsigned varint, seven bits a byte, low bits first."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def var(n: int) -> bytes:
    """A zig-zag varint (string lengths; -1 is null)."""
    return uvar(n << 1 if n >= 0 else (~n << 1) | 1)


def string(raw: bytes | str | None) -> bytes:
    """A string with its zig-zag varint length (None: a null string)."""
    if raw is None:
        return var(-1)
    data = raw.encode() if isinstance(raw, str) else raw
    return var(len(data)) + data


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


INT64 = 2
INT64_STATS = uvar(3) + i64(1) + i64(3) + bytes(4 * 8 + 8)
"""Statistics of an INT64 series: count, start and end time, min, max, first, last, sum."""
