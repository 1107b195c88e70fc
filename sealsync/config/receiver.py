"""The receiver's file: one ``[receiver]`` table (also built from a mapping by a host)."""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealsync.config.checks import need_authorized_keys, need_private_key, need_storage_dir
from sealsync.config.document import load_file, role_values
from sealsync.config.schema import (
    MAPPING_SOURCE,
    Choice,
    Flag,
    Host,
    Integer,
    ListenAddress,
    Networks,
    Number,
    PathList,
    PathValue,
    Reader,
    Startups,
    Table,
    Text,
    not_a_key,
    setting,
    type_name,
)
from sealsync.config.values import IPNetwork, MaxStartups, format_endpoint
from sealsync.durable import SYNC_METHODS, SYNCFS
from sealsync.errors import ConfigError

DEFAULT_ALLOW = ("127.0.0.0/8", "::1/128")
DEVICE_SCOPES = ("receiver", "sender")
"""``device_scope``: one owner per device on the receiver, or each sender's own ids."""
LEGACY_IOTDB_PREFIX = "iotdb_"

_log = logging.getLogger("sealsync.config")


@dataclass(frozen=True)
class StorageSpec:
    """``[receiver.storage]``: which storage backend holds verified files, and the
    backend's own keys, which the backend reads and checks itself
    (``receiver/storage/backends.py``): the core config knows no backend's keys."""

    kind: str = "directory"
    keys: Mapping[str, Any] = field(default_factory=dict)
    source: str = MAPPING_SOURCE
    base_dir: Path = Path(".")
    label: str = "[receiver.storage]"


class StorageTable(Reader):
    """``[receiver.storage]`` (a table with ``kind`` and the backend's keys), or the
    older ``storage = "<kind>"`` string."""

    def read(self, table: Table, key: str, value: object) -> StorageSpec:
        if isinstance(value, str):
            return StorageSpec(value, {}, table.source, table.base_dir, f"{table.label} {key}")
        if not isinstance(value, Mapping):
            raise table.error(
                key, f"must be a table ([receiver.storage] with kind = ...), got {type_name(value)}"
            )
        kind = value.get("kind")
        if not isinstance(kind, str) or not kind:
            raise table.error(f"{key}.kind", 'missing: say which storage, e.g. kind = "directory"')
        keys = {k: v for k, v in value.items() if k != "kind"}
        return StorageSpec(kind, keys, table.source, table.base_dir)


def _default_allow() -> list[IPNetwork]:
    return [ipaddress.ip_network(n) for n in DEFAULT_ALLOW]


@dataclass(frozen=True)
class ReceiverConfig:
    listen_host: str = field(metadata=setting(ListenAddress(), key="listen", part=0))
    listen_port: int = field(metadata=setting(ListenAddress(), key="listen", part=1))
    host_key: Path = field(metadata=setting(PathValue(check=need_private_key)))
    authorized_keys: Path = field(metadata=setting(PathValue(check=need_authorized_keys)))
    schema_dir: Path = field(metadata=setting(PathValue(check=need_storage_dir, create=True)))
    data_dirs: list[Path] = field(metadata=setting(PathList(check=need_storage_dir, create=True)))
    allow: list[IPNetwork] = field(default_factory=_default_allow, metadata=setting(Networks()))
    max_sessions: int = field(default=16, metadata=setting(Integer(1, 10000)))
    idle_timeout: float = field(default=120.0, metadata=setting(Number(0, 86400)))
    login_grace_time: float = field(default=20.0, metadata=setting(Number(0, 3600)))
    #: Seconds an unauthenticated connection may stay silent from accept, or without an
    #: authentication request from the end of its key exchange; then it is closed.
    preauth_timeout: float = field(default=5.0, metadata=setting(Number(0, 3600)))
    max_startups: MaxStartups = field(default=MaxStartups(10, 30, 60), metadata=setting(Startups()))
    per_source_max_startups: int = field(default=8, metadata=setting(Integer(1, 10000)))
    per_source_penalty_max: int = field(default=600, metadata=setting(Integer(0, 86400)))
    max_sessions_per_key: int = field(default=2, metadata=setting(Integer(1, 10000)))
    max_sessions_per_sender: int = field(default=2, metadata=setting(Integer(1, 10000)))
    max_uuids_per_key: int = field(default=1, metadata=setting(Integer(1, 1_000_000)))
    stall_timeout: float = field(default=30.0, metadata=setting(Number(0, 86400)))
    min_transfer_rate: int = field(default=1024, metadata=setting(Integer(1, 1 << 30)))
    max_partial_bytes: int = field(default=8 << 30, metadata=setting(Integer(1 << 20, 1 << 50)))
    #: Seconds a partial upload (a large file's stream cut mid-way) is kept to resume from.
    partial_max_age: float = field(default=86400.0, metadata=setting(Number(0, 365 * 86400)))
    sender_quota_bytes: int = field(default=0, metadata=setting(Integer(0, 1 << 60)))
    #: Bytes one sender's copy of its schema log may hold (0: no cap but the quota's).
    max_schema_bytes: int = field(default=1 << 30, metadata=setting(Integer(0, 1 << 60)))
    #: Bytes of schema log one session may append (the rest comes with the next one).
    max_schema_bytes_per_session: int = field(
        default=256 << 20, metadata=setting(Integer(1 << 20, 1 << 60))
    )
    #: Staging folders the rounds in flight of one sender may make at once.
    max_staging_folders: int = field(default=4096, metadata=setting(Integer(64, 1 << 30)))
    #: Devices one sender may own (each is a line of device_owner.log).
    max_devices_per_sender: int = field(default=100_000, metadata=setting(Integer(1, 1 << 40)))
    #: How a batch of received files is made durable: "syncfs" (one call per batch,
    #: where the kernel reports its errors) or "fsync" (file by file).
    sync_method: str = field(default=SYNCFS, metadata=setting(Choice(SYNC_METHODS)))
    #: ``host:port`` of the Prometheus ``/metrics`` endpoint (receiver/metrics.py).
    metrics_listen: tuple[str, int] | None = field(default=None, metadata=setting(ListenAddress()))
    #: Who may read ``/metrics``: CIDR networks of peer addresses (default: loopback).
    metrics_allow: list[IPNetwork] = field(
        default_factory=_default_allow, metadata=setting(Networks())
    )
    #: ``/metrics`` connections served at once; more are closed at once.
    metrics_max_connections: int = field(default=8, metadata=setting(Integer(1, 1000)))
    #: Seconds one ``/metrics`` connection may take in all, however slowly it sends.
    metrics_timeout: float = field(default=10.0, metadata=setting(Number(0, 3600)))
    #: Disk series labelled with each folder's path (default: its key, ``data_dirs[0]``).
    metrics_paths: bool = field(default=False, metadata=setting(Flag()))
    #: Log lines appended here too (``sealsync serve`` only; a host logs its own way).
    log_file: Path | None = field(default=None, metadata=setting(PathValue()))
    #: Seconds without a byte from a sender before a keepalive asks for one.
    client_alive_interval: float = field(default=15.0, metadata=setting(Number(0, 3600)))
    #: Unanswered keepalive intervals after which the connection is closed.
    client_alive_count_max: int = field(default=3, metadata=setting(Integer(1, 100)))
    #: Whose devices are whose: "receiver" (a device has one owner on this receiver,
    #: the first sender to ship it) or "sender" (each sender's device ids are its own,
    #: so sites may reuse paths; only with a storage that keeps senders apart).
    device_scope: str = field(default="receiver", metadata=setting(Choice(DEVICE_SCOPES)))
    #: A folder outside the storage where the receiver records which storage it
    #: serves (receiver/identity.py); default: the folder of ``authorized_keys``.
    state_dir: Path | None = field(default=None, metadata=setting(PathValue()))
    #: Where verified files go: ``[receiver.storage]`` with ``kind`` and that backend's
    #: own keys ("directory": the data dirs; "iotdb": the data dirs, and loaded into a
    #: running IoTDB: receiver/storage/iotdb.py).
    storage: StorageSpec = field(default_factory=StorageSpec, metadata=setting(StorageTable()))
    #: The flat iotdb_* keys: ``[receiver.storage]``'s keys of kind "iotdb" before it was
    #: a table; read for one more release, with a notice.
    iotdb_host: str = field(default="127.0.0.1", metadata=setting(Host()))
    iotdb_port: int = field(default=6667, metadata=setting(Integer(1, 65535)))
    iotdb_user: str = field(default="root", metadata=setting(Text()))
    #: A file whose first line is the IoTDB user's password (none: IoTDB's default).
    iotdb_password_file: Path | None = field(default=None, metadata=setting(PathValue()))
    #: The statements' dialect: "0.12" (0.12, 0.13) or "2.0" (1.x, 2.x).
    iotdb_dialect: str = field(default="2.0", metadata=setting(Choice(("0.12", "2.0"))))
    #: The Python that runs IoTDB's client (``sealsync[iotdb]``); none: this one.
    iotdb_python: Path | None = field(default=None, metadata=setting(PathValue()))
    source: str = field(default=MAPPING_SOURCE, metadata=not_a_key("the file's name"))

    @property
    def listen(self) -> str:
        return format_endpoint(self.listen_host, self.listen_port)

    @property
    def record_dir(self) -> Path:
        """Where the receiver keeps what must outlive its storage: ``state_dir``, by
        default the folder of ``authorized_keys`` (configuration, not storage)."""
        return self.state_dir if self.state_dir is not None else self.authorized_keys.parent

    @classmethod
    def from_mapping(
        cls,
        d: Mapping[str, Any],
        base_dir: Path,
        source: str = MAPPING_SOURCE,
        *,
        create: bool = True,
        init: bool = False,
    ) -> ReceiverConfig:
        """Build from ``{"receiver": {...}}`` or from the ``[receiver]`` table's keys alone.

        ``schema_dir`` and the data dirs must exist; ``init`` creates the missing ones
        (``sealsync serve --init``, a receiver's first start). Never silently: a typo or
        an unmounted disk would otherwise become an empty folder the files go to.
        ``create=False`` (``sealsync check``) changes nothing and leaves the folders'
        existence to the caller's own findings.
        """
        values = role_values(cls, "receiver", d, base_dir, source, create, init)
        _fold_flat_iotdb_keys(values, source)
        return cls(**values, source=source)


def _fold_flat_iotdb_keys(values: dict[str, Any], source: str) -> None:
    """The flat ``iotdb_*`` keys (and ``storage = "iotdb"``) as the ``[receiver.storage]``
    table they now are, with a one-line notice; both forms at once is an error."""
    flat = {k: v for k, v in values.items() if k.startswith(LEGACY_IOTDB_PREFIX)}
    spec: StorageSpec = values.get("storage", StorageSpec(source=source))
    legacy_kind = "storage" not in values or spec.label != StorageSpec.label
    if not flat and not (legacy_kind and spec.kind == "iotdb"):
        return
    if not legacy_kind:
        key = sorted(flat)[0]
        raise ConfigError(
            f"{source}: [receiver] {key}: give it as {key[len(LEGACY_IOTDB_PREFIX) :]} in "
            "[receiver.storage], not beside it"
        )
    _log.warning(
        '%s: [receiver] storage = "iotdb" and the iotdb_* keys are deprecated: write '
        '[receiver.storage] with kind = "iotdb" and host, port, user, password_file, '
        "dialect, python (docs/operations.md)",
        source,
    )
    if spec.kind == "iotdb":
        keys = {
            k[len(LEGACY_IOTDB_PREFIX) :]: str(v) if isinstance(v, Path) else v
            for k, v in flat.items()
        }
        values["storage"] = StorageSpec("iotdb", keys, spec.source, spec.base_dir, spec.label)


def load_receiver_config(path: str | os.PathLike[str], *, init: bool = False) -> ReceiverConfig:
    return load_file(path, functools.partial(ReceiverConfig.from_mapping, init=init))
