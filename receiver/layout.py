"""Where the receiver keeps a sender's round in flight (docs/design.md §2.3, §4.2).

One folder per sender and receiver data dir, ``<data dir>/sync-receiver/<ip>_<uuid>/``,
named as IoTDB's old sync tool named it, so that an operator who knows that tool finds
it. All path building for it lives here so that no other module joins these paths by
hand, and every name reaches a path only through ``names.check_data_name``.

The ``sync.log`` code is shared with the sender (same lines, same parser); this is the
one module on the receiver side that imports it, so moving it touches one line.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from sealsync.errors import BadName
from sealsync.names import LOAD_LOG, RECEIVER_FOLDER, check_data_name, check_sender_uuid
from sealsync.synclog import SyncLog, SyncLogState, parse_sync_log, read_sync_log

__all__ = [
    "RECEIVER_FOLDER",
    "SenderFolder",
    "SyncLog",
    "SyncLogState",
    "check_sender_uuid",
    "parse_sync_log",
    "read_sync_log",
    "sender_folders",
]

log = logging.getLogger(f"sealsync.{__name__}")

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _folder_ip(ip: str) -> str:
    """The peer address as one folder-name component (IPv6 colons become dashes)."""
    name = ip.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = name.replace(":", "-")
    shown = ip[:80].encode("unicode_escape").decode("ascii")
    if not name or name in (".", "..") or any(ch in name for ch in "/\\"):
        raise BadName(f"sender address unfit for a folder name: {shown}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise BadName(f"sender address with a control character: {shown}")
    return name


@dataclass(frozen=True)
class SenderFolder:
    """One sender's round state in one receiver data dir."""

    data_dir: Path
    ip: str
    uuid: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        check_sender_uuid(self.uuid)
        _folder_ip(self.ip)

    # Cached: the instance is frozen, and staged() asks for them for every file.
    @functools.cached_property
    def root(self) -> Path:
        return self.data_dir / RECEIVER_FOLDER / f"{_folder_ip(self.ip)}_{self.uuid}"

    @property
    def sync_log(self) -> Path:
        return self.root / "sync.log"

    @property
    def load_log(self) -> Path:
        return self.root / LOAD_LOG

    @property
    def sync_end(self) -> Path:
        return self.root / "sync.end"

    @functools.cached_property
    def data(self) -> Path:
        """Verified files waiting to load, at their relative names."""
        return self.root / "data"

    @functools.cached_property
    def _data_name(self) -> str:
        return os.fspath(self.data)

    def staged(self, name: str) -> Path:
        # a checked name has no empty, '.' or '..' component: a child of ``data`` as is
        return self.data / check_data_name(name)

    def staged_name(self, name: str) -> str:
        """``staged`` as a string, for the session's path of every file: building the
        Path and reading it back cost the session thread more than the join."""
        return f"{self._data_name}/{check_data_name(name)}"


def partial_dir(data_dir: Path, uuid: str) -> Path:
    """Where sender ``uuid`` keeps partial uploads in ``data_dir``: one folder per sender,
    whatever address it connects from, so that limits see all of them."""
    return Path(data_dir) / RECEIVER_FOLDER / check_sender_uuid(uuid) / "partial"


def partial_dirs(data_dirs: list[Path]) -> list[tuple[Path, str]]:
    """(data dir, uuid) of every sender folder of partial uploads on disk."""
    found = []
    for data_dir in data_dirs:
        try:
            entries = sorted(os.scandir(Path(data_dir) / RECEIVER_FOLDER), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for entry in entries:
            if _CANONICAL_UUID.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                found.append((Path(data_dir), entry.name))
    return found


def sender_folders(data_dirs: list[Path]) -> list[SenderFolder]:
    """Every sender folder on disk, for recovery at service start.

    A folder whose name is not ``<ip>_<uuid>`` was not made by us; it is reported and
    left alone rather than guessed at.
    """
    found = []
    for data_dir in data_dirs:
        parent = Path(data_dir) / RECEIVER_FOLDER
        try:
            entries = sorted(parent.iterdir())
        except FileNotFoundError:
            continue
        for entry in entries:
            if _CANONICAL_UUID.fullmatch(entry.name):
                continue  # a sender's own folder (partial uploads), not a round folder
            if entry.is_symlink():
                log.warning("%s: a symbolic link, not a sender folder: left alone", entry)
                continue
            if not entry.is_dir():
                continue
            ip, sep, uuid = entry.name.rpartition("_")
            try:
                if not sep:
                    raise BadName("no '_' between address and uuid")
                folder = SenderFolder(Path(data_dir), ip, uuid)
            except BadName as exc:
                log.warning("%s: not a sender folder, left alone: %s", entry, exc)
                continue
            if folder.root != entry:
                log.warning("%s: not a sender folder name, left alone", entry)
                continue
            found.append(folder)
    return found
