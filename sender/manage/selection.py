"""The diff between what a data dir holds and what a receiver already has (docs/design.md §3.3).

Pure set logic, so that it is tested exhaustively without a file system.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from sender.manage.scan import DataDirScan


@dataclass(frozen=True)
class Selection:
    new: tuple[str, ...]
    """Sealed files the receiver does not have yet, or whose ``.mods`` changed since
    they shipped, sorted."""
    deleted: tuple[str, ...]
    """Synced files whose data file is gone, sorted."""


def select(scan: DataDirScan, last: Set[str], mods_changed: Set[str] = frozenset()) -> Selection:
    """``new = (sealed - last) | (mods_changed & sealed)``; ``deleted = last - present``.

    Deletion looks at ``present``, not ``sealed``: a synced file that later gains a
    ``.mods`` or a ``.merge`` (or loses its ``.resource``) still exists, and telling the
    receiver it was deleted would lose the whole file there (docs/design.md §9.2). A synced
    file whose ``.mods`` changed (``mods_changed``, :mod:`.shipped_mods`) ships again,
    whole, so that the receiver gets the new deletions; only while it is sealed, as
    any file that ships.
    """
    return Selection(
        new=tuple(sorted((scan.sealed - last) | (scan.sealed & mods_changed))),
        deleted=tuple(sorted(last - scan.present)),
    )
