"""Builders for config files and small instances, shared by the config/CLI/lock tests.

Not a test module (no ``test_`` prefix); imported by name because pytest puts this
folder on ``sys.path``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sealsync.keys import generate_keypair
from sealsync.permissions import restrict_writes

if TYPE_CHECKING:
    from sealsync.config import LoaderConfig


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string for our values
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):  # an inline table, keys quoted (Spark's contain dots)
        return "{" + ", ".join(f"{json.dumps(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def dump_toml(doc: Mapping[str, Any]) -> str:
    """Enough TOML for config files: top-level tables, arrays of tables, scalars, lists."""
    out: list[str] = []
    for key, value in doc.items():
        if not isinstance(value, Mapping | list) or (
            isinstance(value, list) and not all(isinstance(x, Mapping) for x in value)
        ):
            out.insert(0, f"{key} = {_value(value)}")
    for key, value in doc.items():
        if isinstance(value, Mapping):
            out.append(f"\n[{key}]")
            out.extend(f"{k} = {_value(v)}" for k, v in value.items())
        elif isinstance(value, list) and value and all(isinstance(x, Mapping) for x in value):
            for item in value:
                out.append(f"\n[[{key}]]")
                out.extend(f"{k} = {_value(v)}" for k, v in item.items())
    return "\n".join(out) + "\n"


def write_config(path: Path, doc: Mapping[str, Any]) -> Path:
    path.write_text(dump_toml(doc), encoding="utf-8")
    restrict_writes(path)  # a config others can write is refused, whatever the umask
    return path


def sender_doc() -> dict[str, Any]:
    return {
        "sender": {
            "schema_dir": "edge/schema",
            "data_dirs": ["edge/data"],
            "identity": "keys/edge",
            "known_hosts": "keys/known_hosts",
            "max_retries": 5,
        },
        "receiver": [{"name": "dc1", "host": "127.0.0.1", "port": 5555}],
    }


def make_sender_instance(root: Path) -> None:
    """The folders and files a sender config needs to exist (keys are real keys)."""
    (root / "edge/schema").mkdir(parents=True, exist_ok=True)
    (root / "edge/data").mkdir(parents=True, exist_ok=True)
    if not (root / "keys/edge").exists():
        generate_keypair(root / "keys/edge", comment="edge")
    (root / "keys/known_hosts").write_text("")
    restrict_writes(root / "keys/known_hosts")


def make_sender(root: Path, doc: Mapping[str, Any] | None = None) -> Path:
    """A sender instance under ``root`` and its config ``root/S.toml``."""
    make_sender_instance(root)
    return write_config(root / "S.toml", sender_doc() if doc is None else doc)


def receiver_doc() -> dict[str, Any]:
    return {
        "receiver": {
            "listen": "127.0.0.1:5555",
            "host_key": "keys/host",
            "authorized_keys": "keys/authorized_keys",
            "allow": ["127.0.0.0/8"],
            "schema_dir": "dc/schema",
            "data_dirs": ["dc/data"],
        }
    }


def make_receiver(
    root: Path, doc: Mapping[str, Any] | None = None, *, folders: bool = True
) -> Path:
    """A receiver config ``root/R.toml``; ``folders``: its storage folders exist too."""
    if folders:
        (root / "dc/schema").mkdir(parents=True, exist_ok=True)
        (root / "dc/data").mkdir(parents=True, exist_ok=True)
    (root / "keys").mkdir(mode=0o755, parents=True, exist_ok=True)  # others may not write it
    (root / "keys/host").write_text("not parsed at load\n")
    (root / "keys/host").chmod(0o600)  # a private key: its owner's alone, or it is refused
    (root / "keys/authorized_keys").write_text("")
    restrict_writes(root / "keys/authorized_keys")
    return write_config(root / "R.toml", receiver_doc() if doc is None else doc)


def loader_doc() -> dict[str, Any]:
    return {
        "loader": {
            "receiver_data_dirs": ["dc/data"],
            "table_path": "warehouse/points",
            "state_dir": "warehouse/_state",
        }
    }


def make_loader(root: Path, doc: Mapping[str, Any] | None = None) -> Path:
    (root / "dc/data").mkdir(parents=True, exist_ok=True)
    return write_config(root / "L.toml", loader_doc() if doc is None else doc)


def loader_config_file(
    path: Path,
    config: LoaderConfig,
    *,
    data_dirs: Sequence[Path] | None = None,
    master: str = "local[1]",
    **keys: Any,
) -> Path:
    """``config`` as the TOML ``sealsync load --config`` reads, for the tests that run the
    command: its receiver data dirs (or ``data_dirs``), table and state, ``master``
    (one core by default: the command's JVM shares the machine with the test's), and
    any other ``[loader]`` keys."""
    loader: dict[str, Any] = {
        "receiver_data_dirs": [str(d) for d in (data_dirs or config.receiver_data_dirs)],
        "table_path": str(config.table_path),
        "state_dir": str(config.state_dir),
        "master": master,
    }
    loader.update({k: str(v) if isinstance(v, Path) else v for k, v in keys.items()})
    return write_config(path, {"loader": loader})


def write_sealed(data_dir: Path, name: str, *, sealed: bool = True, mods: bool = False) -> None:
    """A fake data file (plain bytes are enough for selection) and its sidecars."""
    path = data_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"TsFile" + name.encode() + b"TsFile")
    if sealed:
        path.with_name(path.name + ".resource").write_bytes(b"resource")
    if mods:
        path.with_name(path.name + ".mods").write_bytes(b"mods")


HOLDER = """
import sys
from filelock import FileLock
lock = FileLock(sys.argv[1], timeout=5)
lock.acquire()
print("locked", flush=True)
sys.stdin.read()
lock.release()
"""


@contextmanager
def held_elsewhere(path: Path) -> Iterator[None]:
    """Hold the lock file at ``path`` from another process for the ``with`` body."""
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        yield
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        code = proc.wait(timeout=10)
        proc.stdout.close()  # unclosed, it is a ResourceWarning: an error in this suite
        assert code == 0
