"""The protocol's messages: one frozen dataclass per frame kind, its fields validated.

Control messages are JSON objects with exactly the keys their dataclass declares;
``SCHEMA`` and ``CHUNK`` carry raw bytes. Every field is checked as a message is
decoded (``validate``), so a caller never sees an out-of-bounds value: names go
through :mod:`sealsync.names`, numbers are bounded, strings are length-limited and
free of NUL and newlines (they end up in line-based logs).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from sealsync.errors import BadName
from sealsync.names import require_data_name
from sealsync.protocol.spec import (
    MAX_DATA_DIRS,
    MAX_DEVICES_PER_QUERY,
    MAX_FILE_ID,
    MAX_FILE_SIZE,
    MAX_HELD_FILES,
    MAX_INVENTORY_PAGE,
    MAX_MTIME_NS,
    MAX_PARTIALS,
    MAX_SIDECAR_SIZE,
    MAX_TEXT,
    RESUME_MIN,
    ROUND_STATUSES,
    VERDICTS,
    ErrorCode,
    Kind,
    ProtocolError,
)

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_MD5_RE = re.compile(r"^[0-9a-f]{32}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
LEASE_RE = re.compile(r"^[1-9][0-9]{0,17}-[0-9a-f]{16}-[0-9a-f]{32}$")
"""An identity lease: ``<number>-<nonce>-<tag>``, the receiver's to make and check
(receiver/leases.py); the sender only keeps and presents it."""


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


ANOTHER_SENDER = "00000000-0000-0000-0000-000000000000"
"""The owner an OWNERS answer gives for a device held by a sender other than the
asking one: a receiver never tells one sender another's UUID."""


@dataclass(frozen=True)
class Owners(Message):
    """Owner per queried device: the asking sender's UUID, ``ANOTHER_SENDER``, or an
    empty string for unowned."""

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

    ``mods_size`` is -1 when the file has no ``X.mods``; the optional ``mods2_size``
    (IoTDB 2.x's binary deletions, ``X.mods2``) is sent only when the file has one, so
    a file without it has the frame it always had. The stream's bytes follow in CHUNK
    frames in that order (data, ``.resource``, ``.mods``, ``.mods2``); FILE_END carries
    the MD5 of the whole stream.

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
    mods2_size: int = -1

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"mtime", "offset", "mods2_size"})

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
        if self.mods2_size >= 0:
            body["mods2_size"] = self.mods2_size
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
        if "mods2_size" in body:
            _int(body["mods2_size"], "FILE_BEGIN.mods2_size", 0, MAX_SIDECAR_SIZE)
        msg = cls(**body)
        msg.validate()
        return msg

    def validate(self) -> None:
        _int(self.file_id, "FILE_BEGIN.file_id", 0, MAX_FILE_ID)
        _name(self.name, "FILE_BEGIN.name")
        _int(self.size, "FILE_BEGIN.size", 0, MAX_FILE_SIZE)
        _int(self.resource_size, "FILE_BEGIN.resource_size", 0, MAX_SIDECAR_SIZE)
        _int(self.mods_size, "FILE_BEGIN.mods_size", -1, MAX_SIDECAR_SIZE)
        _int(self.mods2_size, "FILE_BEGIN.mods2_size", -1, MAX_SIDECAR_SIZE)
        _int(self.mtime, "FILE_BEGIN.mtime", -1, MAX_MTIME_NS)
        _int(self.offset, "FILE_BEGIN.offset", 0, self.size)
        if self.offset and self.mtime < 0:
            raise ProtocolError("FILE_BEGIN.offset: a resumed stream needs its mtime")

    @property
    def stream_size(self) -> int:
        return self.size + self.resource_size + max(self.mods_size, 0) + max(self.mods2_size, 0)

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
class HeldQuery(Message):
    """Asks, outside a round, for a summary of what the receiver holds of this
    sender (protocol version 2): a plain ``send`` compares it with what it shipped,
    so that a receiver that lost its storage is noticed (docs/design.md §3.9)."""

    kind: ClassVar[Kind] = Kind.HELD_QUERY


@dataclass(frozen=True)
class Held(Message):
    """The answer: ``files``, the number of this sender's data files the storage
    holds, and ``digest``, :func:`held_digest` of their names."""

    kind: ClassVar[Kind] = Kind.HELD
    files: int
    digest: str

    def validate(self) -> None:
        _int(self.files, "HELD.files", 0, MAX_HELD_FILES)
        if not isinstance(self.digest, str) or not _SHA256_RE.match(self.digest):
            raise ProtocolError("HELD.digest: not a lowercase hex SHA-256")


def held_digest(names: Iterable[str]) -> str:
    """SHA-256 of the names in code point order, each followed by a newline: both
    ends compute it over what they believe the receiver holds of a sender."""
    digest = hashlib.sha256()
    for name in sorted(set(names)):
        digest.update(name.encode("utf-8", "surrogateescape") + b"\n")
    return digest.hexdigest()


def _lease(value: Any, what: str, empty_ok: bool) -> str:
    if not isinstance(value, str) or not (LEASE_RE.match(value) or (empty_ok and value == "")):
        raise ProtocolError(f"{what}: not an identity lease")
    return value


@dataclass(frozen=True)
class Lease(Message):
    """Right after WELCOME (protocol version 2): the identity lease this sender holds
    from this receiver ("" when it holds none), where it runs (host name and schema
    dir, for the operator's line when two hosts act as one sender), and ``reclaim``
    (the operator said this host alone acts as this sender: ``sealsync identity
    reclaim``). The receiver answers LEASE_GRANT or ERROR ``identity``
    (docs/design.md §5.1)."""

    kind: ClassVar[Kind] = Kind.LEASE
    lease: str
    host: str
    reclaim: bool

    def validate(self) -> None:
        _lease(self.lease, "LEASE.lease", empty_ok=True)
        _text(self.host, "LEASE.host")
        _bool(self.reclaim, "LEASE.reclaim")


@dataclass(frozen=True)
class LeaseGrant(Message):
    """The sender's next lease: it records it durably before it sends its next frame,
    which tells the receiver it holds it."""

    kind: ClassVar[Kind] = Kind.LEASE_GRANT
    lease: str

    def validate(self) -> None:
        _lease(self.lease, "LEASE_GRANT.lease", empty_ok=False)


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

CONTROL_MESSAGES: dict[Kind, type[Message]] = {
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
        HeldQuery,
        Held,
        Lease,
        LeaseGrant,
    )
}
"""The message class of each control frame kind."""
