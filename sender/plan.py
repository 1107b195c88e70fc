"""What a round would do, computed without changing anything (``send --dry-run``).

The plan must match what a real round does, including the recovery it runs first
(docs/design.md §3.2, §9.1): after a crash, the set of synced files is not what
``last_local_files.txt`` says until recovery has applied the crashed round's
``sync.log``. So the dry run replays recovery's decisions in memory, with the same
``apply_sync_log`` that recovery uses, and never writes, renames or deletes a file.
The same goes for the ``.mods`` identities a crashed round would record
(:func:`~sender.manage.shipped_mods.effective_shipped`), so a synced file
whose ``.mods`` changed is planned exactly when the round would ship it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.synclog import apply_sync_log, read_sync_log
from sender.manage import shipped_mods
from sender.manage.layout import SenderPaths
from sender.manage.scan import scan
from sender.manage.selection import select
from sender.manage.state import read_file_set


@dataclass(frozen=True)
class DirPlan:
    data_dir: Path
    new: tuple[str, ...]
    """Files the round would ship (new or with a changed ``.mods``), sorted, relative to
    the data dir."""
    deleted: tuple[str, ...]
    """Files the round would tell the receiver to delete, sorted."""
    rejected: tuple[tuple[str, str], ...]
    """(name, reason) for entries that are never shipped."""
    recovery: str | None = None
    """What recovery would do first, in words; None when the last round ended cleanly."""
    mods_changed: tuple[str, ...] = ()
    """Those of ``new`` already synced that ship again because their ``.mods`` changed."""


def effective_last(paths: SenderPaths) -> tuple[set[str], str | None]:
    """The synced set recovery would leave behind, and a description of that recovery.

    Follows the recovery steps of docs/design.md §3.2, reading only: current + last → current is
    stale (dropped); current alone → it is the cleaned-up set (renamed to last);
    otherwise a ``sync.log`` is applied to last.
    """
    has_current = paths.current_local_files.exists()
    has_last = paths.last_local_files.exists()
    if has_current and not has_last:
        # Step 7: clean-up wrote current (log already applied) and deleted last.
        return (
            read_file_set(paths.current_local_files),
            "would finish a crashed clean-up: current_local_files.txt becomes the synced set",
        )
    last = read_file_set(paths.last_local_files)
    notes = []
    if has_current:
        notes.append("drop the stale current_local_files.txt")
    if paths.sync_log.exists():
        log = read_sync_log(paths.sync_log)
        last = apply_sync_log(last, log)
        notes.append(
            f"apply the crashed round's sync.log ({len(log.deleted)} deleted, "
            f"{len(log.new)} new marked synced)"
        )
    elif paths.snapshot.exists():
        notes.append("remove the leftover snapshot/")
    return last, ("would " + ", ".join(notes) if notes else None)


def plan_dir(data_dir: Path, receiver: ReceiverEndpoint) -> DirPlan:
    paths = SenderPaths(data_dir, receiver.host, receiver.port)
    last, recovery = effective_last(paths)
    found = scan(data_dir)
    current = shipped_mods.current_identities(data_dir, found.with_mods & last)
    changed = shipped_mods.changed(current, shipped_mods.effective_shipped(paths, last))
    selection = select(found, last, changed)
    return DirPlan(
        data_dir=data_dir,
        new=tuple(selection.new),
        deleted=tuple(selection.deleted),
        rejected=tuple((str(n), str(r)) for n, r in found.rejected),
        recovery=recovery,
        mods_changed=tuple(n for n in selection.new if n in last),
    )


def plan(config: SenderConfig, receiver: ReceiverEndpoint) -> list[DirPlan]:
    """One DirPlan per data dir of ``config``, in config order, for ``receiver``."""
    return [plan_dir(d, receiver) for d in config.data_dirs]
