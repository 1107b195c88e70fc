"""Storage backends by ``[receiver.storage] kind`` (receiver/storage/backends.py), the
contract's capabilities, and the older flat ``iotdb_*`` keys (docs/design.md §4.1)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import SEALSYNC, make_deployment

from receiver.service import ReceiverService
from receiver.storage import (
    DirectoryStorage,
    Storage,
    StorageError,
    as_storage,
    backends,
    open_storage,
)
from receiver.storage.iotdb import IoTDBSettings, IoTDBStorage
from sealsync.config import ReceiverConfig, load_receiver_config
from sealsync.errors import ConfigError

BASE = {
    "listen": "127.0.0.1:1",
    "host_key": "keys/host",
    "authorized_keys": "keys/authorized_keys",
    "schema_dir": "dc/schema",
    "data_dirs": ["dc/data"],
}


def _config(tmp_path: Path, **extra: Any) -> ReceiverConfig:
    (tmp_path / "keys").mkdir(exist_ok=True)
    host = tmp_path / "keys" / "host"
    if not host.exists():
        from sealsync.keys import generate_keypair

        generate_keypair(host)
        (tmp_path / "keys" / "authorized_keys").write_text(host.with_suffix(".pub").read_text())
    doc = {"receiver": {**BASE, **extra}}
    return ReceiverConfig.from_mapping(doc, tmp_path, str(tmp_path / "R.toml"), init=True)


def test_no_storage_table_is_the_directory_storage(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert config.storage.kind == "directory"
    storage = open_storage(config)
    assert type(storage) is DirectoryStorage
    assert storage.measures_usage and storage.feeds_loader
    assert type(open_storage(_config(tmp_path, storage={"kind": "directory"}))) is DirectoryStorage


def test_the_iotdb_table_is_read_by_its_backend(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret\nignored\n")
    config = _config(
        tmp_path,
        storage={"kind": "iotdb", "host": "10.0.0.9", "port": 6668, "password_file": "pw"},
    )
    settings = backends.settings(config)
    assert (settings.host, settings.port, settings.dialect) == ("10.0.0.9", 6668, "2.0")
    assert settings.password_file == tmp_path / "pw"  # relative to the config's folder
    storage = open_storage(config)
    assert isinstance(storage, IoTDBStorage)
    assert storage.settings == IoTDBSettings(
        "10.0.0.9", 6668, "root", "s3cret", "2.0", sys.executable
    )
    assert storage.client._process is None  # built, not started: no session yet


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"kind": "iotdb", "hots": "x"},
            "[receiver.storage] hots: unknown key (did you mean host?)",
        ),
        (
            {"kind": "iotdb", "port": 0},
            "[receiver.storage] port: must be between 1 and 65535, got 0",
        ),
        (
            {"kind": "iotdb", "dialect": "1.3"},
            '[receiver.storage] dialect: must be "0.12" or "2.0", got \'1.3\'',
        ),
        ({"kind": "directory", "host": "x"}, "[receiver.storage] host: unknown key"),
        ({"kind": "s3"}, "[receiver.storage] kind: unknown storage 's3' (known: directory, iotdb)"),
        ({"host": "x"}, "[receiver] storage.kind: missing: say which storage"),
        ("nfs", "[receiver] storage kind: unknown storage 'nfs' (known: directory, iotdb)"),
    ],
)
def test_a_bad_storage_table_is_one_line_naming_the_key(
    tmp_path: Path, table: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        open_storage(_config(tmp_path, storage=table))
    text = str(caught.value)
    assert "\n" not in text and caught.value.exit_code == 2
    assert text.startswith(f"{tmp_path / 'R.toml'}: ")
    assert message in text, text


def test_the_flat_iotdb_keys_still_work_with_a_notice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sealsync.config"):
        config = _config(tmp_path, storage="iotdb", iotdb_port=6690, iotdb_dialect="0.12")
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1 and "deprecated: write [receiver.storage]" in notices[0]
    assert config.storage.kind == "iotdb"
    settings = backends.settings(config)
    assert (settings.port, settings.dialect) == (6690, "0.12")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sealsync.config"):
        _config(tmp_path, storage={"kind": "iotdb", "port": 6690})
    assert caplog.records == []  # the table form says nothing
    with pytest.raises(ConfigError, match=r"iotdb_port: give it as port in \[receiver.storage\]"):
        _config(tmp_path, storage={"kind": "iotdb"}, iotdb_port=6690)


class Duck:
    """A host storage written before the contract was a class."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def load(self, sender: str, name: str, staged: Path) -> None:
        self.loaded.append(name)

    def delete(self, sender: str, name: str) -> bool:
        return False

    def list(self, sender: str) -> set[str]:
        return set(self.loaded)

    def inventory(self, sender: str) -> dict[str, tuple[int, str]]:
        return {}


def test_a_host_storage_without_the_class_is_adapted_once_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    duck = Duck()
    with caplog.at_level(logging.WARNING):
        storage = as_storage(duck)
    assert isinstance(storage, Storage) and not storage.measures_usage
    assert not storage.feeds_loader and list(storage.loader_copies("u", "n")) == []
    assert any("does not subclass receiver.Storage" in r.getMessage() for r in caplog.records)
    storage.load("u", "sequence/a.tsfile", Path("x"))
    assert storage.list("u") == {"sequence/a.tsfile"}
    with pytest.raises(StorageError, match="cannot measure"):
        storage.usage("u")
    assert as_storage(storage) is storage

    class Half:
        def load(self, sender: str, name: str, staged: Path) -> None: ...

    with pytest.raises(TypeError, match="lacks delete, list, inventory: subclass receiver.Storage"):
        as_storage(Half())


def test_a_quota_needs_a_storage_that_measures(tmp_path: Path) -> None:
    config = _config(tmp_path, sender_quota_bytes=1 << 20)
    with pytest.raises(Exception, match="sender_quota_bytes needs a storage that can measure"):
        ReceiverService(config, storage=Duck(), inspect=lambda p: None)  # type: ignore[arg-type,return-value]


def test_a_backend_is_one_module_and_one_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What docs/design.md §4.1 promises: a module with ``Settings`` and ``open_storage``,
    registered under a kind, is picked by ``[receiver.storage] kind``, its keys read
    and checked by the engine, and started and closed by the service."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "memstore.py").write_text(
        "from dataclasses import dataclass, field\n"
        "from receiver.storage import Storage\n"
        "from sealsync.config.schema import Text, setting\n"
        "EVENTS = []\n"
        "@dataclass(frozen=True)\n"
        "class Settings:\n"
        '    label: str = field(default="m", metadata=setting(Text()))\n'
        "class MemStore(Storage):\n"
        "    def __init__(self, label): self.label = label\n"
        "    def load(self, sender, name, staged): pass\n"
        "    def delete(self, sender, name): return False\n"
        "    def list(self, sender): return set()\n"
        "    def inventory(self, sender): return {}\n"
        "    def start(self): EVENTS.append(('start', self.label))\n"
        "    def close(self): EVENTS.append(('close', self.label))\n"
        "def open_storage(config, settings): return MemStore(settings.label)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setitem(backends.BACKENDS, "mem", "memstore")
    config = _config(tmp_path, storage={"kind": "mem", "label": "edge-dc"})
    service = ReceiverService(config, inspect=lambda p: None)  # type: ignore[arg-type,return-value]
    import memstore  # type: ignore[import-not-found]

    assert type(service.storage).__name__ == "MemStore"
    with pytest.raises(ConfigError, match=r"lable: unknown key \(did you mean label\?\)"):
        open_storage(_config(tmp_path, storage={"kind": "mem", "lable": "x"}))
    service.start()
    service.stop()
    assert memstore.EVENTS == [("start", "edge-dc"), ("close", "edge-dc")]


@pytest.mark.slow
def test_check_and_serve_refuse_an_unknown_kind_in_one_line(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    text = dep.receiver_config.read_text()
    dep.receiver_config.chmod(0o600)
    dep.receiver_config.write_text(text + '\n[receiver.storage]\nkind = "hdfs"\n')
    for command in ("check", "serve"):
        result = subprocess.run(
            [*SEALSYNC, command, "--config", str(dep.receiver_config)],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 2, (command, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert lines[-1].endswith(
            "[receiver.storage] kind: unknown storage 'hdfs' (known: directory, iotdb)"
        ), (command, result.stderr)
        assert "Traceback" not in result.stderr
    assert load_receiver_config(dep.receiver_config).storage.kind == "hdfs"
