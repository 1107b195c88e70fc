"""The sender's file: ``[sender]`` and one ``[[receiver]]`` table per receiver."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sealsync.config.checks import need_dir, need_known_hosts, need_private_key, need_prom_path
from sealsync.config.document import check_top, document, kind_of, load_file, no_role
from sealsync.config.schema import (
    MAPPING_SOURCE,
    Choice,
    Host,
    Integer,
    Number,
    PathList,
    PathValue,
    Rate,
    Table,
    Text,
    keys_of,
    not_a_key,
    read_table,
    setting,
    type_name,
)
from sealsync.config.values import format_endpoint
from sealsync.errors import ConfigError

LOST_STORAGE_ACTIONS = ("reconcile", "fail", "ignore")
"""``on_lost_storage``'s values (sender/lost_storage.py)."""


@dataclass(frozen=True)
class ReceiverEndpoint:
    """A receiver as the sender sees it; state folders are named by host and port."""

    name: str = field(
        metadata=setting(Text(), fallback=lambda v: format_endpoint(v["host"], v["port"]))
    )
    host: str = field(metadata=setting(Host()))
    port: int = field(metadata=setting(Integer(1, 65535)))
    #: This receiver's bandwidth cap in bytes/s (0: none); None: the sender's ``bwlimit``.
    bwlimit: int | None = field(default=None, metadata=setting(Rate()))

    @property
    def address(self) -> str:
        return format_endpoint(self.host, self.port)


@dataclass(frozen=True)
class SenderConfig:
    schema_dir: Path = field(metadata=setting(PathValue(check=need_dir)))
    data_dirs: list[Path] = field(metadata=setting(PathList(check=need_dir)))
    identity: Path = field(metadata=setting(PathValue(check=need_private_key)))
    known_hosts: Path = field(metadata=setting(PathValue(check=need_known_hosts)))
    receivers: list[ReceiverEndpoint] = field(metadata=not_a_key("the [[receiver]] tables"))
    max_retries: int = field(default=5, metadata=setting(Integer(1, 1000)))
    connect_timeout: float = field(default=10.0, metadata=setting(Number(0, 3600)))
    #: Seconds a round keeps reconnecting, with backoff and jitter, to a receiver that
    #: went away mid-round (restarting, unreachable); 0: give up at the first failure.
    reconnect_time: float = field(default=60.0, metadata=setting(Number(0, 3600)))
    chunk_size: int = field(default=262144, metadata=setting(Integer(1024, 16 * 1024 * 1024)))
    pipeline_depth: int = field(default=1024, metadata=setting(Integer(1, 4096)))
    #: Bytes/s each receiver's round may send (0: no cap); a [[receiver]] may set its own.
    bwlimit: int = field(default=0, metadata=setting(Rate()))
    #: Seconds without a byte from the receiver before a keepalive asks for one.
    server_alive_interval: float = field(default=15.0, metadata=setting(Number(0, 3600)))
    #: Unanswered keepalive intervals after which the link is declared dead.
    server_alive_count_max: int = field(default=3, metadata=setting(Integer(1, 100)))
    #: Seconds a round waits for the receiver to take bytes or to answer.
    stall_timeout: float = field(default=120.0, metadata=setting(Number(0, 86400)))
    #: A plain send finds the receiver holding other files of this sender than it
    #: shipped there (storage lost, or restored from an older backup): "reconcile"
    #: (what ``send --reconcile`` does), "fail" (exit 1 naming that command), or
    #: "ignore" (no check: the receiver is not asked).
    on_lost_storage: str = field(
        default="reconcile", metadata=setting(Choice(LOST_STORAGE_ACTIONS))
    )
    source: str = field(default=MAPPING_SOURCE, metadata=not_a_key("the file's name"))
    #: Prometheus text-format metrics rewritten after each run (node_exporter's textfile).
    metrics_textfile: Path | None = field(
        default=None, metadata=setting(PathValue(check=need_prom_path))
    )

    @classmethod
    def from_mapping(
        cls, d: Mapping[str, Any], base_dir: Path, source: str = MAPPING_SOURCE
    ) -> SenderConfig:
        """Build from a whole sender document: ``[sender]`` plus ``[[receiver]]`` tables."""
        doc = document(d, source)
        if "sender" not in doc:
            if kind_of(doc) in (None, "sender"):  # not another role's file: a typo'd
                check_top(doc, source, ("sender", "receiver"))  # [sendr] is named
            raise no_role(doc, "sender", source, "missing table")
        check_top(doc, source, ("sender", "receiver"))
        t = Table(doc["sender"], source, "[sender]", base_dir.absolute(), keys_of(cls))
        values = read_table(cls, t)
        receivers = _receivers(doc.get("receiver"), source, base_dir)
        return cls(**values, receivers=receivers, source=source)

    def bwlimit_for(self, receiver: ReceiverEndpoint) -> int:
        """The cap of a round to ``receiver``, bytes/s (0: none): its own, else the sender's."""
        return self.bwlimit if receiver.bwlimit is None else receiver.bwlimit

    def with_bwlimit(self, rate: int) -> SenderConfig:
        """This config with one cap for every receiver (``send --bwlimit``)."""
        receivers = [replace(r, bwlimit=None) for r in self.receivers]
        return replace(self, bwlimit=rate, receivers=receivers)

    def receiver(self, name: str) -> ReceiverEndpoint:
        """The receiver called ``name`` (or written as ``host:port``), for ``--receiver``."""
        for r in self.receivers:
            if name in (r.name, r.address, f"{r.host}:{r.port}"):
                return r
        known = ", ".join(r.name for r in self.receivers)
        raise ConfigError(f"{self.source}: no [[receiver]] named {name!r} (known: {known})")


def _receivers(value: object, source: str, base_dir: Path) -> list[ReceiverEndpoint]:
    if value is None:
        raise ConfigError(f"{source}: [[receiver]]: missing, at least one receiver is required")
    if not isinstance(value, list) or not value:
        raise ConfigError(
            f"{source}: [[receiver]]: must be a non-empty array of tables, got {type_name(value)}"
        )
    out: list[ReceiverEndpoint] = []
    names: dict[str, int] = {}
    addresses: dict[tuple[str, int], int] = {}
    known = keys_of(ReceiverEndpoint)
    for i, item in enumerate(value, start=1):
        t = Table(item, source, f"[[receiver]] #{i}", base_dir, known)
        r = ReceiverEndpoint(**read_table(ReceiverEndpoint, t))
        if r.name in names:
            raise t.error("name", f"duplicate of [[receiver]] #{names[r.name]}: {r.name!r}")
        address = (r.host.lower(), r.port)
        if address in addresses:
            raise t.error("port", f"duplicate of [[receiver]] #{addresses[address]}: {r.address}")
        names[r.name] = i
        addresses[address] = i
        out.append(r)
    return out


def load_sender_config(path: str | os.PathLike[str]) -> SenderConfig:
    return load_file(path, SenderConfig.from_mapping)
