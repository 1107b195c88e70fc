"""The protocol's terms both sides share: its version, the SSH transport, the bounds on
every frame and field, the frame kinds, the ERROR codes and the verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum, StrEnum

from sealsync.errors import SealsyncError

PROTOCOL_VERSION = 2
"""The newest version this release speaks. Version 2 added HELD_QUERY/HELD (a
summary of what the receiver holds of a sender, docs/design.md §3.9) and LEASE/
LEASE_GRANT (the sender identity lease, docs/design.md §5.1)."""
OLDEST_PROTOCOL_VERSION = 1
"""The oldest version this release still speaks: one version back (docs/protocol.md,
"Versions and upgrades")."""
SUBSYSTEM = "sealsync"
KEYS_IGNORED_BANNER = "sealsync: this receiver ignores its authorized_keys, no key is accepted"
"""The SSH authentication banner (RFC 4252, section 5.4) of a receiver whose
``authorized_keys`` grants nothing because it is unsafe or unreadable: the sender then
says so instead of asking for its key to be added to a file that already holds it. A
fixed text, matched whole: nothing a server sends is printed."""


def negotiate(offered: int) -> int | None:
    """The version a receiver speaks with a sender whose HELLO offers ``offered`` (the
    newest it speaks): one version older or newer than ours is served, at the older
    of the two; further apart, None (the receiver refuses with ERROR ``version``).

    A sender one version newer than the receiver speaks the receiver's version: each
    release speaks its predecessor's (:data:`OLDEST_PROTOCOL_VERSION`), so a fleet is
    upgraded one end at a time, receiver first or senders first."""
    oldest = max(OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION - 1)
    if not oldest <= offered <= PROTOCOL_VERSION + 1:
        return None
    return min(offered, PROTOCOL_VERSION)


def speaks(version: int) -> bool:
    """This release can hold a session at ``version`` (the sender's check of WELCOME)."""
    return OLDEST_PROTOCOL_VERSION <= version <= PROTOCOL_VERSION


# The SSH transport both ends set up (docs/design.md §5.1): an 8 MiB window keeps a
# loopback or LAN link full; 256 KiB packets (OpenSSH's largest, PACKET_MAX_SIZE) carry
# a whole 256 KiB CHUNK frame or a small file's frames in one packet, a quarter of the
# per-packet work of 64 KiB ones on both ends. Each end advertises the largest packet
# it takes, so a peer of an earlier release (64 KiB) is sent packets it takes. AES-GCM
# first (hardware AES, and the MAC comes with the cipher).
SSH_WINDOW_SIZE = 8 * 1024 * 1024
SSH_MAX_PACKET_SIZE = 256 * 1024
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


MAX_CONTROL_PAYLOAD = 256 * 1024
MAX_CHUNK_PAYLOAD = 1024 * 1024
MAX_SCHEMA_PAYLOAD = 1024 * 1024
MAX_FILE_SIZE = 1 << 40
MAX_SIDECAR_SIZE = 1 << 30
MAX_DELETION_FILE_SIZE = 16 << 20
"""The largest ``.mods`` or ``.mods2`` a receiver accepts: a FILE_BEGIN announcing a
larger one is answered *refused* (the file, not the session; its bytes are read and
dropped). The frame itself may carry up to :data:`MAX_SIDECAR_SIZE`; every deletion
becomes a record the loader holds with its file (sealsync.formats.mods)."""
MAX_TEXT = 1024
MAX_DEVICES_PER_QUERY = 4096
MAX_DATA_DIRS = 1024
MAX_FILE_ID = 1 << 53
MAX_INVENTORY_PAGE = 1000
"""Entries per INVENTORY page: at the longest names a page stays under the control
payload limit."""
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
MAX_HELD_FILES = 1 << 40
"""The largest file count a HELD answer carries."""
MAX_MTIME_NS = (1 << 63) - 1
"""The largest ``mtime`` a FILE_BEGIN carries: nanoseconds in a signed 64-bit count."""


class ErrorCode(StrEnum):
    """The codes an ``ERROR`` frame carries: these and no others (docs/protocol.md,
    "Error codes"; ``tests/test_error_codes.py`` holds the code and the table to it)."""

    VERSION = "version"  # the HELLO's protocol version is more than one from the receiver's
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
    IDENTITY = "identity"  # another host acts as this sender: its lease is newer
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
    HELD_QUERY = 23  # version 2
    HELD = 24  # version 2
    LEASE = 25  # version 2
    LEASE_GRANT = 26  # version 2


class Verdict:
    """The outcomes of one offered file."""

    VERIFIED = "verified"  # stored, logged, handed to the loader
    MISMATCH = "mismatch"  # MD5 or size wrong: the sender resends
    CONFLICT = "conflict"  # a device belongs to another sender
    REFUSED = "refused"  # not a valid data file, or the receiver could not store it


VERDICTS = frozenset({Verdict.VERIFIED, Verdict.MISMATCH, Verdict.CONFLICT, Verdict.REFUSED})
ROUND_STATUSES = frozenset({"ready", "busy"})
