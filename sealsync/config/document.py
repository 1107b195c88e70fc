"""A config file as a whole: the TOML document, its top-level tables, which role it is for.

A file configures one role, told by its top-level tables; given to the wrong command
it is refused with a line that says which command it is for.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sealsync import permissions
from sealsync.config.schema import Table, keys_of, read_table, type_name
from sealsync.errors import ConfigError

_T = TypeVar("_T")


def check_top(doc: Mapping[str, Any], source: str, known: tuple[str, ...]) -> None:
    unknown = sorted(set(doc) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = (
            f"did you mean [{close[0]}]?"
            if close
            else "expected " + ", ".join(f"[{k}]" for k in known)
        )
        raise ConfigError(f"{source}: [{unknown[0]}]: unknown table or key ({hint})")


def document(d: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{source}: the configuration must be a table, got {type_name(d)}")
    return d


ROLE_COMMANDS = {"sender": "sealsync send", "receiver": "sealsync serve", "loader": "sealsync load"}
"""The command each role's file is for, named when a file of one role is given to another."""


def kind_of(doc: Mapping[str, Any]) -> str | None:
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


def no_role(doc: Mapping[str, Any], role: str, source: str, problem: str) -> ConfigError:
    """``[role]`` is missing or not a table; when the file is another role's (the
    operator gave ``sealsync serve`` the sender's file, say), the line says so and
    which command that file is for, since "missing table" alone sends them looking
    for a typo in a file that has none."""
    message = f"{source}: [{role}]: {problem}"
    kind = kind_of(doc)
    if kind is not None and kind != role:
        message += (
            f": this is a {kind} config, for '{ROLE_COMMANDS[kind]}'; this needs a {role} config"
        )
    return ConfigError(message)


def role_table(
    d: Mapping[str, Any],
    role: str,
    source: str,
    base_dir: Path,
    known: tuple[str, ...],
    create: bool = True,
) -> Table:
    """The ``[role]`` table, given either the whole document or that table alone.

    The receiver plugin and the loader are also built from Python mappings, where
    passing just the table's keys is the natural thing to write.
    """
    doc = document(d, source)
    if role in doc and isinstance(doc[role], Mapping):
        check_top(doc, source, (role,))
        return Table(doc[role], source, f"[{role}]", base_dir, known, create)
    if role in doc:
        raise no_role(doc, role, source, f"must be a table, got {type_name(doc[role])}")
    if any(k in doc for k in known):
        return Table(doc, source, f"[{role}]", base_dir, known, create)
    raise no_role(doc, role, source, "missing table")


def role_values(
    cls: type[Any],
    role: str,
    d: Mapping[str, Any],
    base_dir: Path,
    source: str,
    create: bool = True,
    init: bool = False,
) -> dict[str, Any]:
    """``cls``'s fields from the ``[role]`` table of ``d`` (or ``d`` being that table)."""
    table = role_table(d, role, source, base_dir.absolute(), keys_of(cls), create)
    table.init = init
    return read_table(cls, table)


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


def load_file(path: str | os.PathLike[str], build: Callable[..., _T]) -> _T:
    path = Path(path)
    doc = read_toml(path)
    return build(doc, path.absolute().parent, str(path))
