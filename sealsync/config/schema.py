"""The schema engine: config keys declared on dataclass fields, read and checked in one walk.

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
loader, ``read_table``, walks the fields: it refuses keys no field declares (with
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
import ipaddress
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, fields
from pathlib import Path
from typing import Any

from sealsync.config.values import (
    IPNetwork,
    MaxStartups,
    is_host,
    parse_listen,
    parse_rate,
)
from sealsync.errors import ConfigError

MAPPING_SOURCE = "<mapping>"
#: The ``Field.metadata`` entry that holds a field's ``Setting`` (or ``NotAKey``).
METADATA_KEY = "sealsync.config"

_log = logging.getLogger("sealsync.config")


class Table:
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
            raise self.error(None, f"must be a table, got {type_name(data)}")
        self.data: Mapping[str, Any] = data
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise self.error(unknown[0], f"unknown key ({suggest(unknown[0], known)})")

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

    def read(self, table: Table, key: str, value: object) -> Any:
        raise NotImplementedError

    def after(self, table: Table, key: str, value: Any) -> None:
        """A step that changes the disk, run only once every key of the table is valid."""


@dataclass(frozen=True)
class Text(Reader):
    """A non-empty one-line string."""

    def read(self, table: Table, key: str, value: object) -> str:
        if not isinstance(value, str):
            raise table.error(key, f"must be a string, got {type_name(value)}")
        if not value.strip():
            raise table.error(key, "must not be empty")
        if any(ord(ch) < 0x20 for ch in value):
            raise table.error(key, "must not contain control characters")
        return value


@dataclass(frozen=True)
class Host(Reader):
    """A host name or IP address as it goes into a state folder name."""

    def read(self, table: Table, key: str, value: object) -> str:
        host = Text().read(table, key, value)
        if not is_host(host) or host.startswith("["):
            raise table.error(key, f"not a host name or IP address (no brackets): {host!r}")
        return host


@dataclass(frozen=True)
class ListenAddress(Reader):
    """``host:port`` or ``[v6]:port`` as a ``(host, port)`` pair (see ``parse_listen``)."""

    def read(self, table: Table, key: str, value: object) -> tuple[str, int]:
        text = Text().read(table, key, value)
        try:
            return parse_listen(text)
        except ValueError as e:
            raise table.error(key, f"{e}: {text!r}") from None


@dataclass(frozen=True)
class Rate(Reader):
    """A bandwidth cap in rsync's ``--bwlimit`` syntax, as bytes per second (see
    ``parse_rate``); a TOML number is a bare number (KiB/s)."""

    def read(self, table: Table, key: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise table.error(key, f'must be a rate such as "4M", got {type_name(value)}')
        try:
            return parse_rate(str(value))
        except ValueError as e:
            raise table.error(key, str(e)) from None


@dataclass(frozen=True)
class Choice(Reader):
    """One of a few fixed strings."""

    choices: tuple[str, ...]

    def read(self, table: Table, key: str, value: object) -> str:
        if value not in self.choices:
            shown = repr(value) if isinstance(value, str) else type_name(value)
            allowed = " or ".join(f'"{c}"' for c in self.choices)
            raise table.error(key, f"must be {allowed}, got {shown}")
        return value


@dataclass(frozen=True)
class Flag(Reader):
    """``true`` or ``false`` (a TOML boolean; ``"yes"`` or ``1`` is a mistake)."""

    def read(self, table: Table, key: str, value: object) -> bool:
        if not isinstance(value, bool):
            raise table.error(key, f"must be true or false, got {type_name(value)}")
        return value


@dataclass(frozen=True)
class Integer(Reader):
    """An integer in ``[lo, hi]``."""

    lo: int
    hi: int

    def read(self, table: Table, key: str, value: object) -> int:
        # bool is an int subclass in Python; `true` for a count is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise table.error(key, f"must be an integer, got {type_name(value)}")
        if not self.lo <= value <= self.hi:
            raise table.error(key, f"must be between {self.lo} and {self.hi}, got {value}")
        return value


@dataclass(frozen=True)
class Number(Reader):
    """A finite number in ``(lo, hi]``, as a float (an integer is accepted)."""

    lo: float
    hi: float

    def read(self, table: Table, key: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise table.error(key, f"must be a number, got {type_name(value)}")
        if not math.isfinite(value) or not self.lo < value <= self.hi:
            raise table.error(
                key, f"must be greater than {self.lo:g} and at most {self.hi:g}, got {value}"
            )
        return float(value)


#: What a path must already be, checked as the key is read: raises ``table.error``.
PathCheck = Callable[[Table, str, Path], object]


@dataclass(frozen=True)
class PathValue(Reader):
    """A path relative to the config file's folder; ``create``: a folder ``init`` makes."""

    check: PathCheck | None = None
    create: bool = False

    def read(self, table: Table, key: str, value: object) -> Path:
        path = table.resolve(key, Text().read(table, key, value))
        if self.check is not None and not (self.create and (table.init or not table.create)):
            self.check(table, key, path)
        return path

    def after(self, table: Table, key: str, value: Path) -> None:
        if self.create and table.init and table.create:
            make_dir(table, key, value)


@dataclass(frozen=True)
class TextList(Reader):
    """A non-empty list of non-empty strings."""

    def read(self, table: Table, key: str, value: object) -> list[str]:
        if not isinstance(value, list):
            raise table.error(key, f"must be a list of strings, got {type_name(value)}")
        if not value:
            raise table.error(key, "must not be empty")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise table.error(f"{key}[{i}]", f"must be a string, got {type_name(item)}")
            if not item.strip():
                raise table.error(f"{key}[{i}]", "must not be empty")
        return value


@dataclass(frozen=True)
class PathList(Reader):
    """Distinct paths, each like ``PathValue`` and named ``key[i]`` in errors."""

    check: PathCheck | None = None
    create: bool = False

    def read(self, table: Table, key: str, value: object) -> list[Path]:
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

    def after(self, table: Table, key: str, value: list[Path]) -> None:
        if self.create and table.init and table.create:
            for i, path in enumerate(value):
                make_dir(table, f"{key}[{i}]", path)


@dataclass(frozen=True)
class Networks(Reader):
    """A list of CIDR networks, host bits zero (``10.0.0.1/8`` is a mistake)."""

    def read(self, table: Table, key: str, value: object) -> list[IPNetwork]:
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

    def read(self, table: Table, key: str, value: object) -> MaxStartups:
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

    def read(self, table: Table, key: str, value: object) -> dict[str, str]:
        if not isinstance(value, Mapping):
            raise table.error(key, f"must be a table, got {type_name(value)}")
        out: dict[str, str] = {}
        for name, item in value.items():
            if isinstance(item, bool):
                out[name] = "true" if item else "false"
            elif isinstance(item, str | int | float):
                out[name] = str(item)
            else:
                raise table.error(
                    f"{key}.{name}", f"must be a string, number or boolean, got {type_name(item)}"
                )
        return out


def make_dir(table: Table, key: str, path: Path) -> Path:
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


def read_table(cls: type[Any], table: Table) -> dict[str, Any]:
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


def suggest(key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"did you mean {close[0]}?" if close else f"known keys: {', '.join(known)}"


def type_name(value: object) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)
