"""Storage backends by name: ``[receiver.storage] kind = "<name>"`` picks one.

A backend is one module that defines ``Settings`` (a config class whose fields declare
its keys of ``[receiver.storage]``, read by the same engine as every other table:
unknown keys refused with "did you mean", paths resolved against the config file's
folder) and ``open_storage(config, settings)``, which builds its :class:`Storage`
without touching anything (the service calls ``start()``). Adding a backend is that
module and one line in :data:`BACKENDS` (or :func:`register` from a host). Modules are
imported only when their kind is configured, so an IoTDB client is never loaded for a
receiver that does not use one.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from receiver.storage.contract import Storage
from sealsync.config import ReceiverConfig
from sealsync.config.schema import Table, keys_of, read_table
from sealsync.errors import ConfigError
from sealsync.printable import printable

BACKENDS: dict[str, str] = {
    "directory": "receiver.storage.directory",
    "iotdb": "receiver.storage.iotdb",
}
"""Each kind's module."""


def register(kind: str, module: str) -> None:
    """Make ``kind`` name the backend in ``module`` (a host's own backend)."""
    BACKENDS[kind] = module


def backend(config: ReceiverConfig) -> ModuleType:
    """The module of the config's storage kind; ConfigError naming the known ones."""
    spec = config.storage
    module = BACKENDS.get(spec.kind)
    if module is None:
        known = ", ".join(sorted(BACKENDS))
        raise ConfigError(
            f"{spec.source}: {spec.label} kind: unknown storage {printable(spec.kind)!r} "
            f"(known: {known})"
        )
    return importlib.import_module(module)


def settings(config: ReceiverConfig) -> Any:
    """The backend's own settings from the ``[receiver.storage]`` keys; ConfigError
    (one line naming the file and key) when they do not read."""
    spec = config.storage
    cls = backend(config).Settings
    table = Table(spec.keys, spec.source, spec.label, spec.base_dir, keys_of(cls), create=False)
    return cls(**read_table(cls, table))


def open_storage(config: ReceiverConfig) -> Storage:
    """The storage ``config`` asks for, built (not started)."""
    storage: Storage = backend(config).open_storage(config, settings(config))
    return storage
