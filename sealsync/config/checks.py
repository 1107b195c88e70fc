"""What must already be true of a path a config key names, checked when the file is read.

Each check takes the table being read, the key and the resolved path, and returns the
path or raises the ``ConfigError`` that names the file, the key and what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sealsync import sshfiles
from sealsync.config.schema import Table
from sealsync.errors import ConfigError


def need_dir(table: Table, key: str, path: Path) -> Path:
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise table.error(key, f"{path} {what}")
    return path


def need_readable_file(table: Table, key: str, path: Path) -> Path:
    if not path.is_file():
        what = "does not exist" if not path.exists() else "is not a regular file"
        raise table.error(key, f"{path} {what}")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise table.error(key, f"cannot read {path}: {e.strerror or e}") from None
    return path


def need_private_key(table: Table, key: str, path: Path) -> Path:
    """A private key this end presents: a private key, and its owner's alone."""
    need_readable_file(table, key, path)
    try:
        problem = sshfiles.private_key_problem(path)
    except OSError as e:
        raise table.error(key, f"cannot read {path}: {e.strerror or e}") from None
    if problem is not None:
        raise table.error(key, f"{path}: {problem}")
    return path


def trust_file(parse: Callable[[Path], object]) -> Callable[[Table, str, Path], Path]:
    """The check of a trust file: readable, others cannot write it, and ``parse`` (which
    names ``file:line`` of a malformed line) accepts every line."""

    def check(table: Table, key: str, path: Path) -> Path:
        need_readable_file(table, key, path)
        try:
            parse(path)
        except ConfigError as e:
            raise table.error(key, str(e)) from None
        return path

    return check


need_known_hosts = trust_file(sshfiles.read_known_hosts)
need_authorized_keys = trust_file(sshfiles.read_authorized_keys)


def need_prom_path(table: Table, key: str, path: Path) -> Path:
    """A metrics textfile: its folder exists, and node_exporter reads only ``*.prom``."""
    if path.suffix != ".prom":
        raise table.error(key, f"{path} must end in .prom (node_exporter reads only *.prom)")
    if not path.parent.is_dir():
        raise table.error(key, f"{path.parent} (its folder) does not exist")
    if path.is_dir():
        raise table.error(key, f"{path} is a directory")
    return path


def need_storage_dir(table: Table, key: str, path: Path) -> Path:
    """A receiver folder: never made silently, a typo or an unmounted disk would take
    the files (docs/operations.md, "Running the receiver")."""
    if not path.is_dir():
        if path.exists():
            raise table.error(key, f"{path} is not a directory")
        raise table.error(
            key, f"{path} does not exist: create it with `sealsync serve --init` or mkdir"
        )
    return path
