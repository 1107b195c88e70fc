"""The receiver plugin: what a host server imports to embed it (docs/design.md §4).

The receiver runs inside a host process (a database server; ``sealsync serve`` is the
minimal one). Everything a host needs is importable from this package, and only from
here is it promised to stay put::

    from receiver import ReceiverService, StorageError, load_receiver_config

    config = load_receiver_config("receiver.toml")          # ConfigError: one line
    with ReceiverService(config, storage=MyStorage()) as service:
        host, port = service.address                         # listening from here on
        ...                                                  # until the host stops

``ReceiverService(config, storage=None)``
    The SSH server and the per-sender loaders. ``start()``/``stop()``, or a context
    manager; ``address`` is where it listens. ``config`` is a :class:`ReceiverConfig`
    (or the ``[receiver]`` table as a mapping). Without ``storage`` the service opens
    the one ``[receiver.storage]`` names (by default :class:`DirectoryStorage`, the
    receiver's data dirs) and closes it when it stops; a storage the host passes is
    the host's to close.

:class:`Storage`
    The host's side, a class to subclass with four methods: ``load(sender, name,
    staged)`` moves a verified file and its sidecars in, ``delete(sender, name)``
    removes one, ``list(sender)`` and ``inventory(sender)`` say what is held
    (``inventory`` gives size and the MD5 recorded on the file, :func:`recorded_md5`,
    for ``send --reconcile``). Each must be idempotent and durable on return: the
    loader replays after a crash without knowing how far it got. A load or delete the
    host cannot do raises :class:`StorageError`; the staged file is kept and retried.
    The optional capabilities (``usage`` for quotas, ``deferred_sync``, ``start`` and
    ``close``, ``feeds_loader``) have defaults there (receiver/storage/contract.py).

``load_receiver_config(path, init=False)``
    The receiver's TOML as a :class:`ReceiverConfig`; ``init`` creates the schema and
    data dirs (only on a first start: a typo'd or unmounted folder must stop the host,
    not become an empty one). Bad input raises :class:`ConfigError`, one line naming
    the key and the fix; every sealsync error is a :class:`SealsyncError`.

The receiver reads untrusted files in worker processes (forkserver): the embedding
program must guard its entry point with ``if __name__ == "__main__":``.
``examples/host_server.py`` is a complete host with its own storage.

:class:`IoTDBStorage`, :class:`IoTDBSettings`
    The storage of ``[receiver.storage] kind = "iotdb"``: the default storage's copies,
    each also loaded into a running IoTDB (receiver/storage/iotdb.py); a host passes
    ``IoTDBStorage(config.data_dirs, config.schema_dir, IoTDBSettings(...)).connect()``.

The names are imported on first use, so that importing one module of the package
(``receiver.layout``, as ``sealsync status`` does) does not start the SSH stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from receiver.inventory import recorded_md5
    from receiver.service import ReceiverService
    from receiver.storage import DirectoryStorage, Storage, StorageError
    from receiver.storage.iotdb import IoTDBSettings, IoTDBStorage
    from sealsync.config import ReceiverConfig, load_receiver_config
    from sealsync.errors import ConfigError, SealsyncError

__all__ = [
    "ConfigError",
    "DirectoryStorage",
    "IoTDBSettings",
    "IoTDBStorage",
    "ReceiverConfig",
    "ReceiverService",
    "SealsyncError",
    "Storage",
    "StorageError",
    "load_receiver_config",
    "recorded_md5",
]
_HOMES = {
    "ConfigError": "sealsync.errors",
    "DirectoryStorage": "receiver.storage",
    "IoTDBSettings": "receiver.storage.iotdb",
    "IoTDBStorage": "receiver.storage.iotdb",
    "ReceiverConfig": "sealsync.config",
    "ReceiverService": "receiver.service",
    "SealsyncError": "sealsync.errors",
    "Storage": "receiver.storage",
    "StorageError": "receiver.storage",
    "load_receiver_config": "sealsync.config",
    "recorded_md5": "receiver.inventory",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
