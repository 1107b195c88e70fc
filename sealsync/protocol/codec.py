"""Frames on the wire: the 5-byte header, encoding and decoding, reading and writing a stream.

A frame is a header (kind: u8, payload length: u32, big endian) and a payload no
longer than its kind allows. Decoding is the one place a payload becomes a message,
so it is the one place where anything a hostile peer sends becomes a ``protocol``
error rather than a traceback.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from sealsync.protocol.messages import CONTROL_MESSAGES, AnyMessage, Chunk, Error, Message, Schema
from sealsync.protocol.spec import (
    MAX_CHUNK_PAYLOAD,
    MAX_CONTROL_PAYLOAD,
    MAX_SCHEMA_PAYLOAD,
    ErrorCode,
    Kind,
    ProtocolError,
)

if TYPE_CHECKING:
    import paramiko

HEADER = struct.Struct("!BI")
_M = TypeVar("_M", bound=Message)

_LIMITS: dict[Kind, int] = {Kind.CHUNK: MAX_CHUNK_PAYLOAD, Kind.SCHEMA: MAX_SCHEMA_PAYLOAD + 8}


def payload_limit(kind: Kind) -> int:
    return _LIMITS.get(kind, MAX_CONTROL_PAYLOAD)


# --- encoding and decoding (pure) --------------------------------------------------


def encode(msg: AnyMessage) -> bytes:
    """One frame as bytes; for chunks prefer :func:`send` which avoids the copy."""
    payload = msg.payload()
    if len(payload) > payload_limit(msg.kind):
        raise ProtocolError(f"{msg.kind.name}: payload of {len(payload)} bytes over the limit")
    return HEADER.pack(msg.kind, len(payload)) + bytes(payload)


def decode_header(header: bytes) -> tuple[Kind, int]:
    """Kind and payload length; refuses unknown kinds and lengths over the kind's limit."""
    kind_no, length = HEADER.unpack(header)
    try:
        kind = Kind(kind_no)
    except ValueError:
        raise ProtocolError(f"unknown frame kind {kind_no}") from None
    if length > payload_limit(kind):
        raise ProtocolError(f"{kind.name}: length {length} over the limit {payload_limit(kind)}")
    return kind, length


def decode(kind: Kind, payload: bytes) -> AnyMessage:
    """A validated message from a frame's kind and payload.

    The one place a payload becomes a message, so the one place where anything a
    hostile peer can make the decoder raise — JSON nested past the recursion limit,
    a value of a type a constructor cannot take, numbers too large — becomes a
    ``protocol`` error: the session ends with one log line, never a traceback.
    """
    try:
        if kind is Kind.CHUNK:
            return Chunk.from_payload(payload)
        if kind is Kind.SCHEMA:
            return Schema.from_payload(payload)
        return CONTROL_MESSAGES[kind].from_payload(payload)
    except ProtocolError:
        raise
    except (TypeError, ValueError, RecursionError, OverflowError, MemoryError) as exc:
        raise ProtocolError(f"{kind.name}: undecodable payload ({type(exc).__name__})") from None


def decode_frames(data: bytes) -> tuple[list[AnyMessage], bytes]:
    """Every complete frame in ``data`` and the leftover bytes (for tests and fuzzing)."""
    out: list[AnyMessage] = []
    view = memoryview(data)
    while len(view) >= HEADER.size:
        kind, length = decode_header(bytes(view[: HEADER.size]))
        if len(view) < HEADER.size + length:
            break
        out.append(decode(kind, bytes(view[HEADER.size : HEADER.size + length])))
        view = view[HEADER.size + length :]
    return out, bytes(view)


# --- stream I/O over a channel or socket -----------------------------------------


class Stream(Protocol):
    """What a paramiko Channel and a socket both offer."""

    def recv(self, n: int) -> bytes: ...

    def sendall(self, data: bytes | memoryview) -> None: ...


def channel_stream(channel: paramiko.Channel) -> Stream:
    """``channel`` as a :class:`Stream`, which it is: ``Channel.sendall`` takes any
    bytes-like object, views included (paramiko's type stubs name bytes only)."""
    return cast(Stream, channel)


class ConnectionClosed(ProtocolError):
    """The peer closed the stream (cleanly between frames, or mid-frame)."""

    def __init__(self, message: str = "connection closed by peer") -> None:
        super().__init__(message, code=ErrorCode.CLOSED)


class ReadBuffer:
    """A stream's incoming bytes, taken in large blocks and handed out in frame-sized pieces.

    paramiko's ``Channel.recv(n)`` copies ``n`` bytes out of its buffer and shifts the
    rest down: with megabytes of pipelined files buffered, reading a 5-byte header and
    then a payload would move the whole buffer twice per frame, most of the work of a
    small file. One ``recv`` here takes everything there is, and frames are handed out
    as memoryviews of it (:func:`receive` turns all but chunks into bytes).
    """

    def __init__(self, stream: Stream, block: int = 16 << 20) -> None:
        self._stream = stream
        self._block = block
        self._data = b""
        self._view = memoryview(b"")
        self._pos = 0

    def pending(self) -> int:
        """Bytes already read from the stream and not yet handed out."""
        return len(self._data) - self._pos

    def recv(self, n: int) -> bytes:
        if self._pos >= len(self._data):
            data = self._stream.recv(max(n, self._block))
            if not data:
                return b""
            self._data, self._view, self._pos = data, memoryview(data), 0
        start = self._pos
        self._pos = min(start + n, len(self._data))
        if start == 0 and self._pos == len(self._data):
            return self._data
        return self._view[start : self._pos]  # type: ignore[return-value]  # no copy

    def sendall(self, data: bytes | memoryview) -> None:
        self._stream.sendall(data)


def recv_exact(stream: Stream, n: int) -> bytes:
    """Exactly ``n`` bytes; ConnectionClosed if the peer closes first."""
    if n == 0:
        return b""
    first = stream.recv(min(n, 1 << 20))
    if len(first) == n:
        return first  # the usual case: no reassembly copy
    if not first:
        raise ConnectionClosed("connection closed by peer")
    parts = [first]
    got = len(first)
    while got < n:
        part = stream.recv(min(n - got, 1 << 20))
        if not part:
            raise ConnectionClosed("connection closed mid-frame")
        parts.append(part)
        got += len(part)
    return b"".join(parts)  # one copy: a frame over several SSH packets


def receive(stream: Stream) -> AnyMessage:
    """Read and validate the next frame."""
    kind, length = decode_header(recv_exact(stream, HEADER.size))
    payload = recv_exact(stream, length)
    if kind is not Kind.CHUNK and not isinstance(payload, bytes):
        payload = bytes(payload)  # a view of a ReadBuffer's block: only chunks stay views
    return decode(kind, payload)


def send(stream: Stream, msg: AnyMessage) -> None:
    """Write one frame; chunk payloads go out as a view, without a copy."""
    payload = msg.payload()
    if len(payload) > payload_limit(msg.kind):
        raise ProtocolError(f"{msg.kind.name}: payload of {len(payload)} bytes over the limit")
    header = HEADER.pack(msg.kind, len(payload))
    if msg.kind is Kind.CHUNK and len(payload) > 4096:
        stream.sendall(header)
        stream.sendall(memoryview(payload))
    else:
        stream.sendall(header + bytes(payload))


def expect(msg: AnyMessage, wanted: type[_M]) -> _M:
    """``msg`` if it is a ``wanted``; an ERROR from the peer or anything else raises."""
    if isinstance(msg, wanted):
        return msg
    if isinstance(msg, Error):
        raise ProtocolError(f"receiver: {msg.message}", code=msg.code)
    raise ProtocolError(
        f"expected {wanted.kind.name}, got {msg.kind.name}", code=ErrorCode.UNEXPECTED
    )
