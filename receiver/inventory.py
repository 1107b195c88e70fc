"""What the receiver holds of one sender, for ``send --reconcile`` (docs/design.md §3.9).

The inventory is each loaded data file's relative name, its size, and the MD5 of its
bytes as the receiver recorded it when it verified the file. That MD5 is kept with
the file itself, as the extended attribute ``user.sealsync.md5`` written on the
temporary before it is staged (a rename keeps it), so that it travels with the file
and needs no state of its own to keep in step with loads and deletions. A file
system without user extended attributes, or a restore that dropped them
(``cp`` without ``--preserve=xattr``, ``rsync`` without ``-X``), leaves the MD5
unrecorded: the inventory then says ``""`` and reconcile compares names and sizes.

This module owns that attribute: nothing else reads or writes it.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from sealsync import received

MD5_XATTR = "user.sealsync.md5"
_MD5 = re.compile(r"[0-9a-f]{32}")
_UNSUPPORTED = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES, errno.ENOSPC}

Entry = tuple[int, str]
"""(size, recorded MD5 or "") of one held file."""


def record_md5(fd: int, md5: str) -> None:
    """Record the verified data file's MD5 on its (open) temporary; best effort: a file
    system that takes no user attributes only loses what reconcile could compare."""
    try:
        os.setxattr(fd, MD5_XATTR, md5.encode("ascii"))
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise


def recorded_md5(path: str | os.PathLike[str]) -> str:
    """The MD5 recorded on a held data file, "" if none (or not one sealsync wrote)."""
    try:
        value = os.getxattr(path, MD5_XATTR, follow_symlinks=False)
    except OSError:
        return ""
    text = value.decode("ascii", "replace")
    return text if _MD5.fullmatch(text) else ""


def held_files(data_dirs: list[Path], sender: str, md5: bool = True) -> dict[str, Entry]:
    """Every data file of ``sender`` in the received-files layout
    (:mod:`sealsync.received`, docs/design.md §4.8); without ``md5`` the recorded MD5s
    are not read (all "")."""
    held: dict[str, Entry] = {}
    for data_dir in data_dirs:
        for root in received.ROOTS:
            for folder, _dirs, files in os.walk(data_dir / root):
                if os.path.basename(folder) != sender:
                    continue  # the cheap test first: most folders are not this sender's
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
