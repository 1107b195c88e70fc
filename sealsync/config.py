"""TOML configuration for the three roles: sender, receiver, loader (docs/design.md §7).

A mistake in a config file must stop the program before it touches any state, with
one line that names the file and the key: cron mails that line to an operator who
has no other clue. So every key is checked here — type, range, existence of the
paths that must already exist — and unknown keys (a typo silently ignored is a
setting silently lost) are errors at every level.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sealsync.errors import ConfigError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_ALLOW = ("127.0.0.0/8", "::1/128")
MAPPING_SOURCE = "<mapping>"

# A host goes into a state folder name (<host>_<port>) and into log lines.
_HOST_RE = re.compile(r"^[A-Za-z0-9._:%-]+$")
_T = TypeVar("_T")


def format_endpoint(host: str, port: int) -> str:
    """``host:port`` the way a user writes it, brackets around an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Table:
    """One TOML table being read, its unknown keys refused before anything else.

    Unknown keys are checked first: a typo'd key otherwise shows up as "missing
    required key" for the key the user meant, which hides the typo.
    """

    def __init__(
        self, data: object, source: str, label: str, base_dir: Path, known: tuple[str, ...]
    ) -> None:
        self.source = source
        self.label = label
        self.base_dir = base_dir
        if not isinstance(data, Mapping):
            raise self.error(None, f"must be a table, got {_type_name(data)}")
        self.data = data
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise self.error(unknown[0], f"unknown key ({_suggest(unknown[0], known)})")

    def error(self, key: str | None, message: str) -> ConfigError:
        where = self.label if key is None else f"{self.label} {key}"
        return ConfigError(f"{self.source}: {where}: {message}".strip())

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise self.error(key, "missing required key")
            return None
        return self.data[key]

    def string(self, key: str, default: str | None = None) -> str:
        value = self._get(key, default is None)
        if value is None:
            return default  # type: ignore[return-value]
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {_type_name(value)}")
        if not value.strip():
            raise self.error(key, "must not be empty")
        if any(ord(ch) < 0x20 for ch in value):
            raise self.error(key, "must not contain control characters")
        return value

    def integer(self, key: str, default: int | None, lo: int, hi: int) -> int:
        value = self._get(key, default is None)
        if value is None:
            return default  # type: ignore[return-value]
        # bool is an int subclass in Python; `true` for a count is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be an integer, got {_type_name(value)}")
        if not lo <= value <= hi:
            raise self.error(key, f"must be between {lo} and {hi}, got {value}")
        return value

    def number(self, key: str, default: float, lo: float, hi: float) -> float:
        value = self._get(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"must be a number, got {_type_name(value)}")
        if not math.isfinite(value) or not lo < value <= hi:
            raise self.error(key, f"must be greater than {lo:g} and at most {hi:g}, got {value}")
        return float(value)

    def path(self, key: str) -> Path:
        return self.resolve(key, self.string(key))

    def settings(self, key: str) -> dict[str, str]:
        """A table of ``name = value`` settings passed on as strings (Spark's ``--conf``)."""
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(key, f"must be a table, got {_type_name(value)}")
        out: dict[str, str] = {}
        for name, item in value.items():
            if isinstance(item, bool):
                out[name] = "true" if item else "false"
            elif isinstance(item, str | int | float):
                out[name] = str(item)
            else:
                raise self.error(
                    f"{key}.{name}", f"must be a string, number or boolean, got {_type_name(item)}"
                )
        return out

    def resolve(self, key: str, value: str) -> Path:
        if "\x00" in value:
            raise self.error(key, "must not contain NUL")
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    def string_list(self, key: str, default: list[str] | None = None) -> list[str]:
        value = self._get(key, default is None)
        if value is None:
            return list(default)  # type: ignore[arg-type]
        if not isinstance(value, list):
            raise self.error(key, f"must be a list of strings, got {_type_name(value)}")
        if not value:
            raise self.error(key, "must not be empty")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(f"{key}[{i}]", f"must be a string, got {_type_name(item)}")
            if not item.strip():
                raise self.error(f"{key}[{i}]", "must not be empty")
        return value

    def path_list(self, key: str) -> list[Path]:
        paths = [self.resolve(f"{key}[{i}]", v) for i, v in enumerate(self.string_list(key))]
        seen: dict[Path, int] = {}
        for i, path in enumerate(paths):
            norm = Path(os.path.normpath(path))
            if norm in seen:
                raise self.error(f"{key}[{i}]", f"duplicate of {key}[{seen[norm]}]: {path}")
            seen[norm] = i
        return paths


def _suggest(key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"did you mean {close[0]}?" if close else f"known keys: {', '.join(known)}"


def _type_name(value: object) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def _check_top(doc: Mapping[str, Any], source: str, known: tuple[str, ...]) -> None:
    unknown = sorted(set(doc) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = (
            f"did you mean [{close[0]}]?"
            if close
            else "expected " + ", ".join(f"[{k}]" for k in known)
        )
        raise ConfigError(f"{source}: [{unknown[0]}]: unknown table or key ({hint})")


def _need_dir(table: _Table, key: str, path: Path) -> Path:
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise table.error(key, f"{path} {what}")
    return path


def _need_readable_file(table: _Table, key: str, path: Path) -> Path:
    if not path.is_file():
        what = "does not exist" if not path.exists() else "is not a regular file"
        raise table.error(key, f"{path} {what}")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise table.error(key, f"cannot read {path}: {e.strerror or e}") from None
    return path


def _make_dir(table: _Table, key: str, path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise table.error(key, f"{path} is not a directory") from None
    except OSError as e:
        raise table.error(key, f"cannot create {path}: {e.strerror or e}") from None
    return path


def _document(d: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{source}: the configuration must be a table, got {_type_name(d)}")
    return d


def _role_table(
    d: Mapping[str, Any], role: str, source: str, base_dir: Path, known: tuple[str, ...]
) -> _Table:
    """The ``[role]`` table, given either the whole document or that table alone.

    The receiver plugin and the loader are also built from Python mappings, where
    passing just the table's keys is the natural thing to write.
    """
    doc = _document(d, source)
    if role in doc and isinstance(doc[role], Mapping):
        _check_top(doc, source, (role,))
        return _Table(doc[role], source, f"[{role}]", base_dir, known)
    if role in doc:
        raise ConfigError(f"{source}: [{role}]: must be a table, got {_type_name(doc[role])}")
    if any(k in doc for k in known):
        return _Table(doc, source, f"[{role}]", base_dir, known)
    raise ConfigError(f"{source}: [{role}]: missing table")


@dataclass(frozen=True)
class ReceiverEndpoint:
    """A receiver as the sender sees it; state folders are named by host and port."""

    name: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return format_endpoint(self.host, self.port)


_SENDER_KEYS = (
    "schema_dir",
    "data_dirs",
    "identity",
    "known_hosts",
    "max_retries",
    "connect_timeout",
    "chunk_size",
    "pipeline_depth",
)
_RECEIVER_KEYS = (
    "listen",
    "host_key",
    "authorized_keys",
    "allow",
    "schema_dir",
    "data_dirs",
    "max_sessions",
    "idle_timeout",
)
_LOADER_KEYS = ("receiver_data_dirs", "table_path", "state_dir", "master", "python", "spark")


@dataclass(frozen=True)
class SenderConfig:
    schema_dir: Path
    data_dirs: list[Path]
    identity: Path
    known_hosts: Path
    receivers: list[ReceiverEndpoint]
    max_retries: int = 5
    connect_timeout: float = 10.0
    chunk_size: int = 262144
    pipeline_depth: int = 64
    source: str = MAPPING_SOURCE

    @classmethod
    def from_mapping(
        cls, d: Mapping[str, Any], base_dir: Path, source: str = MAPPING_SOURCE
    ) -> SenderConfig:
        """Build from a whole sender document: ``[sender]`` plus ``[[receiver]]`` tables."""
        doc = _document(d, source)
        _check_top(doc, source, ("sender", "receiver"))
        if "sender" not in doc:
            raise ConfigError(f"{source}: [sender]: missing table")
        t = _Table(doc["sender"], source, "[sender]", base_dir.absolute(), _SENDER_KEYS)
        data_dirs = t.path_list("data_dirs")
        for i, p in enumerate(data_dirs):
            _need_dir(t, f"data_dirs[{i}]", p)
        config = cls(
            schema_dir=_need_dir(t, "schema_dir", t.path("schema_dir")),
            data_dirs=data_dirs,
            identity=_need_readable_file(t, "identity", t.path("identity")),
            known_hosts=_need_readable_file(t, "known_hosts", t.path("known_hosts")),
            max_retries=t.integer("max_retries", 5, 1, 1000),
            connect_timeout=t.number("connect_timeout", 10.0, 0, 3600),
            chunk_size=t.integer("chunk_size", 262144, 1024, 16 * 1024 * 1024),
            pipeline_depth=t.integer("pipeline_depth", 64, 1, 4096),
            receivers=_receivers(doc.get("receiver"), source, base_dir),
            source=source,
        )
        return config

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
            f"{source}: [[receiver]]: must be a non-empty array of tables, got {_type_name(value)}"
        )
    out: list[ReceiverEndpoint] = []
    names: dict[str, int] = {}
    addresses: dict[tuple[str, int], int] = {}
    for i, item in enumerate(value, start=1):
        t = _Table(item, source, f"[[receiver]] #{i}", base_dir, ("name", "host", "port"))
        host = t.string("host")
        if not _HOST_RE.match(host) or host.startswith("["):
            raise t.error("host", f"not a host name or IP address (no brackets): {host!r}")
        port = t.integer("port", None, 1, 65535)
        name = t.string("name", format_endpoint(host, port))
        if name in names:
            raise t.error("name", f"duplicate of [[receiver]] #{names[name]}: {name!r}")
        if (host.lower(), port) in addresses:
            raise t.error(
                "port",
                f"duplicate of [[receiver]] #{addresses[(host.lower(), port)]}: "
                f"{format_endpoint(host, port)}",
            )
        names[name] = i
        addresses[(host.lower(), port)] = i
        out.append(ReceiverEndpoint(name=name, host=host, port=port))
    return out


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` into its parts; ValueError says what is wrong."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or value[end + 1 : end + 2] != ":":
            raise ValueError("write an IPv6 address as [address]:port")
        host, port_text = value[1:end], value[end + 2 :]
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep or not host:
            raise ValueError("must be host:port")
        if ":" in host:
            raise ValueError("write an IPv6 address as [address]:port")
        if not _HOST_RE.match(host):
            raise ValueError(f"{host!r} is not a host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {port_text!r}")
    return host, int(port_text)


@dataclass(frozen=True)
class ReceiverConfig:
    listen_host: str
    listen_port: int
    host_key: Path
    authorized_keys: Path
    schema_dir: Path
    data_dirs: list[Path]
    allow: list[IPNetwork] = field(
        default_factory=lambda: [ipaddress.ip_network(n) for n in DEFAULT_ALLOW]
    )
    max_sessions: int = 16
    idle_timeout: float = 120.0
    source: str = MAPPING_SOURCE

    @property
    def listen(self) -> str:
        return format_endpoint(self.listen_host, self.listen_port)

    @classmethod
    def from_mapping(
        cls, d: Mapping[str, Any], base_dir: Path, source: str = MAPPING_SOURCE
    ) -> ReceiverConfig:
        """Build from ``{"receiver": {...}}`` or from the ``[receiver]`` table's keys alone.

        Creates ``schema_dir`` and the data dirs if missing: a fresh receiver has none.
        """
        t = _role_table(d, "receiver", source, base_dir.absolute(), _RECEIVER_KEYS)
        listen = t.string("listen")
        try:
            listen_host, listen_port = parse_listen(listen)
        except ValueError as e:
            raise t.error("listen", f"{e}: {listen!r}") from None
        host_key = _need_readable_file(t, "host_key", t.path("host_key"))
        authorized_keys = _need_readable_file(t, "authorized_keys", t.path("authorized_keys"))
        allow: list[IPNetwork] = []
        for i, text in enumerate(t.string_list("allow", list(DEFAULT_ALLOW))):
            try:
                allow.append(ipaddress.ip_network(text.strip(), strict=True))
            except ValueError as e:
                raise t.error(f"allow[{i}]", f"not a CIDR network: {e}") from None
        max_sessions = t.integer("max_sessions", 16, 1, 10000)
        idle_timeout = t.number("idle_timeout", 120.0, 0, 86400)
        schema_dir = t.path("schema_dir")
        data_dirs = t.path_list("data_dirs")
        _make_dir(t, "schema_dir", schema_dir)
        for i, p in enumerate(data_dirs):
            _make_dir(t, f"data_dirs[{i}]", p)
        return cls(
            listen_host=listen_host,
            listen_port=listen_port,
            host_key=host_key,
            authorized_keys=authorized_keys,
            schema_dir=schema_dir,
            data_dirs=data_dirs,
            allow=allow,
            max_sessions=max_sessions,
            idle_timeout=idle_timeout,
            source=source,
        )


@dataclass(frozen=True)
class LoaderConfig:
    receiver_data_dirs: list[Path]
    table_path: Path
    state_dir: Path
    master: str = "local[*]"
    source: str = MAPPING_SOURCE
    #: The interpreter executors run; it needs pyarrow and tsfile (None: see ingest).
    python: str | None = None
    #: Spark settings for the session the loader starts (``spark.executor.memory``...).
    spark: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_mapping(
        cls, d: Mapping[str, Any], base_dir: Path, source: str = MAPPING_SOURCE
    ) -> LoaderConfig:
        """Build from ``{"loader": {...}}`` or the ``[loader]`` table's keys alone.

        ``table_path`` and ``state_dir`` are created by the first run, not here:
        loading a config (``status``) must not leave folders behind.
        """
        t = _role_table(d, "loader", source, base_dir.absolute(), _LOADER_KEYS)
        dirs = t.path_list("receiver_data_dirs")
        for i, p in enumerate(dirs):
            _need_dir(t, f"receiver_data_dirs[{i}]", p)
        config = cls(
            receiver_data_dirs=dirs,
            table_path=t.path("table_path"),
            state_dir=t.path("state_dir"),
            master=t.string("master", "local[*]"),
            source=source,
            python=t.string("python", "") or None,
            spark=t.settings("spark"),
        )
        return config


AnyConfig = SenderConfig | ReceiverConfig | LoaderConfig


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed document, or a one-line ConfigError naming the file."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: TOML syntax error: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror or e}") from None


def _load(path: str | os.PathLike[str], build: Callable[..., _T]) -> _T:
    path = Path(path)
    doc = read_toml(path)
    return build(doc, path.absolute().parent, str(path))


def load_sender_config(path: str | os.PathLike[str]) -> SenderConfig:
    return _load(path, SenderConfig.from_mapping)


def load_receiver_config(path: str | os.PathLike[str]) -> ReceiverConfig:
    return _load(path, ReceiverConfig.from_mapping)


def load_loader_config(path: str | os.PathLike[str]) -> LoaderConfig:
    return _load(path, LoaderConfig.from_mapping)


def load_any(path: str | os.PathLike[str]) -> AnyConfig:
    """Whichever role the file configures, told by its top-level table (for ``status``).

    A sender file has ``[sender]`` and an *array* ``[[receiver]]``; a receiver file has
    a single ``[receiver]`` table.
    """
    path = Path(path)
    doc = read_toml(path)
    base_dir = path.absolute().parent
    if "sender" in doc or isinstance(doc.get("receiver"), list):
        return SenderConfig.from_mapping(doc, base_dir, str(path))
    if "loader" in doc:
        return LoaderConfig.from_mapping(doc, base_dir, str(path))
    if "receiver" in doc:
        return ReceiverConfig.from_mapping(doc, base_dir, str(path))
    raise ConfigError(f"{path}: no [sender], [receiver] or [loader] table")
