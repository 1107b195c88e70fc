"""What a sender may ask about what the receiver holds: who owns its devices
(``OWNERS_QUERY``), the pages of its inventory (``INVENTORY_QUERY``, for ``send
--reconcile``), and a summary of its held files (``HELD_QUERY``).

Each answer covers the asking sender only: another sender's UUID is never named
(the owner is ``ANOTHER_SENDER``), and the inventory and summary list only its own
files.

``OWNERS_QUERY`` is how a sender decides whether to offer again a file the receiver
refused for a conflict (sender/transfer/refusals.py): it asks about that file's
devices. So it is answered for what the sender already knows: the devices it owns,
and the devices a conflict verdict to it named since the receiver started
(:meth:`DeviceOwners.told`: their owner now, ``ANOTHER_SENDER`` or ``""`` once
released). Any other device is left out of the answer, whoever owns it: answering
every name would let a sender learn, one query of guesses at a time, which devices
other senders have. A device left out reads as free to the sender, which then offers
the file again and hears the verdict (after a receiver restart, once per such file).
"""

from __future__ import annotations

import bisect

from receiver.load.owners import DeviceOwners
from receiver.storage import Storage
from sealsync.errors import SealsyncError
from sealsync.protocol import (
    ANOTHER_SENDER,
    MAX_FILE_SIZE,
    MAX_INVENTORY_PAGE,
    ErrorCode,
    Held,
    Inventory,
    InventoryQuery,
    Owners,
    OwnersQuery,
    ProtocolError,
    held_digest,
)


class SenderQueries:
    """One session's answers; the inventory is listed once per session (at its first
    page) so that the pages of one listing fit together."""

    def __init__(self, uuid: str, owners: DeviceOwners, storage: Storage) -> None:
        self.uuid = uuid
        self._owners = owners
        self._storage = storage
        self._held: list[tuple[str, int, str]] | None = None

    def owners(self, msg: OwnersQuery) -> Owners:
        try:
            owners = self._owners.owners_of(msg.devices, asking=self.uuid)
        except SealsyncError as exc:  # a device id the owner log cannot hold (a TAB)
            raise ProtocolError(f"OWNERS_QUERY: {exc}", code=ErrorCode.BAD_DEVICE) from None
        mine = self.uuid
        told = self._owners.told(mine)

        def shown(owner: str) -> str:  # another sender's UUID is not this sender's business
            return owner if owner in ("", mine) else ANOTHER_SENDER

        return Owners(
            {d: shown(owner) for d, owner in owners.items() if owner == mine or d in told}
        )

    def inventory(self, msg: InventoryQuery) -> Inventory:
        if msg.after == "" or self._held is None:
            held = self._storage.inventory(self.uuid)
            self._held = sorted((name, size, md5) for name, (size, md5) in held.items())
        start = bisect.bisect_right(self._held, (msg.after, MAX_FILE_SIZE + 1, ""))
        page = self._held[start : start + MAX_INVENTORY_PAGE]
        more = start + len(page) < len(self._held)
        return Inventory([list(entry) for entry in page], more)

    def held(self) -> Held:
        """How many data files of this sender the storage holds, and the digest of
        their names (the names only: no file is read)."""
        names = self._storage.list(self.uuid)
        return Held(len(names), held_digest(names))
