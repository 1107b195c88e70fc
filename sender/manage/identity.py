"""The sender's UUID: its identity, and its ownership of devices on every receiver;
and the host name its HELLO gives, for the receiver's logs.

Regenerating it would make a sender a stranger to the receivers that know it (its
devices would then conflict with itself), so the file is created exactly once and a
damaged file stops the sender with a clear message instead of being replaced.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from sealsync import durable
from sealsync.errors import LocalIOError, SealsyncError
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
