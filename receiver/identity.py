"""The storage identity: a marker in the schema dir and each data dir of a receiver.

An existing folder is not enough to serve it: an unmounted disk leaves its mount
point, an empty folder on the root file system, and a typo can name another existing
folder. A receiver that served such a folder would write its lock and then every
sender's files there, and greet senders as if it had lost everything. So
``sealsync serve --init`` writes ``sealsync-storage.json`` at the top of the schema
dir and of each data dir, and ``serve`` and ``check`` refuse a folder without it
(configuration error, exit 2, one line; nothing is written: the check runs before the
lock files are touched).

The marker names the folder's role and the storage it belongs to (one id per
receiver, the schema dir's): a data dir of another receiver's storage is refused
too. ``--init`` marks only folders without a marker; it never replaces one.

**Storages from before the marker.** A folder that holds the receiver's own state
(the schema dir's ``sync/``, a data dir's ``sync-receiver/``) with anything besides
the lock file in it has been served before: ``serve`` marks it once, with an INFO
log line, and goes on. A folder holding the lock file alone (what an older receiver
wrote onto an unmounted mount point) is not taken for a storage: it is refused like
an empty one, and ``serve --init`` marks it if it is really the storage.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sealsync import durable
from sealsync.config import ReceiverConfig
from sealsync.errors import ConfigError, LocalIOError
from sealsync.names import RECEIVER_FOLDER

log = logging.getLogger(f"sealsync.{__name__}")

MARKER = "sealsync-storage.json"
SCHEMA_STATE = "sync"
"""The receiver's state folder in its schema dir (keys, owners, schemas, the lock)."""
LOCK_NAME = "receiver.lock"
SCHEMA, DATA = "schema dir", "data dir"


@dataclass(frozen=True)
class Folder:
    """One folder of a receiver's storage, as the config names it."""

    key: str
    """The config key that names it: ``schema_dir`` or ``data_dirs[i]``."""
    path: Path
    role: str

    @property
    def marker(self) -> Path:
        return self.path / MARKER

    @property
    def state(self) -> Path:
        return self.path / (SCHEMA_STATE if self.role == SCHEMA else RECEIVER_FOLDER)


@dataclass(frozen=True)
class Verdict:
    """What :func:`inspect_storage` found; ``upgrade``: folders served before markers
    existed, to be marked (and logged) once the whole storage is known sound."""

    storage: str
    upgrade: list[Folder]


def folders(config: ReceiverConfig) -> list[Folder]:
    return [
        Folder("schema_dir", Path(config.schema_dir), SCHEMA),
        *(Folder(f"data_dirs[{i}]", Path(d), DATA) for i, d in enumerate(config.data_dirs)),
    ]


def _read(folder: Folder, source: str) -> dict[str, str] | None:
    """The folder's marker, None if it has none; ConfigError if it is not one of ours."""
    try:
        raw = folder.marker.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(
            f"{source}: [receiver] {folder.key}: cannot read {folder.marker}: {exc.strerror or exc}"
        ) from None
    try:
        body = json.loads(raw)
        if not isinstance(body, dict) or not all(
            isinstance(body.get(k), str) for k in ("role", "storage")
        ):
            raise ValueError("not a marker")
        str(uuid.UUID(body["storage"]))
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(
            f"{source}: [receiver] {folder.key}: {folder.marker} is damaged: restore it from "
            "a backup, or remove it and run `sealsync serve --init` if this is the storage"
        ) from None
    return {"role": body["role"], "storage": body["storage"]}


def _served_before(folder: Folder) -> bool:
    """The folder holds this receiver's state from before markers (more than a lock)."""
    try:
        with os.scandir(folder.state) as entries:
            return any(entry.name != LOCK_NAME for entry in entries)
    except OSError:
        return False


def inspect_storage(config: ReceiverConfig, *, init: bool = False) -> Verdict:
    """The storage's id and the folders to mark; ConfigError (one line: the folder, the
    likely cause, the fix) for a folder that is not this receiver's storage. Writes
    nothing. ``init`` (``serve --init``): unmarked folders are to be marked as well."""
    source = config.source
    found: list[tuple[Folder, dict[str, str] | None]] = [
        (f, _read(f, source)) for f in folders(config)
    ]
    for folder, marker in found:
        if marker is not None and marker["role"] != folder.role:
            raise ConfigError(
                f"{source}: [receiver] {folder.key}: {folder.path} is a receiver's "
                f"{marker['role']}, not a {folder.role} ({folder.marker}): are schema_dir "
                "and data_dirs swapped? fix the config"
            )
    schema_marker = found[0][1]
    storage = schema_marker["storage"] if schema_marker is not None else str(uuid.uuid4())
    upgrade: list[Folder] = []
    for folder, marker in found:
        if marker is None:
            if not init and not folder.path.is_dir():
                continue  # a missing folder: the config's own check names it
            if init or _served_before(folder):
                upgrade.append(folder)
                continue
            raise ConfigError(
                f"{source}: [receiver] {folder.key}: {folder.path} is not a sealsync storage "
                f"(no {MARKER}): a disk not mounted, or a wrong path? mount it or fix the "
                "path; for a new storage run `sealsync serve --init` once"
            )
        if marker["storage"] != storage:
            raise ConfigError(
                f"{source}: [receiver] {folder.key}: {folder.path} belongs to another "
                f"receiver's storage (storage {marker['storage']}, this schema dir's is "
                f"{storage}): fix the path; to move it to this receiver on purpose, remove "
                f"{folder.marker} and run `sealsync serve --init`"
            )
    return Verdict(storage, upgrade)


def _write(folder: Folder, storage: str) -> None:
    body = {
        "sealsync": "receiver storage",
        "role": folder.role,
        "storage": storage,
        "created": datetime.now(UTC).replace(microsecond=0).isoformat(),
    }
    try:
        durable.atomic_write(folder.marker, json.dumps(body, indent=1) + "\n", replace=False)
    except FileExistsError:  # another start marked it meanwhile: its marker stands
        pass
    except OSError as exc:
        raise LocalIOError(
            f"cannot write the storage marker {folder.marker}: {exc.strerror or exc}"
        ) from None


def require_storage(config: ReceiverConfig, *, init: bool = False) -> str:
    """Refuse a storage that is not this receiver's (ConfigError, nothing written), then
    mark the folders served before markers existed (and, with ``init``, the new ones);
    returns the storage id. Called by ``serve`` before anything else touches a folder."""
    verdict = inspect_storage(config, init=init)
    for folder in verdict.upgrade:
        _write(folder, verdict.storage)
        if init and not _served_before(folder):
            log.info("%s: marked as this receiver's %s (%s)", folder.path, folder.role, MARKER)
        else:
            log.info(
                "%s: recognised as this receiver's %s by the state it holds (%s); marked with %s",
                folder.path,
                folder.role,
                folder.state,
                MARKER,
            )
    return verdict.storage
