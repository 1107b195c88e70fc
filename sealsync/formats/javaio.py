"""Java's serialisation primitives as TsFile writes them, read with bounds.

Why apart from the TsFile metadata walk (``tsfile_meta``): these are the primitives of
``ReadWriteIOUtils`` and ``ReadWriteForEncodingUtils`` — big-endian fixed-width
integers, unsigned and zig-zag varints of at most five bytes, strings with a varint or
int32 length — not TsFile's structure, and they are read from untrusted bytes, where
every length must be checked against the bytes that hold it before anything is
allocated or skipped.
"""

from __future__ import annotations

import struct

I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


class Malformed(Exception):
    """The bytes contradict the serialisation; the message says where. The reader of
    a format turns it into its own one-line error."""


class Cursor:
    """Bounded reads of the serialisation primitives from ``data[pos:end]``.

    Offsets are the file's: ``base`` is the file offset of ``data[0]``.
    """

    __slots__ = ("base", "data", "end", "pos")

    def __init__(self, data: bytes, base: int, start: int, end: int) -> None:
        self.data = data
        self.base = base
        self.pos = start - base
        self.end = end - base

    def at(self) -> int:
        return self.base + self.pos

    def left(self) -> int:
        return self.end - self.pos

    def u8(self) -> int:
        pos = self.pos
        if pos >= self.end:
            raise Malformed(f"ends early at {self.base + pos}")
        self.pos = pos + 1
        return self.data[pos]

    def uvar(self) -> int:
        """An unsigned varint of at most 32 bits (ReadWriteForEncodingUtils)."""
        data, pos, end = self.data, self.pos, self.end
        value = shift = 0
        while True:
            if pos >= end:
                raise Malformed(f"ends early at {self.base + pos}")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 28:
                raise Malformed(f"varint longer than 5 bytes at {self.base + pos}")
        self.pos = pos
        if value > 0xFFFFFFFF:
            raise Malformed(f"varint over 32 bits at {self.base + pos}")
        return value

    def var(self) -> int:
        """A zig-zag varint: string lengths, where -1 means null."""
        raw = self.uvar()
        return ~(raw >> 1) if raw & 1 else raw >> 1

    def count(self, min_size: int) -> int:
        """An element count, each element at least ``min_size`` bytes: so bounded."""
        n = self.uvar()
        if n * min_size > self.left():
            raise Malformed(f"count {n} larger than its bytes at {self.at()}")
        return n

    def raw(self, n: int) -> bytes:
        if n < 0 or n > self.end - self.pos:
            raise Malformed(f"length {n} out of range at {self.at()}")
        pos = self.pos
        self.pos = pos + n
        return self.data[pos : pos + n]

    def skip(self, n: int) -> None:
        if n < 0 or n > self.end - self.pos:
            raise Malformed(f"length {n} out of range at {self.at()}")
        self.pos += n

    def var_bytes(self) -> bytes:
        """A string with a zig-zag varint length (``ReadWriteIOUtils.readVarIntString``)."""
        return self.raw(self.var())

    def var_bytes_or_none(self) -> bytes | None:
        """The same, where length -1 stands for null."""
        n = self.var()
        return None if n == -1 else self.raw(n)

    def i32(self) -> int:
        pos = self.pos
        if self.end - pos < 4:
            raise Malformed(f"ends early at {self.base + pos}")
        self.pos = pos + 4
        value: int = I32.unpack_from(self.data, pos)[0]
        return value

    def i64(self) -> int:
        pos = self.pos
        if self.end - pos < 8:
            raise Malformed(f"ends early at {self.base + pos}")
        self.pos = pos + 8
        value: int = I64.unpack_from(self.data, pos)[0]
        return value

    def i32_bytes_or_none(self) -> bytes | None:
        """A string with an int32 length, -1 for null (``ReadWriteIOUtils.readString``)."""
        n = self.i32()
        return None if n == -1 else self.raw(n)


def utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"{what} is not UTF-8") from None


def uvar_at(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes at ``data[pos]``: (value, next position).
    IndexError past the end of ``data``."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value > 0xFFFFFFFF:
                raise Malformed("varint over 32 bits")
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise Malformed("varint longer than 5 bytes")
