"""``sealsync identity``: a sender's identity, and the operator's two answers to a
receiver that says another host acts as this sender (docs/design.md §5.1).

* ``new``: this host is a copy (a cloned image, copied folders and key). It gets a UUID
  of its own and its state towards every receiver is reset, here only: its next send
  ships its files anew under the new UUID. The receiver is not contacted, so nothing
  of the other host (its files, its rows in the table) is touched; the files this copy
  took along are shipped again as its own.
* ``reclaim``: this host alone acts as this sender (its state was restored from an
  older backup, or the copy that connected first was given its own identity): its
  next send takes the lease back on every receiver, and another host still acting as
  this sender is refused from then on.

Both take the lock of every receiver of the config (exit 75 while a send runs), and
neither changes the data files.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from sealsync import durable
from sealsync.config import SenderConfig
from sealsync.errors import LocalIOError, SealsyncError
from sender.lock import receiver_lock
from sender.manage.data_owner import OWNER_FILE, owner_path
from sender.manage.identity import HeldLease, read_lease, uuid_path, write_lease
from sender.manage.layout import SENDER_FOLDER, SchemaPaths


@dataclass(frozen=True)
class Identity:
    """What ``sealsync identity`` shows: the UUID and, per receiver, the lease held."""

    uuid: str | None
    leases: dict[str, HeldLease]


@contextmanager
def _every_lock(config: SenderConfig) -> Iterator[None]:
    with ExitStack() as stack:
        for receiver in config.receivers:
            stack.enter_context(receiver_lock(config.schema_dir, receiver.host, receiver.port))
        yield


def _current_uuid(schema_dir: Path) -> str | None:
    try:
        return str(uuid.UUID(uuid_path(schema_dir).read_text(encoding="ascii").strip()))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def show(config: SenderConfig) -> Identity:
    """The identity as it stands (reads only)."""
    leases = {
        r.name: read_lease(SchemaPaths(config.schema_dir, r.host, r.port).lease)
        for r in config.receivers
    }
    return Identity(_current_uuid(config.schema_dir), leases)


def new_identity(config: SenderConfig) -> tuple[str | None, str]:
    """A new UUID for this host and its state reset (see the module); (old, new)."""
    with _every_lock(config):
        old = _current_uuid(config.schema_dir)
        new = str(uuid.uuid4())
        try:
            for data_dir in config.data_dirs:
                _reset_data_dir(Path(data_dir), new)
            for receiver in config.receivers:
                paths = SchemaPaths(config.schema_dir, receiver.host, receiver.port)
                for state in (paths.lease, paths.schema_pos):
                    durable.remove(state)  # the receiver holds nothing of the new UUID yet
            durable.atomic_write(uuid_path(config.schema_dir), f"{new}\n")
        except OSError as exc:
            raise LocalIOError(
                f"cannot give this sender a new identity: {exc.filename or ''}: "
                f"{exc.strerror or exc}; run it again once that is fixed"
            ) from None
        return old, new


def _reset_data_dir(data_dir: Path, new: str) -> None:
    """The data dir's sender state (per receiver: what was synced, snapshots, logs) goes,
    and its owner becomes ``new``. The data files are not touched: a snapshot holds
    hard links to them, and removing a link leaves the file."""
    folder = data_dir / SENDER_FOLDER
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.name == OWNER_FILE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    durable.atomic_write(owner_path(data_dir), f"{new}\n")


def reclaim(config: SenderConfig) -> str:
    """Mark every receiver's lease to be taken back at the next send; the UUID."""
    own = require_uuid(config)
    with _every_lock(config):
        for receiver in config.receivers:
            path = SchemaPaths(config.schema_dir, receiver.host, receiver.port).lease
            write_lease(path, HeldLease(read_lease(path).lease, reclaim=True))
        return own


def require_uuid(config: SenderConfig) -> str:
    """The UUID, or SealsyncError: this config never ran (nothing to reclaim)."""
    own = _current_uuid(config.schema_dir)
    if own is None:
        raise SealsyncError(
            f"{config.source}: this sender has no UUID yet ({uuid_path(config.schema_dir)}): "
            "nothing to reclaim"
        )
    return own
