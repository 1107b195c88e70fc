"""Which sender owns a data dir's state: ``<data dir>/sync-sender/owner.txt``.

A sender's state about a data dir (what it shipped to each receiver, snapshots,
locks) lives in the data dir, per receiver; its identity (the UUID) lives in its
schema dir. Two configs on one data dir with two schema dirs (one edge configured
twice, two UUIDs) would share that state: the twin ships, under its UUID, files the
original then believes shipped and never ships under its own. So the first sender to
write a data dir's state records its UUID there, and another one is refused with a
configuration error (exit 2) that says whose the data dir is and how to fix it.

State written before this file existed has no owner: the next sender to run claims
it (logged); a check or a dry run only reads.

A copy of a sender's host (a cloned image, copied folders) carries this file too: if
its UUID file was removed or replaced to make it a sender of its own, it is refused
the same way, and the line names both causes and fixes, the copy's being ``sealsync
identity new`` (a UUID and state of its own, :mod:`sender.manage.new_identity`).
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

from sealsync import durable
from sealsync.errors import ConfigError, LocalIOError
from sender.manage.identity import uuid_path
from sender.manage.layout import SENDER_FOLDER

log = logging.getLogger(f"sealsync.{__name__}")

OWNER_FILE = "owner.txt"


def owner_path(data_dir: Path) -> Path:
    return Path(data_dir) / SENDER_FOLDER / OWNER_FILE


def recorded_owner(data_dir: Path) -> str | None:
    """The UUID recorded as the owner of ``data_dir``'s state; None if none is."""
    path = owner_path(data_dir)
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LocalIOError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise ConfigError(
            f"{path} is damaged (not a sender UUID): restore it from a backup, or write "
            "into it the UUID of the sender that syncs this data dir (its schema_dir's "
            "sync/uuid.txt)"
        ) from None


def _own_uuid(schema_dir: Path) -> str | None:
    """This config's sender UUID if it has one yet (read only: never created here)."""
    try:
        return str(uuid.UUID(uuid_path(schema_dir).read_text(encoding="ascii").strip()))
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # none yet, or damaged: the round's own read says so


def owner_problem(source: str, index: int, data_dir: Path, schema_dir: Path) -> str | None:
    """Why this config may not sync ``data_dir`` (another sender owns its state), or None.

    Reads only. A config whose sender has no UUID yet is a new sender: refused too
    when the data dir is already owned.
    """
    owner = recorded_owner(data_dir)
    if owner is None:
        return None
    own = _own_uuid(schema_dir)
    if own == owner:
        return None
    who = f"sender {own}" if own is not None else "a new sender (no UUID yet)"
    return (
        f"{source}: [sender] data_dirs[{index}]: {data_dir} is synced by another sender "
        f"(UUID {owner}, recorded in {owner_path(data_dir)}), this config is {who} "
        f"(schema_dir {schema_dir}): one data dir has one sender. A second config for "
        "this instance? give it the schema_dir of the config that syncs it (one config "
        "per instance, one [[receiver]] table per receiver). A copy of that sender's "
        "host (a cloned image or copied folders, its uuid.txt removed or replaced)? give "
        f"it an identity of its own with `sealsync identity new --config {source}`"
    )


def _holds_state(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(e.name != OWNER_FILE for e in entries)
    except OSError:
        return False


def claim(data_dir: Path, own_uuid: str) -> None:
    """Record ``own_uuid`` as the owner of ``data_dir``'s state if nobody is recorded yet
    (state from before this file is claimed, logged); ConfigError if another is."""
    owner = recorded_owner(data_dir)
    if owner == own_uuid:
        return
    if owner is not None:
        raise ConfigError(
            f"{data_dir} is synced by another sender (UUID {owner}, recorded in "
            f"{owner_path(data_dir)}), not by {own_uuid}: one data dir has one sender"
        )
    folder = Path(data_dir) / SENDER_FOLDER
    earlier = _holds_state(folder)
    try:
        folder.mkdir(exist_ok=True)
        durable.atomic_write(owner_path(data_dir), f"{own_uuid}\n", replace=False)
    except FileExistsError:  # another sender claimed it meanwhile: look again
        if recorded_owner(data_dir) != own_uuid:
            return claim(data_dir, own_uuid)
        return
    except OSError as exc:
        raise LocalIOError(
            f"cannot create {owner_path(data_dir)} (the data dir's owner): {exc.strerror or exc}"
        ) from None
    if earlier:
        log.info(
            "%s: its state from before owners were recorded is now sender %s's (%s)",
            data_dir,
            own_uuid,
            owner_path(data_dir),
        )
