"""Where the sender keeps its state (docs/design.md §2.2).

The folder names are those of IoTDB's old sync tool (``<host>_<port>``), so that an
operator who knows that tool finds everything where they expect it; all path building
lives here so that no other module joins state paths by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sealsync.errors import ConfigError

SENDER_FOLDER = "sync-sender"
SCHEMA_SYNC_FOLDER = "sync"


def receiver_key(host: str, port: int) -> str:
    """``<host>_<port>``, safe as one folder name.

    An IPv6 address keeps its identity but loses its colons (``::1`` -> ``--1``) because
    a colon is awkward in folder names on some systems and tools; brackets around an
    IPv6 literal are dropped so ``[::1]`` and ``::1`` share one state folder.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"receiver port must be an integer from 1 to 65535, got {port!r}")
    if not isinstance(host, str):
        raise ConfigError(f"receiver host must be a string, got {host!r}")
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = name.replace(":", "-")
    shown = host.encode("unicode_escape").decode("ascii")
    if not name or name in (".", ".."):
        raise ConfigError(f"receiver host is empty or not a host name: {shown!r}")
    if any(ch in name for ch in "/\\") or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise ConfigError(f"receiver host with a slash or control character: {shown!r}")
    return f"{name}_{port}"


@dataclass(frozen=True)
class SenderPaths:
    """The state of one data dir towards one receiver."""

    data_dir: Path
    host: str
    port: int

    @property
    def folder(self) -> Path:
        return Path(self.data_dir) / SENDER_FOLDER / receiver_key(self.host, self.port)

    @property
    def last_local_files(self) -> Path:
        return self.folder / "last_local_files.txt"

    @property
    def current_local_files(self) -> Path:
        return self.folder / "current_local_files.txt"

    @property
    def snapshot(self) -> Path:
        return self.folder / "snapshot"

    @property
    def sync_log(self) -> Path:
        return self.folder / "sync.log"

    @property
    def shipped_mods(self) -> Path:
        """``(size, mtime_ns)`` of the ``X.mods`` each synced file last shipped with
        (:mod:`.shipped_mods`): a ``.mods`` changed since then ships its file again."""
        return self.folder / "shipped_mods.txt"

    @property
    def snapshot_mods(self) -> Path:
        """The ``.mods`` identities of this round's snapshot, until recovery folds them
        into ``shipped_mods.txt`` (:mod:`.shipped_mods`)."""
        return self.folder / "snapshot_mods.txt"

    @property
    def scan_cache(self) -> Path:
        """Folder listings of the last scan (:mod:`.scan_cache`): a hint, never state."""
        return self.folder / "scan_cache"

    @property
    def idle_mark(self) -> Path:
        """What the last round with nothing to do saw (:mod:`.idle_mark`): a hint."""
        return self.folder / "idle_mark"


@dataclass(frozen=True)
class SchemaPaths:
    """Per-receiver state that is shared by all data dirs, so it lives in the schema dir."""

    schema_dir: Path
    host: str
    port: int

    @property
    def folder(self) -> Path:
        return Path(self.schema_dir) / SCHEMA_SYNC_FOLDER / receiver_key(self.host, self.port)

    @property
    def lock(self) -> Path:
        return self.folder / "sync.lock"

    @property
    def schema_pos(self) -> Path:
        return self.folder / "sync_schema_pos"

    @property
    def schema_log(self) -> Path:
        return Path(self.schema_dir) / "mlog.txt"

    @property
    def lease(self) -> Path:
        """The identity lease this receiver granted last (:mod:`.identity`)."""
        return self.folder / "lease.json"

    @property
    def history(self) -> Path:
        """One JSON line per attempt to sync with this receiver (:mod:`.history`)."""
        return self.folder / "rounds.jsonl"

    @property
    def history_lock(self) -> Path:
        """Taken briefly around each change of ``rounds.jsonl``: a run refused by
        ``sync.lock`` still records its attempt while the holder may record its own."""
        return self.folder / "rounds.lock"


INSTANCE_SPACES = ("sequence", "unsequence")
"""The folders of a database instance's data dir that hold the sealed files."""


def data_dir_problem(data_dir: Path) -> str | None:
    """Why ``data_dir`` cannot be an instance's data folder, or None.

    A data dir is scanned under ``sequence/`` and ``unsequence/`` only, so a folder
    that holds other things but neither of them (the instance root, or the install
    folder, named by mistake) would ship nothing, round after round, without a word.
    An empty folder is a fresh instance that has not written a file yet, and fine.
    """
    try:
        entries = {e.name for e in os.scandir(data_dir)} - {SENDER_FOLDER}
    except OSError:
        return None  # the round's scan reports an unreadable folder with its reason
    if not entries or entries & set(INSTANCE_SPACES):
        return None
    hint = _instance_below(Path(data_dir))
    fix = f"did you mean {hint}?" if hint else "name the folder that holds them"
    return f"{data_dir} holds neither sequence/ nor unsequence/, so nothing in it would ship: {fix}"


def _instance_below(top: Path, depth: int = 4, budget: int = 2000) -> Path | None:
    """The first folder under ``top`` (breadth first, a few levels) holding an instance's
    ``sequence/`` or ``unsequence/``; IoTDB keeps them at ``data/datanode/data``."""
    level = [top]
    for _ in range(depth):
        following: list[Path] = []
        for folder in level:
            try:
                children = sorted(
                    e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)
                )
            except OSError:
                continue
            budget -= len(children)
            if folder != top and set(children) & set(INSTANCE_SPACES):
                return folder
            following.extend(folder / c for c in children if c != SENDER_FOLDER)
            if budget <= 0:
                return None
        level = following
    return None
