"""``send --reconcile``: what the receiver lost or holds beyond what this sender has.

After a receiver is restored from a backup or gets a new disk, files it had
acknowledged may be gone or damaged, and ones this sender deleted since the backup
may be back. The sender's state (``last_local_files``) still says they are synced,
so an ordinary round never looks again. Reconcile asks the receiver for its
inventory of this sender (:class:`~sealsync.protocol.InventoryQuery`) and compares:

- **missing**: synced here, sealed and present, not held there → shipped again;
- **different**: held there with another size, or another MD5 where the receiver
  recorded one (:mod:`receiver.inventory`) → shipped again;
- **extra**: held there, in none of this sender's data dirs, and not already a
  deletion of this round → deleted there.

Nothing is deleted on the absence of evidence: when the data dirs hold no data file
at all while the receiver holds some of this sender's, reconcile refuses (a data
dir that is not mounted looks exactly like that).

The receiver's storage lists a sender's files across all its data dirs, not per the
sender's data dir they came from, so the comparison is over the union of this
sender's data dirs; the extra files are deleted by the first data dir's round.
Comparing MD5s reads each local file that the receiver holds at the same size once:
the price of finding a damaged copy, paid only when reconcile is asked for.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sealsync.errors import SealsyncError

if TYPE_CHECKING:
    from sealsync.config import ReceiverEndpoint, SenderConfig

Held = Mapping[str, tuple[int, str]]
"""The receiver's inventory: name -> (size, recorded MD5 or "")."""


class NothingHere(SealsyncError):
    """The data dirs hold nothing while the receiver holds files of this sender."""

    kind = "reconcile"


@dataclass(frozen=True)
class DirState:
    """One data dir as reconcile needs it."""

    data_dir: Path
    sealed: Set[str]
    present: Set[str]
    last: Set[str]
    """The names this sender believes synced (``last_local_files``)."""


@dataclass
class Findings:
    """What reconcile found for one data dir (the extra files all on the first)."""

    missing: list[str] = field(default_factory=list)
    different: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)

    @property
    def reship(self) -> set[str]:
        return set(self.missing) | set(self.different)

    def to_dict(self) -> dict[str, Any]:
        return {"missing": self.missing, "different": self.different, "extra": self.extra}


def compare(held: Held, dirs: Sequence[DirState], receiver: str) -> list[Findings]:
    """Findings per data dir, in ``dirs`` order; raises NothingHere (see the module)."""
    present_anywhere: set[str] = set()
    going: set[str] = set()  # deleted by this round anyway: synced, no longer present
    for d in dirs:
        present_anywhere |= d.present
        going |= d.last - d.present
    if held and not present_anywhere:
        folders = ", ".join(str(d.data_dir) for d in dirs)
        raise NothingHere(
            f"reconcile: {receiver} holds {len(held)} files of this sender but its data "
            f"dirs ({folders}) hold none: nothing is deleted; check that they are the "
            "instance's data dirs and mounted"
        )
    out: list[Findings] = []
    for d in dirs:
        found = Findings()
        for name in sorted(d.last & d.sealed):
            entry = held.get(name)
            if entry is None:
                found.missing.append(name)
            elif _differs(d.data_dir / name, *entry):
                found.different.append(name)
        out.append(found)
    if out:
        out[0].extra = sorted(set(held) - present_anywhere - going)
    return out


def _differs(path: Path, size: int, md5: str) -> bool:
    try:
        if os.stat(path).st_size != size:
            return True
        if not md5:
            return False
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "md5").hexdigest() != md5
    except FileNotFoundError:
        return False  # gone since the scan: the next round ships its deletion


def dir_state(data_dir: Path, last_local_files: Path, cache: Path | None = None) -> DirState:
    """A data dir's files and synced names; without ``cache`` nothing is written."""
    from sender.manage.scan import scan
    from sender.manage.state import read_file_set

    found = scan(data_dir, cache=cache)
    last = read_file_set(last_local_files, known=found.present)
    return DirState(Path(data_dir), found.sealed, found.present, last)


def preview(config: SenderConfig, receiver: ReceiverEndpoint) -> list[Findings]:
    """``send --reconcile --dry-run``: ask the receiver and compare, changing nothing
    here (no lock, no state, no scan cache) and nothing there."""
    from sender.manage.identity import hostname, sender_uuid, uuid_path
    from sender.manage.layout import SenderPaths
    from sender.transfer.client import connect_receiver
    from sender.transfer.session import SenderSession

    dirs = [
        dir_state(d, SenderPaths(d, receiver.host, receiver.port).last_local_files)
        for d in config.data_dirs
    ]
    if not uuid_path(config.schema_dir).exists():
        return [Findings() for _ in dirs]  # never ran: no receiver holds anything of it
    conn = connect_receiver(config, receiver)
    try:
        session = SenderSession(conn.stream, reply_timeout=config.stall_timeout)
        try:
            session.hello(sender_uuid(config.schema_dir), hostname())
            held = session.inventory()
            session.bye()
        finally:
            session.close()
    finally:
        conn.close()
    return compare(held, dirs, receiver.name)
