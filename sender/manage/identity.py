"""The sender's UUID: its identity, and its ownership of devices on every receiver;
the host name its HELLO gives, for the receiver's logs; and the identity lease each
receiver granted it.

Regenerating the UUID would make a sender a stranger to the receivers that know it (its
devices would then conflict with itself), so the file is created exactly once and a
damaged file stops the sender with a clear message instead of being replaced; only
the operator gives a copy of a sender an identity of its own (``sealsync identity
new``, :mod:`sender.manage.new_identity`).

**Leases** (docs/design.md §5.1, receiver/leases.py). A copy of a sender (a cloned
image, copied folders and key) has its UUID and its key: nothing in HELLO tells the
two apart. So each receiver grants the sender a new lease in every session of protocol
version 2 (LEASE, LEASE_GRANT right after WELCOME), and the sender keeps the last one
in ``<schema dir>/sync/<host>_<port>/lease.json`` (``{"lease": ..., "reclaim": ...}``),
recorded durably before it sends its next frame: that frame is how the receiver knows
the sender holds it. A copy holds an older lease and is refused before it sends
anything (:class:`IdentityInUse`, one line naming both hosts and the two commands).
``reclaim`` is set by ``sealsync identity reclaim`` (this host alone acts as this
sender) and cleared by the next grant.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from sealsync import durable
from sealsync.errors import LocalIOError, SealsyncError
from sealsync.protocol import (
    LEASE_RE,
    AnyMessage,
    ErrorCode,
    Lease,
    LeaseGrant,
    Message,
    ProtocolError,
)
from sender.manage.layout import SCHEMA_SYNC_FOLDER

UUID_FILE = "uuid.txt"


def uuid_path(schema_dir: Path) -> Path:
    return Path(schema_dir) / SCHEMA_SYNC_FOLDER / UUID_FILE


def sender_uuid(schema_dir: Path) -> str:
    """This sender's UUID in canonical form (lowercase, dashed), created on first use.

    One spelling only: the receiver names folders and keys ownership by this string,
    so it refuses any other spelling (``sealsync.names.check_sender_uuid``).
    """
    path = uuid_path(schema_dir)
    if not os.path.lexists(path):
        _create_once(path)
    return _read(path)


def _create_once(path: Path) -> None:
    """Publish a new UUID without ever replacing one that appeared meanwhile.

    Two senders of one instance (towards different receivers) may start together; a
    plain atomic replace would let the loser run a round under a UUID that is then
    overwritten. The new file is published only if ``uuid.txt`` does not exist yet
    (``replace=False``); the loser then reads the winner's UUID.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            durable.atomic_write(path, f"{uuid.uuid4()}\n", replace=False)
        except FileExistsError:
            pass
    except OSError as exc:
        raise LocalIOError(f"cannot create the sender UUID file {path}: {exc.strerror}") from exc


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LocalIOError(f"cannot read the sender UUID file {path}: {exc.strerror}") from exc
    try:
        return str(uuid.UUID(data.decode("ascii").strip()))
    except (UnicodeDecodeError, ValueError):
        raise SealsyncError(
            f"the sender UUID file {path} is corrupt (not a UUID); restore it from a backup "
            "(a new UUID would make this sender a stranger to its receivers)"
        ) from None


def hostname() -> str:
    """This machine's name as the HELLO carries it: printable, at most 200 bytes (a name
    for the receiver's logs, never an identity: the UUID is that)."""
    name = "".join(ch for ch in socket.gethostname() if ch.isprintable())
    return name.encode("utf-8")[:200].decode("utf-8", "ignore")


def where(schema_dir: Path) -> str:
    """Where this sender runs, as LEASE says it: the host name and the schema dir (two
    copies of one sender on one host differ by the second)."""
    return f"{hostname()}:{os.path.abspath(schema_dir)}"


@dataclass(frozen=True)
class HeldLease:
    """The lease file: the last lease granted ("" for none), and whether the operator
    said this host alone acts as this sender."""

    lease: str = ""
    reclaim: bool = False


def read_lease(path: Path) -> HeldLease:
    """The lease kept for one receiver; none when there is no file yet. A damaged file
    holds no lease: the receiver then names the host that holds one."""
    try:
        body = json.loads(path.read_bytes())
    except FileNotFoundError:
        return HeldLease()
    except OSError as exc:
        raise LocalIOError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError:
        return HeldLease()
    if not isinstance(body, dict):
        return HeldLease()
    lease, reclaim = body.get("lease"), body.get("reclaim")
    return HeldLease(
        lease if isinstance(lease, str) and LEASE_RE.match(lease) else "", reclaim is True
    )


def write_lease(path: Path, held: HeldLease) -> None:
    """Replace the lease file, durably (the receiver takes the next frame as proof)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"lease": held.lease, "reclaim": held.reclaim}
        durable.atomic_write(path, json.dumps(body) + "\n", 0o600)
    except OSError as exc:
        raise LocalIOError(f"cannot write {path}: {exc.strerror or exc}") from None


class IdentityInUse(SealsyncError):
    """Another host holds this sender's lease on a receiver: this host is a copy (or
    its state was restored from an older backup). Nothing was sent."""

    kind = "identity"


_M = TypeVar("_M", bound=Message)


class LeaseSession(Protocol):
    """What the lease exchange needs of the sender's session."""

    @property
    def version(self) -> int: ...

    def send(self, msg: AnyMessage) -> None: ...

    def receive(self, wanted: type[_M]) -> _M: ...


def exchange_lease(
    session: LeaseSession, path: Path, schema_dir: Path, source: str, receiver: str
) -> None:
    """Present the lease kept in ``path``, record the next one (before any other frame
    goes out); IdentityInUse, naming the fix, when another host holds this sender's.
    Nothing to do with a receiver of protocol version 1."""
    if session.version < 2:
        return
    held = read_lease(path)
    session.send(Lease(held.lease, where(schema_dir), held.reclaim))
    try:
        grant = session.receive(LeaseGrant)
    except ProtocolError as exc:
        if exc.code != ErrorCode.IDENTITY:
            raise
        said = str(exc).removeprefix("receiver: ")
        raise IdentityInUse(
            f"receiver {receiver}: {said}: nothing was sent; if this host is a copy, give it "
            "an identity of its own: a key of its own (`sealsync keygen`, authorized on each "
            f"receiver) and `sealsync identity new --config {source}` (a new UUID and state: "
            "it ships its files anew, and the other host's files stay at the receiver); if "
            "no other host acts as this sender, take the identity back with `sealsync "
            f"identity reclaim --config {source}`"
        ) from None
    write_lease(path, HeldLease(grant.lease))
