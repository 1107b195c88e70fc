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

**The receiver remembers its storage.** A marker travels with its folder: a disk
replaced by an empty one, or an empty folder left where the storage was, carries none,
and ``serve --init`` would mark it as a new storage without a word. So the receiver
records the storage it serves, and in which folders, in a file outside the storage
(``sealsync-served-<hash of the schema dir's path>.json`` in ``state_dir``, by default
the folder of ``authorized_keys``: configuration, which a lost or restored storage does
not take along). A recorded folder that holds no storage, or another one, is refused
by ``serve``, ``serve --init`` and ``check`` ("storage gone: ..."), unless the operator
names the recorded storage's id: ``--replaces ID`` says that storage is gone for good.

**Storages from before the marker.** A folder that holds the receiver's own state
(the schema dir's ``sync/``, a data dir's ``sync-receiver/``) with anything besides
the lock file in it has been served before: ``serve`` marks it once, with an INFO
log line, and goes on. A folder holding the lock file alone (what an older receiver
wrote onto an unmounted mount point) is not taken for a storage: it is refused like
an empty one, and ``serve --init`` marks it if it is really the storage.
"""

from __future__ import annotations

import hashlib
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
class Record:
    """What the receiver recorded, outside its storage, about the storage it serves."""

    path: Path
    storage: str
    folders: frozenset[str]
    """The absolute paths of the folders that held it (schema dir and data dirs)."""


RECORD_PREFIX = "sealsync-served-"


def record_path(config: ReceiverConfig) -> Path:
    """The record of this receiver's storage: one per schema dir (two receivers may
    share a configuration folder), named by a digest of its path."""
    digest = hashlib.sha256(os.path.abspath(config.schema_dir).encode()).hexdigest()[:16]
    return config.record_dir / f"{RECORD_PREFIX}{digest}.json"


def read_record(config: ReceiverConfig) -> Record | None:
    """The record, None when there is none (a receiver from before records, or a
    configuration set up anew); ConfigError if it cannot be read or is damaged."""
    path = record_path(config)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(
            f"{config.source}: cannot read {path} (the storage this receiver serves): "
            f"{exc.strerror or exc}: give the receiver's user read access to it"
        ) from None
    try:
        body = json.loads(raw)
        folders = body["folders"]
        if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
            raise ValueError("folders")
        return Record(path, str(uuid.UUID(body["storage"])), frozenset(folders))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ConfigError(
            f"{config.source}: {path} is damaged (the storage this receiver serves): restore "
            "it, or remove it once the configured folders hold the right storage"
        ) from None


def _paths(config: ReceiverConfig) -> list[str]:
    return [os.path.abspath(f.path) for f in folders(config)]


def write_record(config: ReceiverConfig, storage: str) -> None:
    """Record ``storage`` and the configured folders, if the record says otherwise; a
    record that cannot be written is one warning (the storage is served all the same)."""
    try:
        known = read_record(config)
    except ConfigError:
        known = None
    paths = _paths(config)
    if known is not None and known.storage == storage and known.folders == frozenset(paths):
        return
    body = {
        "sealsync": "receiver storage record",
        "storage": storage,
        "folders": paths,
        "recorded": datetime.now(UTC).replace(microsecond=0).isoformat(),
    }
    path = record_path(config)
    try:
        durable.atomic_write(path, json.dumps(body, indent=1) + "\n", 0o644)
    except OSError as exc:
        log.warning(
            "cannot record the storage this receiver serves in %s: %s: a storage replaced "
            "by an empty folder cannot be told from a new one; set [receiver] state_dir "
            "to a folder the receiver may write, outside its storage",
            path,
            exc.strerror or exc,
        )
        return
    log.info("storage %s recorded in %s", storage, path)


def _against_record(
    config: ReceiverConfig,
    found: list[tuple[Folder, dict[str, str] | None]],
    replaces: str | None,
) -> None:
    """ConfigError ("storage gone: ...") for a recorded folder that holds no storage or
    another one, unless ``replaces`` names the recorded storage."""
    source = config.source
    record = read_record(config)
    if replaces is not None:
        if record is None:
            raise ConfigError(
                f"--replaces {replaces}: this receiver has no record of a storage "
                f"({record_path(config)} does not exist): leave --replaces out"
            )
        if replaces != record.storage:
            raise ConfigError(
                f"--replaces {replaces}: the storage this receiver served is {record.storage} "
                f"({record.path}): name that one, or leave --replaces out"
            )
        return
    if record is None:
        return
    for folder, marker in found:
        if os.path.abspath(folder.path) not in record.folders or not folder.path.is_dir():
            continue  # a new folder, or a missing one (the config's own check names it)
        if marker is None:
            raise ConfigError(
                f"{source}: [receiver] {folder.key}: storage gone: {folder.path} holds no "
                f"sealsync storage (no {MARKER}), but this receiver served storage "
                f"{record.storage} there ({record.path}): a disk not mounted, or the folder "
                "replaced? mount it back (nothing was written); if that storage is lost for "
                f"good, start a new one with `sealsync serve --init --replaces {record.storage}`"
            )
        if marker["storage"] != record.storage:
            raise ConfigError(
                f"{source}: [receiver] {folder.key}: storage gone: {folder.path} holds storage "
                f"{marker['storage']}, but this receiver served storage {record.storage} there "
                f"({record.path}): the wrong disk mounted? mount the right one; to serve "
                f"storage {marker['storage']} from now on, start with `sealsync serve "
                f"--replaces {record.storage}`"
            )


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


def inspect_storage(
    config: ReceiverConfig, *, init: bool = False, replaces: str | None = None
) -> Verdict:
    """The storage's id and the folders to mark; ConfigError (one line: the folder, the
    likely cause, the fix) for a folder that is not this receiver's storage, or that
    held the recorded storage and holds another one or none now (unless ``replaces``
    names the recorded one). Writes nothing. ``init`` (``serve --init``): unmarked
    folders are to be marked as well."""
    source = config.source
    found: list[tuple[Folder, dict[str, str] | None]] = [
        (f, _read(f, source)) for f in folders(config)
    ]
    _against_record(config, found, replaces)
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


def require_storage(
    config: ReceiverConfig, *, init: bool = False, replaces: str | None = None
) -> str:
    """Refuse a storage that is not this receiver's (ConfigError, nothing written), then
    mark the folders served before markers existed (and, with ``init``, the new ones)
    and record the storage outside it; returns the storage id. Called by ``serve``
    before anything else touches a folder."""
    verdict = inspect_storage(config, init=init, replaces=replaces)
    if replaces is not None:
        log.warning(
            "storage %s: %s (--replaces)",
            replaces,
            "folders set up anew in it"
            if verdict.storage == replaces
            else f"replaced by storage {verdict.storage}",
        )
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
    write_record(config, verdict.storage)
    return verdict.storage


def marker_storage(path: Path) -> str | None:
    """The storage id in the marker at the top of ``path``; None when it has none or
    it does not read (the running receiver's look, :mod:`receiver.liveness`)."""
    try:
        body = json.loads((Path(path) / MARKER).read_bytes())
        return str(uuid.UUID(body["storage"]))
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
