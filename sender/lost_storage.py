"""A plain ``send`` notices a receiver that lost its storage (docs/design.md §3.9).

A receiver whose storage was wiped and initialised again, or restored from an older
backup, greets a sender like any other: without this check the sender's state
(``last_local_files``) still says its files are synced there, every round ships
nothing, and only a ``send --reconcile`` by hand would find out. So on the first
connection of an attempt, a sender that shipped files to this receiver before asks
for a summary of what it holds of this sender (HELD_QUERY, protocol version 2: the
number of data files and a digest of their names, no file read on either side) and
compares it with the names it believes synced there. When they differ, it does what
``on_lost_storage`` says: ``reconcile`` (the default) turns this attempt into a
``send --reconcile`` (sender/reconcile.py), with a warning line (a reconcile also
offers the schema log from its start, since the receiver's copy went with the rest);
``fail`` ends the
attempt, exit 1, with one line naming the cause and the command to run; ``ignore``
asks nothing (the receiver lists this sender's files for the answer: a walk of its
data dirs per attempt).

Only fewer files than shipped, or as many under other names, count as a loss. A
receiver holding more is the ordinary trace of a run cut between the receiver's
verdicts and the sender's record of them, which the next round settles by itself;
files that a restore brought back after the edge deleted them are found by
``send --reconcile`` only (they take a loss besides to be noticed here).

A difference is not always a loss: a round the receiver has verified but not loaded
yet (``ROUND_DONE`` said "still loading", or a session cut before the load) is
counted by the sender and not yet by the storage. A reconcile then finds those files
"missing" and ships them again, which the storage takes as the copies it already
has: the cost of being sure, paid only when the two disagree. A receiver of protocol
version 1 has no HELD_QUERY: nothing is asked, as before.
"""

from __future__ import annotations

from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.errors import SealsyncError
from sealsync.protocol import Held, held_digest
from sender.manage.layout import SenderPaths
from sender.manage.state import read_file_set

FAIL, RECONCILE, IGNORE = "fail", "reconcile", "ignore"


class StorageLost(SealsyncError):
    """The receiver holds other files of this sender than it shipped there, and
    ``on_lost_storage = "fail"``."""

    kind = "reconcile"


def shipped_to(config: SenderConfig, receiver: ReceiverEndpoint) -> set[str]:
    """The names this sender believes synced to ``receiver``, over its data dirs."""
    names: set[str] = set()
    for data_dir in config.data_dirs:
        names |= read_file_set(SenderPaths(data_dir, receiver.host, receiver.port).last_local_files)
    return names


def difference(held: Held, shipped: set[str], receiver: str) -> str | None:
    """None when the receiver's summary does not show a loss of ``shipped`` (see the
    module); else what differs, said for one line."""
    if held.files > len(shipped):
        return None  # more than shipped: files verified before a cut run recorded them
    if held.files == len(shipped) and held.digest == held_digest(shipped):
        return None
    if held.files == 0:
        what = f"holds no file of this sender, which shipped {len(shipped)} there"
    else:
        what = (
            f"holds {held.files} files of this sender, which believes {len(shipped)} "
            f"synced there{', not the same names' if held.files == len(shipped) else ''}"
        )
    return f"receiver {receiver} {what} (storage lost, or restored from an older backup?)"


def refusal(config: SenderConfig, receiver: ReceiverEndpoint, problem: str) -> StorageLost:
    """The one line of ``on_lost_storage = "fail"``: the cause and the command."""
    return StorageLost(
        f"{problem}: nothing was sent; run `sealsync send --reconcile --config "
        f"{config.source} --receiver {receiver.name}` to ship again what it lacks "
        '(or set on_lost_storage = "reconcile")'
    )
