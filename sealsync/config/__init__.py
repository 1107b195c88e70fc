"""TOML configuration for the three roles: sender, receiver, loader (docs/design.md §7).

A mistake in a config file must stop the program before it touches any state, with
one line that names the file and the key: cron mails that line to an operator who
has no other clue. The package is the schema engine (``schema``: keys declared on
dataclass fields, read and checked in one walk; ``checks``: what a path must be;
``values``: endpoints, rates, ``MaxStartups``), the file as a whole (``document``)
and one module per role's schema (``sender``, ``receiver``, ``loader``). Everything a
caller needs is importable from here.
"""

from __future__ import annotations

import os
from pathlib import Path

from sealsync.config.document import kind_of, read_toml
from sealsync.config.loader import (
    LoaderConfig,
    load_loader_config,
    refuse_readable_credentials,
)
from sealsync.config.receiver import DEFAULT_ALLOW, ReceiverConfig, load_receiver_config
from sealsync.config.schema import (
    MAPPING_SOURCE,
    METADATA_KEY,
    Integer,
    NotAKey,
    Number,
    Reader,
    Setting,
    keys_of,
    not_a_key,
    setting,
    settings_of,
)
from sealsync.config.sender import ReceiverEndpoint, SenderConfig, load_sender_config
from sealsync.config.values import (
    MIN_RATE,
    RATE_HELP,
    IPNetwork,
    MaxStartups,
    format_endpoint,
    parse_listen,
    parse_rate,
)
from sealsync.errors import ConfigError

__all__ = [
    "DEFAULT_ALLOW",
    "MAPPING_SOURCE",
    "METADATA_KEY",
    "MIN_RATE",
    "RATE_HELP",
    "AnyConfig",
    "IPNetwork",
    "Integer",
    "LoaderConfig",
    "MaxStartups",
    "NotAKey",
    "Number",
    "Reader",
    "ReceiverConfig",
    "ReceiverEndpoint",
    "SenderConfig",
    "Setting",
    "format_endpoint",
    "keys_of",
    "load_any",
    "load_loader_config",
    "load_receiver_config",
    "load_sender_config",
    "not_a_key",
    "parse_listen",
    "parse_rate",
    "read_toml",
    "setting",
    "settings_of",
]

AnyConfig = SenderConfig | ReceiverConfig | LoaderConfig


def load_any(path: str | os.PathLike[str], *, create: bool = True) -> AnyConfig:
    """Whichever role the file configures, told by its top-level tables (for ``status``).

    ``create=False`` loads without creating any folder.
    """
    path = Path(path)
    doc = read_toml(path)
    base_dir = path.absolute().parent
    kind = kind_of(doc)
    if kind == "sender":
        return SenderConfig.from_mapping(doc, base_dir, str(path))
    if kind == "loader":
        return refuse_readable_credentials(
            path, LoaderConfig.from_mapping(doc, base_dir, str(path))
        )
    if kind == "receiver":
        return ReceiverConfig.from_mapping(doc, base_dir, str(path), create=create)
    raise ConfigError(f"{path}: no [sender], [receiver] or [loader] table")
