"""What the receiver holds of one sender, for ``send --reconcile`` (docs/design.md §3.9).

The inventory is each loaded data file's relative name, its size, and the MD5 of its
bytes as the receiver recorded it when it verified the file. That MD5 is kept with
the file itself, as the extended attribute ``user.sealsync.md5`` written on the
temporary before it is staged (a rename keeps it), so that it travels with the file
and needs no state of its own to keep in step with loads and deletions. A file
system without user extended attributes, or a restore that dropped them
(``cp`` without ``--preserve=xattr``, ``rsync`` without ``-X``), leaves the MD5
unrecorded: the inventory then says ``""`` and reconcile compares names and sizes.

The attribute is part of the received-files layout (:mod:`sealsync.received` owns it):
the Spark loader reads it too, to know a restored copy whose times changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from sealsync import received
from sealsync.received import MD5_XATTR, record_md5, recorded_md5

Entry = tuple[int, str]
"""(size, recorded MD5 or "") of one held file."""

__all__ = ["MD5_XATTR", "Entry", "held_files", "record_md5", "recorded_md5"]


def held_files(data_dirs: list[Path], sender: str, md5: bool = True) -> dict[str, Entry]:
    """Every data file of ``sender`` in the received-files layout
    (:mod:`sealsync.received`, docs/design.md §4.8); without ``md5`` the recorded MD5s
    are not read (all "")."""
    held: dict[str, Entry] = {}
    for data_dir in data_dirs:
        for root in received.ROOTS:
            for folder, files in received.sender_folders(data_dir / root, sender):
                rel = Path(folder).relative_to(data_dir).parts
                if received.sender_of_folder(rel) != sender:
                    continue
                for file in files:
                    if not received.is_data_file(file):
                        continue
                    path = os.path.join(folder, file)
                    try:
                        size = os.lstat(path).st_size
                    except FileNotFoundError:
                        continue  # deleted meanwhile
                    held[received.name_in(rel, file)] = (size, recorded_md5(path) if md5 else "")
    return held
