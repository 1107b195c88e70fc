"""TOML configuration for the three roles: sender, receiver, loader (docs/design.md §7).

A mistake in a config file must stop the program before it touches any state, with
one line that names the file and the key: cron mails that line to an operator who
has no other clue. So every key is checked here — type, range, existence of the
paths that must already exist — and unknown keys (a typo silently ignored is a
setting silently lost) are errors at every level.

Each key is declared once, on the dataclass field it fills::

    max_retries: int = field(default=5, metadata=setting(Integer(1, 1000)))

The field's name is the key, its dataclass default is the key's default (a field
without one is a required key), and the reader given to ``setting`` is the key's
type, range and checks: ``Text``, ``Integer(lo, hi)``, ``Number(lo, hi)``,
``PathValue`` and ``PathList`` (resolved against the config file's folder; ``check=``
what must already exist, ``create=True`` for folders that ``init`` makes, once every
key is valid, instead of checking them),
``TextList``, ``Settings``, or a small ``Reader`` subclass for anything else. One
loader, ``_read_table``, walks the fields: it refuses keys no field declares (with
"did you mean"), reads the present keys in field order, leaves absent ones to the
dataclass defaults, and only then runs the steps that change the disk.

To add a key, add that one field line to its class. Nothing else lists keys: the
unknown-key check, the suggestions and the defaults all come from the field. A key
whose name differs from its field, or that fills several fields (``listen`` gives
``listen_host`` and ``listen_port``), says so with ``setting(reader, key=, part=)``;
a default computed from other keys is ``setting(reader, fallback=)``. A field that is
not a key of its table is marked ``not_a_key(why)``, so that every field says which
it is.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import logging
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from sealsync import permissions, sshfiles
from sealsync.durable import SYNC_METHODS, SYNCFS
from sealsync.errors import ConfigError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_ALLOW = ("127.0.0.0/8", "::1/128")
MAPPING_SOURCE = "<mapping>"
#: The ``Field.metadata`` entry that holds a field's ``Setting`` (or ``NotAKey``).
METADATA_KEY = "sealsync.config"

# A host goes into a state folder name (<host>_<port>) and into log lines.
_HOST_RE = re.compile(r"^[A-Za-z0-9._:%-]+$")


def _is_host(host: str) -> bool:
    """A host name or IP address the resolver takes: the allowed characters and, for a
    name, no empty label and none longer than 63 (a typo'd ``a..b`` made the
    resolver's IDNA step raise UnicodeError, an internal error, at connect time)."""
    if not _HOST_RE.match(host):
        return False
    if ":" in host:
        return True  # IPv6, whose form the caller checks
    labels = host.removesuffix(".").split(".")  # one trailing dot: a fully qualified name
    return len(host) <= 253 and all(0 < len(label) <= 63 for label in labels)


_T = TypeVar("_T")
_log = logging.getLogger("sealsync.config")


def format_endpoint(host: str, port: int) -> str:
    """``host:port`` the way a user writes it, brackets around an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class MaxStartups:
    """``start:rate:full`` as in ``sshd_config``'s ``MaxStartups``."""

    start: int
    rate: int
    full: int

    def __post_init__(self) -> None:
        if not 1 <= self.start <= self.full:
            raise ValueError(f"start must be between 1 and full ({self.full}), got {self.start}")
        if not 0 <= self.rate <= 100:
            raise ValueError(f"rate must be a percentage (0 to 100), got {self.rate}")

    @classmethod
    def parse(cls, text: str) -> MaxStartups:
        """``"10:30:60"``, or ``"N"`` for a plain cap of N (no early drop)."""
        parts = text.strip().split(":")
        if len(parts) not in (1, 3) or not all(p.isdigit() for p in parts):
            raise ValueError('expected "start:rate:full" (like "10:30:60") or one number')
        if len(parts) == 1:
            return cls(int(parts[0]), 100, int(parts[0]))
        start, rate, full = (int(p) for p in parts)
        return cls(start, rate, full)

    def drop_probability(self, startups: int) -> float:
        """The chance that a new connection is dropped while ``startups`` are open."""
        if startups < self.start:
            return 0.0
        if startups >= self.full:
            return 1.0
        span = self.full - self.start
        return (self.rate + (100 - self.rate) * (startups - self.start) / span) / 100


class _Table:
    """One TOML table being read, its unknown keys refused before anything else.

    Unknown keys are checked first: a typo'd key otherwise shows up as "missing
    required key" for the key the user meant, which hides the typo.
    """

    init = False
    """Create the missing folders of ``create=True`` keys instead of refusing them."""

    def __init__(
        self,
        data: object,
        source: str,
        label: str,
        base_dir: Path,
        known: tuple[str, ...],
        create: bool = True,
    ) -> None:
        self.source = source
        self.label = label
        self.base_dir = base_dir
        #: False: check only, the steps that would create folders are skipped (``check``).
        self.create = create
        if not isinstance(data, Mapping):
            raise self.error(None, f"must be a table, got {_type_name(data)}")
        self.data: Mapping[str, Any] = data
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise self.error(unknown[0], f"unknown key ({_suggest(unknown[0], known)})")

    def error(self, key: str | None, message: str) -> ConfigError:
        where = self.label if key is None else f"{self.label} {key}"
        return ConfigError(f"{self.source}: {where}: {message}".strip())

    def resolve(self, key: str, value: str) -> Path:
        """A path as written, relative ones taken from the config file's folder."""
        if "\x00" in value:
            raise self.error(key, "must not contain NUL")
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base_dir / path


# ---------------------------------------------------------------- readers


class Reader:
    """How one key's TOML value becomes its field's value, or a one-line error."""

    def read(self, table: _Table, key: str, value: object) -> Any:
        raise NotImplementedError

    def after(self, table: _Table, key: str, value: Any) -> None:
        """A step that changes the disk, run only once every key of the table is valid."""


@dataclass(frozen=True)
class Text(Reader):
    """A non-empty one-line string."""

    def read(self, table: _Table, key: str, value: object) -> str:
        if not isinstance(value, str):
            raise table.error(key, f"must be a string, got {_type_name(value)}")
        if not value.strip():
            raise table.error(key, "must not be empty")
        if any(ord(ch) < 0x20 for ch in value):
            raise table.error(key, "must not contain control characters")
        return value


@dataclass(frozen=True)
class Host(Reader):
    """A host name or IP address as it goes into a state folder name."""

    def read(self, table: _Table, key: str, value: object) -> str:
        host = Text().read(table, key, value)
        if not _is_host(host) or host.startswith("["):
            raise table.error(key, f"not a host name or IP address (no brackets): {host!r}")
        return host


@dataclass(frozen=True)
class ListenAddress(Reader):
    """``host:port`` or ``[v6]:port`` as a ``(host, port)`` pair (see ``parse_listen``)."""

    def read(self, table: _Table, key: str, value: object) -> tuple[str, int]:
        text = Text().read(table, key, value)
        try:
            return parse_listen(text)
        except ValueError as e:
            raise table.error(key, f"{e}: {text!r}") from None


@dataclass(frozen=True)
class Rate(Reader):
    """A bandwidth cap in rsync's ``--bwlimit`` syntax, as bytes per second (see
    ``parse_rate``); a TOML number is a bare number (KiB/s)."""

    def read(self, table: _Table, key: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise table.error(key, f'must be a rate such as "4M", got {_type_name(value)}')
        try:
            return parse_rate(str(value))
        except ValueError as e:
            raise table.error(key, str(e)) from None


@dataclass(frozen=True)
class Choice(Reader):
    """One of a few fixed strings."""

    choices: tuple[str, ...]

    def read(self, table: _Table, key: str, value: object) -> str:
        if value not in self.choices:
            shown = repr(value) if isinstance(value, str) else _type_name(value)
            allowed = " or ".join(f'"{c}"' for c in self.choices)
            raise table.error(key, f"must be {allowed}, got {shown}")
        return value


@dataclass(frozen=True)
class Integer(Reader):
    """An integer in ``[lo, hi]``."""

    lo: int
    hi: int

    def read(self, table: _Table, key: str, value: object) -> int:
        # bool is an int subclass in Python; `true` for a count is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise table.error(key, f"must be an integer, got {_type_name(value)}")
        if not self.lo <= value <= self.hi:
            raise table.error(key, f"must be between {self.lo} and {self.hi}, got {value}")
        return value


@dataclass(frozen=True)
class Number(Reader):
    """A finite number in ``(lo, hi]``, as a float (an integer is accepted)."""

    lo: float
    hi: float

    def read(self, table: _Table, key: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise table.error(key, f"must be a number, got {_type_name(value)}")
        if not math.isfinite(value) or not self.lo < value <= self.hi:
            raise table.error(
                key, f"must be greater than {self.lo:g} and at most {self.hi:g}, got {value}"
            )
        return float(value)


#: What a path must already be, checked as the key is read: raises ``table.error``.
PathCheck = Callable[[_Table, str, Path], object]


@dataclass(frozen=True)
class PathValue(Reader):
    """A path relative to the config file's folder; ``create``: a folder ``init`` makes."""

    check: PathCheck | None = None
    create: bool = False

    def read(self, table: _Table, key: str, value: object) -> Path:
        path = table.resolve(key, Text().read(table, key, value))
        if self.check is not None and not (self.create and (table.init or not table.create)):
            self.check(table, key, path)
        return path

    def after(self, table: _Table, key: str, value: Path) -> None:
        if self.create and table.init and table.create:
            _make_dir(table, key, value)


@dataclass(frozen=True)
class TextList(Reader):
    """A non-empty list of non-empty strings."""

    def read(self, table: _Table, key: str, value: object) -> list[str]:
        if not isinstance(value, list):
            raise table.error(key, f"must be a list of strings, got {_type_name(value)}")
        if not value:
            raise table.error(key, "must not be empty")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise table.error(f"{key}[{i}]", f"must be a string, got {_type_name(item)}")
            if not item.strip():
                raise table.error(f"{key}[{i}]", "must not be empty")
        return value


@dataclass(frozen=True)
class PathList(Reader):
    """Distinct paths, each like ``PathValue`` and named ``key[i]`` in errors."""

    check: PathCheck | None = None
    create: bool = False

    def read(self, table: _Table, key: str, value: object) -> list[Path]:
        texts = TextList().read(table, key, value)
        paths = [table.resolve(f"{key}[{i}]", v) for i, v in enumerate(texts)]
        seen: dict[Path, int] = {}
        for i, path in enumerate(paths):
            norm = Path(os.path.normpath(path))
            if norm in seen:
                raise table.error(f"{key}[{i}]", f"duplicate of {key}[{seen[norm]}]: {path}")
            seen[norm] = i
        if self.check is not None and not (self.create and (table.init or not table.create)):
            for i, path in enumerate(paths):
                self.check(table, f"{key}[{i}]", path)
        return paths

    def after(self, table: _Table, key: str, value: list[Path]) -> None:
        if self.create and table.init and table.create:
            for i, path in enumerate(value):
                _make_dir(table, f"{key}[{i}]", path)


@dataclass(frozen=True)
class Networks(Reader):
    """A list of CIDR networks, host bits zero (``10.0.0.1/8`` is a mistake)."""

    def read(self, table: _Table, key: str, value: object) -> list[IPNetwork]:
        out: list[IPNetwork] = []
        for i, text in enumerate(TextList().read(table, key, value)):
            try:
                out.append(ipaddress.ip_network(text.strip(), strict=True))
            except ValueError as e:
                raise table.error(f"{key}[{i}]", f"not a CIDR network: {e}") from None
        return out


@dataclass(frozen=True)
class Startups(Reader):
    """``"start:rate:full"`` (OpenSSH's ``MaxStartups``) or one number for a plain cap."""

    def read(self, table: _Table, key: str, value: object) -> MaxStartups:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        text = Text().read(table, key, value)
        try:
            return MaxStartups.parse(text)
        except ValueError as e:
            raise table.error(key, f"{e}: {text!r}") from None


@dataclass(frozen=True)
class Settings(Reader):
    """A table of ``name = value`` settings passed on as strings (Spark's ``--conf``)."""

    def read(self, table: _Table, key: str, value: object) -> dict[str, str]:
        if not isinstance(value, Mapping):
            raise table.error(key, f"must be a table, got {_type_name(value)}")
        out: dict[str, str] = {}
        for name, item in value.items():
            if isinstance(item, bool):
                out[name] = "true" if item else "false"
            elif isinstance(item, str | int | float):
                out[name] = str(item)
            else:
                raise table.error(
                    f"{key}.{name}", f"must be a string, number or boolean, got {_type_name(item)}"
                )
        return out


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


def _need_private_key(table: _Table, key: str, path: Path) -> Path:
    """A private key this end presents: a private key, and its owner's alone."""
    _need_readable_file(table, key, path)
    try:
        problem = sshfiles.private_key_problem(path)
    except OSError as e:
        raise table.error(key, f"cannot read {path}: {e.strerror or e}") from None
    if problem is not None:
        raise table.error(key, f"{path}: {problem}")
    return path


def _trust_file(parse: Callable[[Path], object]) -> Callable[[_Table, str, Path], Path]:
    """The check of a trust file: readable, others cannot write it, and ``parse`` (which
    names ``file:line`` of a malformed line) accepts every line."""

    def check(table: _Table, key: str, path: Path) -> Path:
        _need_readable_file(table, key, path)
        try:
            parse(path)
        except ConfigError as e:
            raise table.error(key, str(e)) from None
        return path

    return check


_need_known_hosts = _trust_file(sshfiles.read_known_hosts)
_need_authorized_keys = _trust_file(sshfiles.read_authorized_keys)


def _need_prom_path(table: _Table, key: str, path: Path) -> Path:
    """A metrics textfile: its folder exists, and node_exporter reads only ``*.prom``."""
    if path.suffix != ".prom":
        raise table.error(key, f"{path} must end in .prom (node_exporter reads only *.prom)")
    if not path.parent.is_dir():
        raise table.error(key, f"{path.parent} (its folder) does not exist")
    if path.is_dir():
        raise table.error(key, f"{path} is a directory")
    return path


def _need_storage_dir(table: _Table, key: str, path: Path) -> Path:
    """A receiver folder: never made silently, a typo or an unmounted disk would take
    the files (docs/operations.md, "Running the receiver")."""
    if not path.is_dir():
        if path.exists():
            raise table.error(key, f"{path} is not a directory")
        raise table.error(
            key, f"{path} does not exist: create it with `sealsync serve --init` or mkdir"
        )
    return path


def _make_dir(table: _Table, key: str, path: Path) -> Path:
    if not path.is_dir():
        _log.info("creating %s (%s)", path, key)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise table.error(key, f"{path} is not a directory") from None
    except OSError as e:
        raise table.error(key, f"cannot create {path}: {e.strerror or e}") from None
    return path


# ---------------------------------------------------------------- declaring keys


@dataclass(frozen=True)
class Setting:
    """A field's key: its reader, and where it differs from the plain case.

    ``key``: the TOML key when it is not the field's name. ``part``: the field takes
    item ``part`` of the reader's result (one key filling several fields, read once).
    ``fallback``: the value when the key is absent, computed from the fields already
    read (for a default that depends on other keys).
    """

    reader: Reader
    key: str | None = None
    part: int | None = None
    fallback: Callable[[Mapping[str, Any]], Any] | None = None


@dataclass(frozen=True)
class NotAKey:
    """A field of a config class that its table does not set, and why."""

    why: str


def setting(
    reader: Reader,
    *,
    key: str | None = None,
    part: int | None = None,
    fallback: Callable[[Mapping[str, Any]], Any] | None = None,
) -> dict[str, Setting]:
    """The ``metadata=`` of a field that is a config key (see the module docstring)."""
    return {METADATA_KEY: Setting(reader, key, part, fallback)}


def not_a_key(why: str) -> dict[str, NotAKey]:
    """The ``metadata=`` of a field its table does not set."""
    return {METADATA_KEY: NotAKey(why)}


def settings_of(cls: type[Any]) -> list[tuple[str, Field[Any], Setting]]:
    """``(key, field, setting)`` for every field of ``cls`` that is a key, in order."""
    out: list[tuple[str, Field[Any], Setting]] = []
    for f in fields(cls):
        s = f.metadata.get(METADATA_KEY)
        if isinstance(s, Setting):
            out.append((s.key or f.name, f, s))
    return out


def keys_of(cls: type[Any]) -> tuple[str, ...]:
    """The keys a table read into ``cls`` accepts, in declaration order."""
    return tuple(dict.fromkeys(key for key, _, _ in settings_of(cls)))


def _has_default(f: Field[Any]) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _read_table(cls: type[Any], table: _Table) -> dict[str, Any]:
    """Keyword arguments for ``cls`` from ``table``: the one walk every key goes through.

    Absent keys are left out so that the dataclass default applies: the default is
    written once, on the field. Disk-changing steps run last, so a bad key anywhere
    in the table leaves nothing behind.
    """
    settings = settings_of(cls)
    values: dict[str, Any] = {}
    read: dict[str, tuple[Reader, Any]] = {}  # by key: a key filling two fields is read once
    for key, f, s in settings:
        if key not in table.data:
            if s.fallback is None and not _has_default(f):
                raise table.error(key, "missing required key")
            continue
        if key not in read:
            read[key] = (s.reader, s.reader.read(table, key, table.data[key]))
        value = read[key][1]
        values[f.name] = value if s.part is None else value[s.part]
    for _, f, s in settings:
        if f.name not in values and s.fallback is not None:
            values[f.name] = s.fallback(values)
    for key, (reader, value) in read.items():
        reader.after(table, key, value)
    return values


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


def _document(d: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{source}: the configuration must be a table, got {_type_name(d)}")
    return d


_COMMANDS = {"sender": "sealsync send", "receiver": "sealsync serve", "loader": "sealsync load"}
"""The command each role's file is for, named when a file of one role is given to another."""


def _kind_of(doc: Mapping[str, Any]) -> str | None:
    """Which role a whole document configures, told by its top-level tables.

    A sender file has ``[sender]`` and an *array* ``[[receiver]]``; a receiver file has
    a single ``[receiver]`` table; a loader file has ``[loader]``.
    """
    if "sender" in doc or isinstance(doc.get("receiver"), list):
        return "sender"
    if "loader" in doc:
        return "loader"
    if "receiver" in doc:
        return "receiver"
    return None


def _no_role(doc: Mapping[str, Any], role: str, source: str, problem: str) -> ConfigError:
    """``[role]`` is missing or not a table; when the file is another role's (the
    operator gave ``sealsync serve`` the sender's file, say), the line says so and
    which command that file is for, since "missing table" alone sends them looking
    for a typo in a file that has none."""
    message = f"{source}: [{role}]: {problem}"
    kind = _kind_of(doc)
    if kind is not None and kind != role:
        message += f": this is a {kind} config, for '{_COMMANDS[kind]}'; this needs a {role} config"
    return ConfigError(message)


def _role_table(
    d: Mapping[str, Any],
    role: str,
    source: str,
    base_dir: Path,
    known: tuple[str, ...],
    create: bool = True,
) -> _Table:
    """The ``[role]`` table, given either the whole document or that table alone.

    The receiver plugin and the loader are also built from Python mappings, where
    passing just the table's keys is the natural thing to write.
    """
    doc = _document(d, source)
    if role in doc and isinstance(doc[role], Mapping):
        _check_top(doc, source, (role,))
        return _Table(doc[role], source, f"[{role}]", base_dir, known, create)
    if role in doc:
        raise _no_role(doc, role, source, f"must be a table, got {_type_name(doc[role])}")
    if any(k in doc for k in known):
        return _Table(doc, source, f"[{role}]", base_dir, known, create)
    raise _no_role(doc, role, source, "missing table")


def _role_values(
    cls: type[Any],
    role: str,
    d: Mapping[str, Any],
    base_dir: Path,
    source: str,
    create: bool = True,
    init: bool = False,
) -> dict[str, Any]:
    """``cls``'s fields from the ``[role]`` table of ``d`` (or ``d`` being that table)."""
    table = _role_table(d, role, source, base_dir.absolute(), keys_of(cls), create)
    table.init = init
    return _read_table(cls, table)


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
    schema_dir: Path = field(metadata=setting(PathValue(check=_need_dir)))
    data_dirs: list[Path] = field(metadata=setting(PathList(check=_need_dir)))
    identity: Path = field(metadata=setting(PathValue(check=_need_private_key)))
    known_hosts: Path = field(metadata=setting(PathValue(check=_need_known_hosts)))
    receivers: list[ReceiverEndpoint] = field(metadata=not_a_key("the [[receiver]] tables"))
    max_retries: int = field(default=5, metadata=setting(Integer(1, 1000)))
    connect_timeout: float = field(default=10.0, metadata=setting(Number(0, 3600)))
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
    source: str = field(default=MAPPING_SOURCE, metadata=not_a_key("the file's name"))
    #: Prometheus text-format metrics rewritten after each run (node_exporter's textfile).
    metrics_textfile: Path | None = field(
        default=None, metadata=setting(PathValue(check=_need_prom_path))
    )

    @classmethod
    def from_mapping(
        cls, d: Mapping[str, Any], base_dir: Path, source: str = MAPPING_SOURCE
    ) -> SenderConfig:
        """Build from a whole sender document: ``[sender]`` plus ``[[receiver]]`` tables."""
        doc = _document(d, source)
        if "sender" not in doc:
            if _kind_of(doc) in (None, "sender"):  # not another role's file: a typo'd
                _check_top(doc, source, ("sender", "receiver"))  # [sendr] is named
            raise _no_role(doc, "sender", source, "missing table")
        _check_top(doc, source, ("sender", "receiver"))
        t = _Table(doc["sender"], source, "[sender]", base_dir.absolute(), keys_of(cls))
        values = _read_table(cls, t)
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
            f"{source}: [[receiver]]: must be a non-empty array of tables, got {_type_name(value)}"
        )
    out: list[ReceiverEndpoint] = []
    names: dict[str, int] = {}
    addresses: dict[tuple[str, int], int] = {}
    known = keys_of(ReceiverEndpoint)
    for i, item in enumerate(value, start=1):
        t = _Table(item, source, f"[[receiver]] #{i}", base_dir, known)
        r = ReceiverEndpoint(**_read_table(ReceiverEndpoint, t))
        if r.name in names:
            raise t.error("name", f"duplicate of [[receiver]] #{names[r.name]}: {r.name!r}")
        address = (r.host.lower(), r.port)
        if address in addresses:
            raise t.error("port", f"duplicate of [[receiver]] #{addresses[address]}: {r.address}")
        names[r.name] = i
        addresses[address] = i
        out.append(r)
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
        if not _is_host(host):
            raise ValueError(f"{host!r} is not a host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {port_text!r}")
    return host, int(port_text)


_RATE_RE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(?:([bkmgtp])(b|ib)?)?$", re.IGNORECASE)
RATE_HELP = (
    "write a number with an optional K, M or G suffix: 4M is 4 MiB/s, a bare number is "
    "KiB/s, KB, MB and GB are powers of 1000, 0 is no limit"
)
#: rsync's smallest cap other than 0 (unlimited).
MIN_RATE = 512


def parse_rate(text: str) -> int:
    """Bytes per second from rsync's ``--bwlimit`` syntax; ValueError says what is wrong.

    As rsync reads it: a number (fractions allowed) and an optional suffix letter
    B, K, M, G, T or P (any case) meaning bytes or powers of 1024, followed by an
    optional ``B`` that makes the powers 1000 or ``iB`` that keeps them 1024; no
    suffix is KiB. ``0`` is no limit; other rates under 512 bytes/s are refused.
    rsync's ``+1``/``-1`` byte offsets are not taken: they mean nothing for a rate.
    """
    m = _RATE_RE.match(text.strip())
    if m is None:
        raise ValueError(f"not a rate: {text!r}; {RATE_HELP}")
    number, letter, unit = m.groups()
    power = "bkmgtp".index((letter or "k").lower())
    base = 1000 if unit is not None and unit.lower() == "b" else 1024
    rate = int(float(number) * base**power)
    if 0 < rate < MIN_RATE or (rate == 0 and float(number) != 0):
        raise ValueError(
            f"rate too small: {text!r} (at least {MIN_RATE} bytes/s, or 0 for no limit)"
        )
    return rate


def _default_allow() -> list[IPNetwork]:
    return [ipaddress.ip_network(n) for n in DEFAULT_ALLOW]


@dataclass(frozen=True)
class ReceiverConfig:
    listen_host: str = field(metadata=setting(ListenAddress(), key="listen", part=0))
    listen_port: int = field(metadata=setting(ListenAddress(), key="listen", part=1))
    host_key: Path = field(metadata=setting(PathValue(check=_need_private_key)))
    authorized_keys: Path = field(metadata=setting(PathValue(check=_need_authorized_keys)))
    schema_dir: Path = field(metadata=setting(PathValue(check=_need_storage_dir, create=True)))
    data_dirs: list[Path] = field(metadata=setting(PathList(check=_need_storage_dir, create=True)))
    allow: list[IPNetwork] = field(default_factory=_default_allow, metadata=setting(Networks()))
    max_sessions: int = field(default=16, metadata=setting(Integer(1, 10000)))
    idle_timeout: float = field(default=120.0, metadata=setting(Number(0, 86400)))
    login_grace_time: float = field(default=20.0, metadata=setting(Number(0, 3600)))
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
    #: How a batch of received files is made durable: "syncfs" (one call per batch,
    #: where the kernel reports its errors) or "fsync" (file by file).
    sync_method: str = field(default=SYNCFS, metadata=setting(Choice(SYNC_METHODS)))
    #: ``host:port`` of the Prometheus ``/metrics`` endpoint (receiver/metrics.py).
    metrics_listen: tuple[str, int] | None = field(default=None, metadata=setting(ListenAddress()))
    #: Log lines appended here too (``sealsync serve`` only; a host logs its own way).
    log_file: Path | None = field(default=None, metadata=setting(PathValue()))
    #: Seconds without a byte from a sender before a keepalive asks for one.
    client_alive_interval: float = field(default=15.0, metadata=setting(Number(0, 3600)))
    #: Unanswered keepalive intervals after which the connection is closed.
    client_alive_count_max: int = field(default=3, metadata=setting(Integer(1, 100)))
    source: str = field(default=MAPPING_SOURCE, metadata=not_a_key("the file's name"))

    @property
    def listen(self) -> str:
        return format_endpoint(self.listen_host, self.listen_port)

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
        values = _role_values(cls, "receiver", d, base_dir, source, create, init)
        return cls(**values, source=source)


@dataclass(frozen=True)
class LoaderConfig:
    receiver_data_dirs: list[Path] = field(metadata=setting(PathList(check=_need_dir)))
    table_path: Path = field(metadata=setting(PathValue()))
    state_dir: Path = field(metadata=setting(PathValue()))
    master: str = field(default="local[*]", metadata=setting(Text()))
    source: str = field(default=MAPPING_SOURCE, metadata=not_a_key("the file's name"))
    #: The interpreter executors run; it needs pyarrow and tsfile (None: see ingest).
    python: str | None = field(default=None, metadata=setting(Text()))
    #: Spark settings for the session the loader starts (``spark.executor.memory``...).
    spark: dict[str, str] = field(default_factory=dict, metadata=setting(Settings()))
    #: Prometheus text-format metrics rewritten after each run (node_exporter's textfile).
    metrics_textfile: Path | None = field(
        default=None, metadata=setting(PathValue(check=_need_prom_path))
    )

    @classmethod
    def from_mapping(
        cls, d: Mapping[str, Any], base_dir: Path, source: str = MAPPING_SOURCE
    ) -> LoaderConfig:
        """Build from ``{"loader": {...}}`` or the ``[loader]`` table's keys alone.

        ``table_path`` and ``state_dir`` are created by the first run, not here:
        loading a config (``status``) must not leave folders behind.
        """
        return cls(**_role_values(cls, "loader", d, base_dir, source, True), source=source)


AnyConfig = SenderConfig | ReceiverConfig | LoaderConfig


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed document, or a one-line ConfigError naming the file."""
    try:
        with open(path, "rb") as f:
            problem = permissions.writable_problem(path, os.fstat(f.fileno()).st_mode)
            if problem is not None:
                raise ConfigError(f"{path}: {problem}")
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


def load_receiver_config(path: str | os.PathLike[str], *, init: bool = False) -> ReceiverConfig:
    return _load(path, functools.partial(ReceiverConfig.from_mapping, init=init))


def load_loader_config(path: str | os.PathLike[str]) -> LoaderConfig:
    return _load(path, LoaderConfig.from_mapping)


def load_any(path: str | os.PathLike[str], *, create: bool = True) -> AnyConfig:
    """Whichever role the file configures, told by its top-level tables (for ``status``).

    ``create=False`` loads without creating any folder.
    """
    path = Path(path)
    doc = read_toml(path)
    base_dir = path.absolute().parent
    kind = _kind_of(doc)
    if kind == "sender":
        return SenderConfig.from_mapping(doc, base_dir, str(path))
    if kind == "loader":
        return LoaderConfig.from_mapping(doc, base_dir, str(path))
    if kind == "receiver":
        return ReceiverConfig.from_mapping(doc, base_dir, str(path), create=create)
    raise ConfigError(f"{path}: no [sender], [receiver] or [loader] table")
