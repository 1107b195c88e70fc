"""The host's storage: where verified files end up (docs/design.md §4.1, §4.8).

:mod:`.contract` declares what the receiver asks of a storage (:class:`Storage`);
:mod:`.backends` picks one by ``[receiver.storage] kind``; each backend is one module:
:mod:`.directory` (the default: the receiver's data dirs) and :mod:`.iotdb` (those
copies, loaded into a running IoTDB). Nothing outside this package asks a storage
what it is: the contract says what it can do.
"""

from __future__ import annotations

from receiver.storage.backends import open_storage, register
from receiver.storage.contract import Storage, StorageError, as_storage
from receiver.storage.directory import DirectoryStorage

__all__ = ["DirectoryStorage", "Storage", "StorageError", "as_storage", "open_storage", "register"]
