"""The storage contract: everything the receiver asks of the host's storage.

The receiver runs inside a server that decides where loaded files live and how it
registers them; a storage is that server's side of the plugin. Four operations are
required. The optional capabilities are declared here with their defaults, so the
receiver never has to probe a storage for what it can do: a storage that does not
override one simply does not have it.

Every operation is idempotent, because the folder loader replays after a crash without
knowing how far the last attempt got: pieces already moved are recognised, an
identical file already in place is success, a different one is an error and never a
silent skip or overwrite.

Lifecycle: constructing a storage reads its settings and touches nothing; ``start()``
(the service calls it once it holds the storage lock, before any round) opens what
it needs; ``close()`` releases it. A storage the host made and passed in is closed
by the host; one the service opened from its config is closed by the service.
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

from sealsync.errors import SealsyncError
from sealsync.printable import printable

log = logging.getLogger(f"sealsync.{__name__}")


class StorageError(SealsyncError):
    """A load or delete the host's storage cannot do; the staged file is kept."""


class Storage(ABC):
    """What a host server implements so that the receiver can hand it files."""

    measures_usage: ClassVar[bool] = False
    """:meth:`usage` counts a sender's bytes; ``sender_quota_bytes`` needs it."""

    keeps_senders_apart: ClassVar[bool] = False
    """Two senders' files of one device id stay apart (each sender's in a place of its
    own): the receiver may then scope device ownership per sender (``device_scope =
    "sender"``). A storage that merges a device's points, whoever sent them, keeps one
    owner per device."""

    feeds_loader: ClassVar[bool] = False
    """Loaded files sit in the receiver's data dirs in the received-files layout
    (:mod:`sealsync.received`), where the Spark loader reads them; the receiver then
    logs each deletion for the loader first (:meth:`loader_copies`)."""

    @abstractmethod
    def load(self, sender: str, name: str, staged: Path) -> None:
        """Move ``staged`` and its sidecars (``staged.name + ".resource"``/``".mods"``/
        ``".mods2"`` beside it) in as ``sender``'s ``name``; already loaded identical is
        a no-op, a different existing file raises StorageError."""

    @abstractmethod
    def delete(self, sender: str, name: str) -> bool:
        """Remove only ``sender``'s ``name`` with its sidecars; True if something was there."""

    @abstractmethod
    def list(self, sender: str) -> set[str]:
        """Relative names loaded from ``sender``."""

    @abstractmethod
    def inventory(self, sender: str) -> dict[str, tuple[int, str]]:
        """Per relative name loaded from ``sender``: the data file's size and the MD5
        recorded when it was verified ("" if none; :mod:`receiver.inventory`)."""

    def usage(self, sender: str) -> int:
        """Bytes of ``sender``'s loaded files and their sidecars (when
        :attr:`measures_usage`)."""
        raise StorageError(f"{type(self).__name__} cannot measure what a sender holds")

    def deferred_sync(self) -> AbstractContextManager[None]:
        """A block whose loads may make their moves durable together when it ends
        (group commit); by default each load is durable on its own."""
        return contextlib.nullcontext()

    def loader_copies(self, sender: str, name: str) -> Sequence[tuple[Path, Path]]:
        """``(data dir, path)`` of each copy of ``sender``'s ``name`` that the Spark
        loader reads (when :attr:`feeds_loader`), for its deletion evidence."""
        return []

    def start(self) -> None:  # noqa: B027 - optional: nothing to open by default
        """Open what the storage needs (a session, a state file); called once by the
        service before its first round. Idempotent."""

    def close(self) -> None:  # noqa: B027 - optional: nothing to release by default
        """Release what :meth:`start` opened. Idempotent."""


REQUIRED = ("load", "delete", "list", "inventory")


class _Adapted(Storage):
    """A host object that has the four operations but does not subclass
    :class:`Storage` (hosts written before the contract was a class)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def load(self, sender: str, name: str, staged: Path) -> None:
        self.inner.load(sender, name, staged)

    def delete(self, sender: str, name: str) -> bool:
        return bool(self.inner.delete(sender, name))

    def list(self, sender: str) -> set[str]:
        return set(self.inner.list(sender))

    def inventory(self, sender: str) -> dict[str, tuple[int, str]]:
        return dict(self.inner.inventory(sender))


def as_storage(obj: object) -> Storage:
    """``obj`` as a :class:`Storage`: itself when it subclasses it; an object with the
    four operations, wrapped once with a warning (it gets no optional capability);
    anything else is a TypeError naming what is missing."""
    if isinstance(obj, Storage):
        return obj
    missing = [op for op in REQUIRED if not callable(getattr(obj, op, None))]
    if missing:
        raise TypeError(
            f"storage {printable(type(obj).__name__)} lacks {', '.join(missing)}: "
            "subclass receiver.Storage and implement load, delete, list and inventory"
        )
    log.warning(
        "storage %s does not subclass receiver.Storage: it is used through an adapter "
        "without optional capabilities; subclass receiver.Storage",
        printable(type(obj).__name__),
    )
    return _Adapted(obj)
