"""Sender identity leases: two hosts cannot act as one sender unnoticed (docs/design.md §5.1).

A sender is its UUID (``uuid.txt``) and its key. An edge cloned from an image, or whose
folders and key were copied to a second host, has both: the receiver would take the
copy's deletions (of files it compacted) for the original's, remove the original's
files from the storage, and the loader its rows; the original, whose state still calls
them synced, would never ship them again. Nothing in HELLO tells the two apart.

So the receiver hands each sender a **lease** in every session (protocol version 2:
LEASE, LEASE_GRANT, right after WELCOME), and the sender keeps the latest one in its
state for this receiver. A lease is ``<n>-<nonce>-<tag>``: its number, a random nonce,
and an HMAC of the sender's UUID, the number and the nonce under this storage's key
(``<schema dir>/sync/lease.key``), so that only this receiver makes leases and any of
them is checked without a list. The receiver keeps, per sender, the lease it last
granted and the host that took it (``<schema dir>/sync/senders/<uuid>/lease.json``).

* A sender presents the lease it holds; the receiver grants the next one (``n + 1``,
  a new nonce) and records it once the sender's next frame arrives, which the sender
  sends only after it recorded the grant durably. A session cut in between leaves
  either side one lease behind, never out of step: the receiver takes its recorded
  lease, and a newer one it tagged (its own record may be behind: a restore, a cut
  before it recorded), and grants the next.
* A copy holds the lease the original held when it was copied. Once the original took
  its next one, the copy presents an older lease (or, of two grants of one number, the
  one not recorded): refused with ERROR ``identity`` at its first frame, before it can
  ship, delete or even send its schema, with one line naming the UUID, the host that
  holds the lease and this one. Of two hosts copied from each other, the first to
  connect afterwards keeps the identity; the refused one takes its own
  (``sealsync identity new``), or, if the operator knows it alone acts as this sender
  (its state restored from an older backup), takes the lease back (``sealsync
  identity reclaim``, LEASE's ``reclaim``; the other host is refused from then on).
* A sender without a record here (new, or of an earlier release) is granted a first
  lease whatever it presents. A sender that once held a lease and comes back speaking
  protocol version 1 cannot show it: it is refused (ERROR ``auth``, "upgrade it").

The record also keeps the name each sender's HELLO gave: a device conflict names its
owner by it (receiver/load/owners.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from receiver.folders import make_dirs
from sealsync import durable
from sealsync.errors import SealsyncError
from sealsync.names import check_sender_uuid
from sealsync.printable import printable
from sealsync.protocol import LEASE_RE

log = logging.getLogger(f"sealsync.{__name__}")

KEY_FILE = "lease.key"
RECORD_FILE = "lease.json"


class Refused(SealsyncError):
    """Another host holds this sender's lease (ERROR ``identity``); the message names
    the sender, both hosts and what the refused host's operator does."""


@dataclass(frozen=True)
class Holder:
    """The lease a sender was last granted here, and who took it."""

    number: int
    nonce: str
    name: str
    """The name its HELLO gave."""
    host: str
    """Where it said it runs (LEASE's ``host``: host name and schema dir)."""
    address: str
    since: str

    @property
    def lease(self) -> tuple[int, str]:
        return self.number, self.nonce

    def describe(self) -> str:
        return f"'{printable(self.host)}' at {self.address} (since {self.since})"


@dataclass(frozen=True)
class Grant:
    """A lease offered in one session, recorded when the sender's next frame comes."""

    uuid: str
    seen: tuple[int, str] | None
    """The record when the lease was offered (None: no record)."""
    number: int
    nonce: str
    token: str
    name: str
    host: str
    address: str


class Leases:
    """The leases of one receiver's senders; shared by its sessions, thread-safe."""

    def __init__(self, schema_dir: Path) -> None:
        self.folder = Path(schema_dir) / "sync"
        self._lock = threading.Lock()
        self._key: bytes | None = None

    # --- files --------------------------------------------------------------------

    def _record_path(self, uuid: str) -> Path:
        return self.folder / "senders" / check_sender_uuid(uuid) / RECORD_FILE

    def _storage_key(self) -> bytes:
        """This storage's lease key, made once (never replaced: every lease outstanding
        is tagged with it)."""
        if self._key is None:
            path = self.folder / KEY_FILE
            if not path.exists():
                make_dirs(self.folder)
                try:
                    durable.atomic_write(path, secrets.token_hex(32) + "\n", 0o600, replace=False)
                except FileExistsError:
                    pass
            text = path.read_text(encoding="ascii").strip()
            if len(text) != 64:
                raise SealsyncError(f"{path} is damaged: restore it from a backup of the storage")
            self._key = bytes.fromhex(text)
        return self._key

    def holder(self, uuid: str) -> Holder | None:
        """The sender's record, None without one."""
        path = self._record_path(uuid)
        try:
            body = json.loads(path.read_bytes())
            return Holder(
                int(body["number"]),
                str(body["nonce"]),
                str(body["name"]),
                str(body["host"]),
                str(body["address"]),
                str(body["since"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SealsyncError(f"{path} cannot be read ({exc}): restore or remove it") from None

    def name_of(self, uuid: str) -> str | None:
        """The name the sender's HELLO gave, as recorded with its lease."""
        try:
            holder = self.holder(uuid)
        except SealsyncError:
            return None
        return holder.name if holder is not None else None

    # --- leases -------------------------------------------------------------------

    def _tag(self, uuid: str, number: int, nonce: str) -> str:
        message = f"{uuid}:{number}:{nonce}".encode()
        return hmac.new(self._storage_key(), message, hashlib.sha256).hexdigest()[:32]

    def _parse(self, uuid: str, token: str) -> tuple[int, str] | None:
        """(number, nonce) of a lease this storage made for ``uuid``; None otherwise."""
        if not LEASE_RE.match(token):
            return None
        number, nonce, tag = token.split("-")
        if not hmac.compare_digest(tag, self._tag(uuid, int(number), nonce)):
            return None
        return int(number), nonce

    def offer(
        self, uuid: str, token: str, reclaim: bool, name: str, host: str, address: str
    ) -> Grant:
        """The next lease for a sender presenting ``token``; Refused when another host
        holds a newer one (see the module)."""
        with self._lock:
            holder = self.holder(uuid)
            presented = self._parse(uuid, token) if token else None
            if holder is not None and not reclaim:
                if (
                    presented is None
                    or presented[0] < holder.number
                    or (presented[0] == holder.number and presented[1] != holder.nonce)
                ):
                    raise Refused(_refusal(uuid, holder, presented is not None, host, address))
            if reclaim and holder is not None:
                log.warning(
                    "sender %s: host '%s' at %s reclaimed its identity (sealsync identity "
                    "reclaim); %s held it and is refused from now on",
                    uuid,
                    printable(host),
                    address,
                    holder.describe(),
                )
            number = 1 + max(
                presented[0] if presented is not None else 0,
                holder.number if holder is not None else 0,
            )
            nonce = secrets.token_hex(8)
            token = f"{number}-{nonce}-{self._tag(uuid, number, nonce)}"
            seen = holder.lease if holder is not None else None
            return Grant(uuid, seen, number, nonce, token, name, host, address)

    def confirm(self, grant: Grant) -> None:
        """The sender holds ``grant`` now: record it, unless another host took a lease
        of this sender since it was offered (Refused then)."""
        with self._lock:
            holder = self.holder(grant.uuid)
            if (holder.lease if holder is not None else None) != grant.seen:
                assert holder is not None  # a record appears only here
                raise Refused(_refusal(grant.uuid, holder, True, grant.host, grant.address))
            body = {
                "number": grant.number,
                "nonce": grant.nonce,
                "name": grant.name,
                "host": grant.host,
                "address": grant.address,
                "since": datetime.now(UTC).replace(microsecond=0).isoformat(),
            }
            path = self._record_path(grant.uuid)
            make_dirs(path.parent)
            durable.atomic_write(path, json.dumps(body) + "\n")

    def held(self, uuid: str) -> bool:
        """The sender was granted a lease here (a session of protocol version 1 from it
        cannot show it holds it)."""
        return self._record_path(uuid).exists()


def _refusal(uuid: str, holder: Holder, leased: bool, host: str, address: str) -> str:
    what = "an older lease of it" if leased else "no lease of it this receiver granted"
    return (
        f"sender {uuid} is in use by another host: {holder.describe()} holds its lease, "
        f"and this host '{printable(host)}' at {address} holds {what} (a cloned image or "
        "copied state, or this host's state restored from an older backup?)"
    )
