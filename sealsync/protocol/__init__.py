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
    C: LEASE?                      S: LEASE_GRANT | ERROR (version 2; before SCHEMA, rounds)
    C: HELD_QUERY?                 S: HELD (version 2; a plain send's lost-storage check)
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

HELLO carries the newest version the sender speaks; WELCOME the version of the
session, which the receiver chooses (``spec.negotiate``: one version older or newer
than its own is served, at the older of the two). A frame a version lacks is never
sent in a session of that version.

The protocol is one package both sides import: ``spec`` (version, bounds, frame
kinds, ERROR codes, verdicts), ``messages`` (one dataclass per frame kind, validated)
and ``codec`` (frames on a stream). Everything is importable from here.
"""

from __future__ import annotations

from sealsync.protocol.codec import (
    HEADER,
    ConnectionClosed,
    ReadBuffer,
    Stream,
    channel_stream,
    decode,
    decode_frames,
    decode_header,
    encode,
    expect,
    payload_limit,
    receive,
    recv_exact,
    send,
)
from sealsync.protocol.messages import (
    ANOTHER_SENDER,
    LEASE_RE,
    AnyMessage,
    Bye,
    Chunk,
    Delete,
    DeleteAck,
    Error,
    FileBegin,
    FileEnd,
    FileVerdict,
    Held,
    HeldQuery,
    Hello,
    Inventory,
    InventoryQuery,
    Lease,
    LeaseGrant,
    Message,
    Owners,
    OwnersQuery,
    Partials,
    PartialsQuery,
    RoundDone,
    RoundEnd,
    RoundReady,
    RoundStart,
    Schema,
    SchemaAck,
    Welcome,
    check_device,
    held_digest,
    json_object,
)
from sealsync.protocol.spec import (
    ERROR_CODES,
    KEYS_IGNORED_BANNER,
    MAX_CHUNK_PAYLOAD,
    MAX_CONTROL_PAYLOAD,
    MAX_DATA_DIRS,
    MAX_DELETION_FILE_SIZE,
    MAX_DEVICES_PER_QUERY,
    MAX_FILE_ID,
    MAX_FILE_SIZE,
    MAX_HELD_FILES,
    MAX_INVENTORY_PAGE,
    MAX_MTIME_NS,
    MAX_PARTIALS,
    MAX_SCHEMA_PAYLOAD,
    MAX_SIDECAR_SIZE,
    MAX_TEXT,
    OLDEST_PROTOCOL_VERSION,
    PARTIAL_HEAD,
    PROTOCOL_VERSION,
    RESUME_MIN,
    ROUND_STATUSES,
    SSH_MAX_PACKET_SIZE,
    SSH_PREFERRED_CIPHERS,
    SSH_WINDOW_SIZE,
    SUBSYSTEM,
    VERDICTS,
    ErrorCode,
    Kind,
    ProtocolError,
    Verdict,
    negotiate,
    preferred_ciphers,
    speaks,
)

__all__ = [
    "AnyMessage",
    "Bye",
    "Chunk",
    "ConnectionClosed",
    "Delete",
    "DeleteAck",
    "ERROR_CODES",
    "KEYS_IGNORED_BANNER",
    "Error",
    "ErrorCode",
    "FileBegin",
    "FileEnd",
    "FileVerdict",
    "HEADER",
    "Held",
    "HeldQuery",
    "Hello",
    "Inventory",
    "InventoryQuery",
    "Kind",
    "LEASE_RE",
    "Lease",
    "LeaseGrant",
    "MAX_CHUNK_PAYLOAD",
    "MAX_CONTROL_PAYLOAD",
    "MAX_DATA_DIRS",
    "MAX_DEVICES_PER_QUERY",
    "MAX_FILE_ID",
    "MAX_FILE_SIZE",
    "MAX_HELD_FILES",
    "MAX_INVENTORY_PAGE",
    "MAX_MTIME_NS",
    "MAX_PARTIALS",
    "MAX_SCHEMA_PAYLOAD",
    "MAX_DELETION_FILE_SIZE",
    "MAX_SIDECAR_SIZE",
    "MAX_TEXT",
    "Message",
    "ANOTHER_SENDER",
    "OLDEST_PROTOCOL_VERSION",
    "Owners",
    "OwnersQuery",
    "PARTIAL_HEAD",
    "PROTOCOL_VERSION",
    "Partials",
    "PartialsQuery",
    "ProtocolError",
    "RESUME_MIN",
    "ROUND_STATUSES",
    "ReadBuffer",
    "RoundDone",
    "RoundEnd",
    "RoundReady",
    "RoundStart",
    "SSH_MAX_PACKET_SIZE",
    "SSH_PREFERRED_CIPHERS",
    "SSH_WINDOW_SIZE",
    "SUBSYSTEM",
    "Schema",
    "SchemaAck",
    "Stream",
    "VERDICTS",
    "Verdict",
    "Welcome",
    "channel_stream",
    "check_device",
    "decode",
    "decode_frames",
    "decode_header",
    "encode",
    "expect",
    "held_digest",
    "json_object",
    "negotiate",
    "payload_limit",
    "preferred_ciphers",
    "receive",
    "recv_exact",
    "send",
    "speaks",
]
