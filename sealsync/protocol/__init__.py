"""The wire protocol, in one place both sides import (docs/design.md §5).

A session is one SSH channel on the ``sealsync`` subsystem carrying length-prefixed
frames: a 5-byte header (kind: u8, payload length: u32, big endian) and a payload.
Control frames carry a JSON object with exactly the keys their message declares;
``SCHEMA`` and ``CHUNK`` carry raw bytes so that bulk data is never re-encoded.

Every field is validated when a frame is decoded, before any caller sees it: names
go through :mod:`sealsync.names`, numbers are bounded, strings are length-limited
and free of NUL and newlines (they end up in line-based logs). A frame that fails
validation raises :class:`ProtocolError`; the receiver answers with ``ERROR`` and
ends that session only.

The order of a session, sender (C) and receiver (S)::

    C: HELLO                       S: WELCOME | ERROR
    C: SCHEMA*                     S: SCHEMA_ACK (one per SCHEMA)
    C: INVENTORY_QUERY*            S: INVENTORY (one per query; send --reconcile)
    per data dir:
      C: ROUND_START               S: ROUND_READY (status ready | busy)
      C: OWNERS_QUERY?             S: OWNERS
      C: PARTIALS_QUERY?           S: PARTIALS (only with a file >= RESUME_MIN)
      C: DELETE*                   S: DELETE_ACK (one per DELETE, in order, pipelined)
      C: (FILE_BEGIN CHUNK* FILE_END)*   S: VERDICT (one per file, in order, pipelined)
      C: ROUND_END                 S: ROUND_DONE
    C: BYE
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from sealsync.errors import BadName, SealsyncError
from sealsync.names import require_data_name

if TYPE_CHECKING:
    import paramiko

PROTOCOL_VERSION = 1
SUBSYSTEM = "sealsync"

# The SSH transport both ends set up (docs/design.md §5.1): an 8 MiB window and
# 64 KiB packets keep a loopback or LAN link full; AES-GCM first (hardware AES, and
# the MAC comes with the cipher).
SSH_WINDOW_SIZE = 8 * 1024 * 1024
SSH_MAX_PACKET_SIZE = 64 * 1024
SSH_PREFERRED_CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
)


def preferred_ciphers(available: Sequence[str]) -> tuple[str, ...]:
    """The transport's ciphers, ours first in our order; none it lacks is added."""
    first = tuple(c for c in SSH_PREFERRED_CIPHERS if c in available)
    return first + tuple(c for c in available if c not in first)


HEADER = struct.Struct("!BI")
MAX_CONTROL_PAYLOAD = 256 * 1024
MAX_CHUNK_PAYLOAD = 1024 * 1024
MAX_SCHEMA_PAYLOAD = 1024 * 1024
MAX_FILE_SIZE = 1 << 40
MAX_SIDECAR_SIZE = 1 << 30
MAX_TEXT = 1024
MAX_DEVICES_PER_QUERY = 4096
MAX_DATA_DIRS = 1024
MAX_FILE_ID = 1 << 53
MAX_INVENTORY_PAGE = 1000
RESUME_MIN = 4 << 20
"""Data files at least this large may resume inside the file (docs/design.md §3.5):
their FILE_BEGIN carries ``mtime``, the receiver keeps what a cut stream left of them,
and a round with one asks PARTIALS_QUERY. Smaller files take none of this."""
PARTIAL_HEAD = 256 * 1024
"""A partial upload's identity includes the MD5 of the data file's first this many
bytes (all of it when shorter), so a different file under the same name, size and
mtime never resumes onto old bytes."""
MAX_PARTIALS = 1000
"""Entries in one PARTIALS answer (the newest, if a sender had more)."""
MAX_MTIME_NS = (1 << 63) - 1
"""Entries per INVENTORY page: at the longest names a page stays under the control
payload limit."""

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_MD5_RE = re.compile(r"^[0-9a-f]{32}$")


class ErrorCode(StrEnum):
    """The codes an ``ERROR`` frame carries: these and no others (docs/protocol.md,
    "Error codes"; ``tests/test_error_codes.py`` holds the code and the table to it)."""

    VERSION = "version"  # the HELLO's protocol version is not the receiver's
    AUTH = "auth"  # the UUID is bound to another key, retired, or over max_uuids_per_key
    BUSY = "busy"  # a session cap is reached, or the receiver is stopping; retry later
    PROTOCOL = "protocol"  # a frame that does not decode or validate
    BAD_NAME = "bad-name"  # a file name outside the rules of docs/design.md §1.3
    BAD_DEVICE = "bad-device"  # an OWNERS_QUERY device id out of bounds
    UNEXPECTED = "unexpected"  # a valid frame at a point where it is not expected
    SCHEMA_GAP = "schema-gap"  # a SCHEMA chunk that does not continue the receiver's copy
    TIMEOUT = "timeout"  # idle or stalled longer than the receiver allows
    QUOTA = "quota"  # a file would take the sender over sender_quota_bytes
    IO = "io"  # the receiver could not write its own state (disk full, permissions)
    INTERNAL = "internal"  # a receiver bug; its log has the traceback
    CLOSED = "closed"  # never sent: the code of a connection the peer closed


ERROR_CODES = frozenset(ErrorCode)


class ProtocolError(SealsyncError):
    """A frame that is malformed, out of bounds, or not expected at this point."""

    def __init__(self, message: str, code: str = ErrorCode.PROTOCOL) -> None:
        super().__init__(message)
        self.code = code


class Kind(IntEnum):
    HELLO = 1
    WELCOME = 2
    SCHEMA = 3
    SCHEMA_ACK = 4
    ROUND_START = 5
    ROUND_READY = 6
    OWNERS_QUERY = 7
    OWNERS = 8
    DELETE = 9
    DELETE_ACK = 10
    FILE_BEGIN = 11
    CHUNK = 12
    FILE_END = 13
    VERDICT = 14
    ROUND_END = 15
    ROUND_DONE = 16
    ERROR = 17
    BYE = 18
    INVENTORY_QUERY = 19
    INVENTORY = 20
    PARTIALS_QUERY = 21
    PARTIALS = 22


class Verdict:
    """The outcomes of one offered file."""

    VERIFIED = "verified"  # stored, logged, handed to the loader
    MISMATCH = "mismatch"  # MD5 or size wrong: the sender resends
    CONFLICT = "conflict"  # a device belongs to another sender
    REFUSED = "refused"  # not a valid data file, or the receiver could not store it


VERDICTS = frozenset({Verdict.VERIFIED, Verdict.MISMATCH, Verdict.CONFLICT, Verdict.REFUSED})
ROUND_STATUSES = frozenset({"ready", "busy"})


# --- field validators -------------------------------------------------------------


def _text(value: Any, what: str, limit: int = MAX_TEXT, empty_ok: bool = True) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"{what}: expected a string")
    try:  # JSON may carry lone surrogates ("\udcff"): not text, and no file or log takes them
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(f"{what}: not valid UTF-8") from None
    if len(raw) > limit:
        raise ProtocolError(f"{what}: longer than {limit} bytes")
    if not empty_ok and not value:
        raise ProtocolError(f"{what}: empty")
    if "\x00" in value or "\n" in value or "\r" in value:
        raise ProtocolError(f"{what}: holds a NUL or newline")
    return value


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{what}: expected an integer")
    if not lo <= value <= hi:
        raise ProtocolError(f"{what}: {value} outside [{lo}, {hi}]")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"{what}: expected a boolean")
    return value


def _uuid(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _UUID_RE.match(value):
        raise ProtocolError(f"{what}: not a lowercase UUID")
    return value


def _md5(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _MD5_RE.match(value):
        raise ProtocolError(f"{what}: not a lowercase hex MD5")
    return value


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"{what}: expected a string")
    try:
        return require_data_name(value)  # check_data_name, and valid UTF-8
    except BadName as exc:
        raise ProtocolError(f"{what}: {exc}", code=ErrorCode.BAD_NAME) from exc


def check_device(value: Any, what: str = "device") -> str:
    """Device ids end up in ``device_owner.log`` lines: bounded, no NUL or newline."""
    return _text(value, what, empty_ok=False)


# --- messages ----------------------------------------------------------------------


def json_object(payload: bytes, kind: Kind) -> dict[str, Any]:
    """A control frame's payload as a JSON object, or ProtocolError."""
    try:
        body = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"{kind.name}: payload is not JSON") from exc
    if not isinstance(body, dict):
        raise ProtocolError(f"{kind.name}: payload is not an object")
    return body


class Message:
    """A control message: a frozen dataclass whose fields are the JSON keys."""

    kind: ClassVar[Kind]

    def validate(self) -> None:  # overridden where fields need checks
        """Raise ProtocolError if a field is out of bounds."""

    def payload(self) -> bytes:
        body = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_payload(cls, payload: bytes) -> Message:
        body = json_object(payload, cls.kind)
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        if set(body) != names:
            raise ProtocolError(f"{cls.kind.name}: expected keys {sorted(names)}")
        msg = cls(**body)
        msg.validate()
        return msg


@dataclass(frozen=True)
class Hello(Message):
    kind: ClassVar[Kind] = Kind.HELLO
    version: int
    uuid: str
    name: str

    def validate(self) -> None:
        _int(self.version, "HELLO.version", 1, 1 << 16)
        _uuid(self.uuid, "HELLO.uuid")
        _text(self.name, "HELLO.name", 256)


@dataclass(frozen=True)
class Welcome(Message):
    kind: ClassVar[Kind] = Kind.WELCOME
    version: int
    receiver: str

    def validate(self) -> None:
        _int(self.version, "WELCOME.version", 1, 1 << 16)
        _text(self.receiver, "WELCOME.receiver", 256)


@dataclass(frozen=True)
class SchemaAck(Message):
    """The receiver holds this sender's schema log up to ``position`` bytes."""

    kind: ClassVar[Kind] = Kind.SCHEMA_ACK
    position: int

    def validate(self) -> None:
        _int(self.position, "SCHEMA_ACK.position", 0, MAX_FILE_SIZE)


@dataclass(frozen=True)
class RoundStart(Message):
    """Starts a round for the sender's data dir number ``data_dir``."""

    kind: ClassVar[Kind] = Kind.ROUND_START
    data_dir: int

    def validate(self) -> None:
        _int(self.data_dir, "ROUND_START.data_dir", 0, MAX_DATA_DIRS - 1)


@dataclass(frozen=True)
class RoundReady(Message):
    kind: ClassVar[Kind] = Kind.ROUND_READY
    status: str
    message: str

    def validate(self) -> None:
        if self.status not in ROUND_STATUSES:
            raise ProtocolError("ROUND_READY.status: unknown")
        _text(self.message, "ROUND_READY.message")


@dataclass(frozen=True)
class OwnersQuery(Message):
    """Asks who owns these devices, so a refused file is not resent just to be refused."""

    kind: ClassVar[Kind] = Kind.OWNERS_QUERY
    devices: list[str]

    def validate(self) -> None:
        if not isinstance(self.devices, list) or len(self.devices) > MAX_DEVICES_PER_QUERY:
            raise ProtocolError(f"OWNERS_QUERY.devices: a list of at most {MAX_DEVICES_PER_QUERY}")
        for device in self.devices:
            check_device(device, "OWNERS_QUERY.devices[]")


@dataclass(frozen=True)
class Owners(Message):
    """Owner UUID per queried device; an empty string means unowned."""

    kind: ClassVar[Kind] = Kind.OWNERS
    owners: dict[str, str]

    def validate(self) -> None:
        if not isinstance(self.owners, dict) or len(self.owners) > MAX_DEVICES_PER_QUERY:
            raise ProtocolError("OWNERS.owners: a bounded object")
        for device, owner in self.owners.items():
            check_device(device, "OWNERS.owners key")
            if owner != "":
                _uuid(owner, "OWNERS.owners value")


@dataclass(frozen=True)
class Delete(Message):
    kind: ClassVar[Kind] = Kind.DELETE
    name: str

    def validate(self) -> None:
        _name(self.name, "DELETE.name")


@dataclass(frozen=True)
class DeleteAck(Message):
    kind: ClassVar[Kind] = Kind.DELETE_ACK
    name: str

    def validate(self) -> None:
        _name(self.name, "DELETE_ACK.name")


@dataclass(frozen=True)
class FileBegin(Message):
    """Opens a file stream: ``size`` bytes of data file, then its sidecars' bytes.

    ``mods_size`` is -1 when the file has no ``X.mods``. The stream's bytes follow in
    CHUNK frames in that order; FILE_END carries the MD5 of the whole stream.

    Two optional keys, sent only for data files of at least :data:`RESUME_MIN` bytes
    (a small file's frame is unchanged): ``mtime``, the data file's mtime in
    nanoseconds (part of a partial upload's identity), and ``offset``, when the
    stream resumes a partial upload the receiver listed in PARTIALS: the CHUNKs then
    start at that byte of the stream (never past the data file), the receiver
    supplies the bytes before it, and FILE_END's MD5 still covers the whole stream.
    """

    kind: ClassVar[Kind] = Kind.FILE_BEGIN
    file_id: int
    name: str
    size: int
    resource_size: int
    mods_size: int
    mtime: int = -1
    offset: int = 0

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"mtime", "offset"})

    def payload(self) -> bytes:
        body: dict[str, Any] = {
            "file_id": self.file_id,
            "name": self.name,
            "size": self.size,
            "resource_size": self.resource_size,
            "mods_size": self.mods_size,
        }
        if self.mtime >= 0:
            body["mtime"] = self.mtime
        if self.offset:
            body["offset"] = self.offset
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_payload(cls, payload: bytes) -> Message:
        body = json_object(payload, cls.kind)
        required = {"file_id", "name", "size", "resource_size", "mods_size"}
        if not required <= set(body) or not set(body) <= required | cls._OPTIONAL:
            raise ProtocolError(
                f"FILE_BEGIN: expected keys {sorted(required)}, optionally {sorted(cls._OPTIONAL)}"
            )
        if "mtime" in body:
            _int(body["mtime"], "FILE_BEGIN.mtime", 0, MAX_MTIME_NS)
        if "offset" in body:
            _int(body["offset"], "FILE_BEGIN.offset", 1, MAX_FILE_SIZE)
        msg = cls(**body)
        msg.validate()
        return msg

    def validate(self) -> None:
        _int(self.file_id, "FILE_BEGIN.file_id", 0, MAX_FILE_ID)
        _name(self.name, "FILE_BEGIN.name")
        _int(self.size, "FILE_BEGIN.size", 0, MAX_FILE_SIZE)
        _int(self.resource_size, "FILE_BEGIN.resource_size", 0, MAX_SIDECAR_SIZE)
        _int(self.mods_size, "FILE_BEGIN.mods_size", -1, MAX_SIDECAR_SIZE)
        _int(self.mtime, "FILE_BEGIN.mtime", -1, MAX_MTIME_NS)
        _int(self.offset, "FILE_BEGIN.offset", 0, self.size)
        if self.offset and self.mtime < 0:
            raise ProtocolError("FILE_BEGIN.offset: a resumed stream needs its mtime")

    @property
    def stream_size(self) -> int:
        return self.size + self.resource_size + max(self.mods_size, 0)

    @property
    def resumable(self) -> bool:
        """A stream whose cut leaves a partial upload on the receiver."""
        return self.mtime >= 0 and self.size >= RESUME_MIN


@dataclass(frozen=True)
class FileEnd(Message):
    kind: ClassVar[Kind] = Kind.FILE_END
    file_id: int
    md5: str

    def validate(self) -> None:
        _int(self.file_id, "FILE_END.file_id", 0, MAX_FILE_ID)
        _md5(self.md5, "FILE_END.md5")


@dataclass(frozen=True)
class FileVerdict(Message):
    kind: ClassVar[Kind] = Kind.VERDICT
    file_id: int
    name: str
    status: str
    reason: str

    def validate(self) -> None:
        _int(self.file_id, "VERDICT.file_id", 0, MAX_FILE_ID)
        _name(self.name, "VERDICT.name")
        if self.status not in VERDICTS:
            raise ProtocolError("VERDICT.status: unknown")
        _text(self.reason, "VERDICT.reason")


@dataclass(frozen=True)
class RoundEnd(Message):
    kind: ClassVar[Kind] = Kind.ROUND_END


@dataclass(frozen=True)
class RoundDone(Message):
    """``loaded`` is True when the receiver applied the whole round before answering."""

    kind: ClassVar[Kind] = Kind.ROUND_DONE
    loaded: bool

    def validate(self) -> None:
        _bool(self.loaded, "ROUND_DONE.loaded")


@dataclass(frozen=True)
class InventoryQuery(Message):
    """Asks, outside a round, which files the receiver holds of this sender: the
    page of names after ``after`` in name order ("" for the first page). For
    ``send --reconcile`` (docs/design.md §3.9)."""

    kind: ClassVar[Kind] = Kind.INVENTORY_QUERY
    after: str

    def validate(self) -> None:
        if self.after != "":
            _name(self.after, "INVENTORY_QUERY.after")


@dataclass(frozen=True)
class Inventory(Message):
    """One page of the answer: ``[name, size, md5]`` per file in name order, ``md5``
    the data file's as recorded when it was verified ("" when none was recorded);
    ``more`` when another page follows."""

    kind: ClassVar[Kind] = Kind.INVENTORY
    files: list[list[Any]]
    more: bool

    def validate(self) -> None:
        if not isinstance(self.files, list) or len(self.files) > MAX_INVENTORY_PAGE:
            raise ProtocolError(f"INVENTORY.files: a list of at most {MAX_INVENTORY_PAGE}")
        previous = ""
        for entry in self.files:
            if not isinstance(entry, list) or len(entry) != 3:
                raise ProtocolError("INVENTORY.files[]: expected [name, size, md5]")
            name, size, md5 = entry
            _name(name, "INVENTORY.files[].name")
            if name <= previous:
                raise ProtocolError("INVENTORY.files: not in name order")
            previous = name
            _int(size, "INVENTORY.files[].size", 0, MAX_FILE_SIZE)
            if md5 != "":
                _md5(md5, "INVENTORY.files[].md5")
        _bool(self.more, "INVENTORY.more")


@dataclass(frozen=True)
class PartialsQuery(Message):
    """Inside a round, before its files: which partial uploads of this sender does the
    receiver hold (docs/design.md §3.5)? Sent only by a round with a data file of at
    least :data:`RESUME_MIN` bytes."""

    kind: ClassVar[Kind] = Kind.PARTIALS_QUERY


@dataclass(frozen=True)
class Partials(Message):
    """The answer: ``[name, size, mtime, head, held]`` per partial upload: the data
    file's size and mtime (ns), ``head`` the MD5 of its first :data:`PARTIAL_HEAD`
    bytes, ``held`` the bytes of it the receiver holds durably (a FILE_BEGIN of the
    same file may carry ``offset`` up to ``held``)."""

    kind: ClassVar[Kind] = Kind.PARTIALS
    partials: list[list[Any]]

    def validate(self) -> None:
        if not isinstance(self.partials, list) or len(self.partials) > MAX_PARTIALS:
            raise ProtocolError(f"PARTIALS.partials: a list of at most {MAX_PARTIALS}")
        seen: set[str] = set()
        for entry in self.partials:
            if not isinstance(entry, list) or len(entry) != 5:
                raise ProtocolError("PARTIALS.partials[]: expected [name, size, mtime, head, held]")
            name, size, mtime, head, held = entry
            _name(name, "PARTIALS.partials[].name")
            if name in seen:
                raise ProtocolError("PARTIALS.partials: a name listed twice")
            seen.add(name)
            _int(size, "PARTIALS.partials[].size", 0, MAX_FILE_SIZE)
            _int(mtime, "PARTIALS.partials[].mtime", 0, MAX_MTIME_NS)
            _md5(head, "PARTIALS.partials[].head")
            _int(held, "PARTIALS.partials[].held", 1, size)


@dataclass(frozen=True)
class Error(Message):
    """Ends the session; ``code`` is machine-readable (busy, auth, protocol, bad-name...)."""

    kind: ClassVar[Kind] = Kind.ERROR
    code: str
    message: str

    def validate(self) -> None:
        _text(self.code, "ERROR.code", 64, empty_ok=False)
        _text(self.message, "ERROR.message")


@dataclass(frozen=True)
class Bye(Message):
    kind: ClassVar[Kind] = Kind.BYE


@dataclass(frozen=True)
class Schema:
    """A piece of the sender's schema log starting at byte ``offset`` of that log."""

    offset: int
    data: bytes
    kind: ClassVar[Kind] = Kind.SCHEMA
    _HEAD: ClassVar[struct.Struct] = struct.Struct("!Q")

    def payload(self) -> bytes:
        return self._HEAD.pack(self.offset) + self.data

    @classmethod
    def from_payload(cls, payload: bytes) -> Schema:
        if len(payload) < cls._HEAD.size:
            raise ProtocolError("SCHEMA: payload shorter than its offset")
        (offset,) = cls._HEAD.unpack_from(payload)
        _int(offset, "SCHEMA.offset", 0, MAX_FILE_SIZE)
        return cls(offset, bytes(payload[cls._HEAD.size :]))


@dataclass(frozen=True)
class Chunk:
    """Raw bytes of the file stream opened by the last FILE_BEGIN."""

    data: bytes | memoryview
    kind: ClassVar[Kind] = Kind.CHUNK

    def payload(self) -> bytes | memoryview:
        return self.data

    @classmethod
    def from_payload(cls, payload: bytes) -> Chunk:
        return cls(payload)


AnyMessage = Message | Schema | Chunk
_M = TypeVar("_M", bound=Message)

_CONTROL: dict[Kind, type[Message]] = {
    cls.kind: cls
    for cls in (
        Hello,
        Welcome,
        SchemaAck,
        RoundStart,
        RoundReady,
        OwnersQuery,
        Owners,
        Delete,
        DeleteAck,
        FileBegin,
        FileEnd,
        FileVerdict,
        RoundEnd,
        RoundDone,
        Error,
        Bye,
        InventoryQuery,
        Inventory,
        PartialsQuery,
        Partials,
    )
}
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
        return _CONTROL[kind].from_payload(payload)
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
    then a payload moved the whole buffer twice per frame (a quarter of the receiver's
    CPU with small files). One ``recv`` here takes everything there is, and frames are
    handed out as memoryviews of it (:func:`receive` turns all but chunks into bytes).
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
    buf = bytearray(first)
    if not first:
        raise ConnectionClosed("connection closed by peer")
    while len(buf) < n:
        part = stream.recv(min(n - len(buf), 1 << 20))
        if not part:
            raise ConnectionClosed(
                "connection closed by peer" if not buf else "connection closed mid-frame"
            )
        buf += part
    return bytes(buf)


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
