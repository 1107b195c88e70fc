"""The received-files layout: where a receiver's storage keeps each sender's loaded
files, and how a reader tells sender, name and sidecars back from a path.

A file of sender ``U`` with the relative name ``sequence/<dirs...>/<file>`` is held at
``<base>/sequence/<dirs...>/U/<file>`` (the same for ``unsequence/``), its sidecars
beside it (``<file>.resource``, ``.mods``, ``.mods2``). ``<base>`` is a receiver data
dir. So two senders' files never collide, a delete from one sender can never reach
another's file or the host's own (which never sit in a folder named by a canonical
UUID), and a reader finds a sender's files by their parent folder alone.

This is a contract between two roles that never import each other: the receiver's
storage writes it (:mod:`receiver.storage`), the Spark loader reads it
(:mod:`spark_loader.discovery`), and the receiver's own inventory and quota read it
too. Every path of that layout is built or taken apart here, on relative POSIX
strings, so that the same rules hold whatever holds the files.
``tests/test_layout.py`` refuses the data roots used outside this module in the
receiver and the loader; ``tests/test_received_layout.py`` round-trips every name form.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator, Sequence

from sealsync import deletions
from sealsync.names import (
    DATA_ROOTS,
    DATA_SUFFIXES,
    LOAD_LOG,
    MODS2_SUFFIX,
    MODS_SUFFIX,
    RECEIVER_FOLDER,
    RESOURCE_SUFFIX,
    check_data_name,
    check_sender_uuid,
)
from sealsync.printable import printable

ROOTS = DATA_ROOTS
"""The folders of a base that hold loaded files; everything else is not the layout's."""

MD5_XATTR = "user.sealsync.md5"
"""The extended attribute on a held data file naming the MD5 of its bytes as the
receiver verified them (:func:`record_md5`): it travels with the file (a rename keeps
it), so it needs no state of its own to keep in step with loads and deletions. The
receiver's inventory reads it, and so does the loader, to tell a restored copy whose
times changed from a new file (:mod:`spark_loader.restored`)."""
_MD5 = re.compile(r"[0-9a-f]{32}")
_NO_XATTRS = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES, errno.ENOSPC}

MERGE_SUFFIX = ".merge"
LOAD_ORDER = ("", MODS_SUFFIX, MODS2_SUFFIX, RESOURCE_SUFFIX)
"""A file's pieces in the order they move in: ``.resource``, whose presence marks the
file complete (docs/design.md §1.3), last."""
DELETE_ORDER = (RESOURCE_SUFFIX, MODS_SUFFIX, MODS2_SUFFIX, MERGE_SUFFIX, "")
"""The order they go, the reverse of loading for the same reason."""
REPLACEABLE = (MODS_SUFFIX, MODS2_SUFFIX, RESOURCE_SUFFIX)
"""Pieces a newer copy legitimately replaces: deletions grow after sealing, and IoTDB
0.12 rewrites a sealed file's ``.resource`` when a ``DELETE`` reaches it
(docs/iotdb.md); the data file itself never changes under its name."""

SQUAT_SUFFIXES = (*DATA_SUFFIXES, RESOURCE_SUFFIX, MODS_SUFFIX, MODS2_SUFFIX, MERGE_SUFFIX, ".tmp")
"""Suffixes of the files (and their sidecars and temporaries) a storage folder holds:
no folder a name makes may end in one."""

_UUID_LIKE = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_sender_folder(part: str) -> bool:
    """A folder named by a sender UUID, in the one spelling the receiver writes."""
    return _CANONICAL.fullmatch(part) is not None


def name_problem(name: str) -> str | None:
    """Why the layout cannot hold ``name`` (already a checked data name), or None.

    A sender's file lands at ``<root>/<dirs...>/<uuid>/<file>``, so a folder component
    that looks like a UUID would put it inside another sender's folder (or its own one
    level down), and one named like a file or sidecar would squat the path where a
    file's ``.mods`` or ``.resource`` must go. A hidden component is what the receiver's
    temporaries look like. No database writes such names; refusing them keeps every
    sender's namespace closed whatever it ships.
    """
    parts = name.split("/")
    for part in parts[1:-1]:
        if _UUID_LIKE.fullmatch(part):
            return f"a folder named like a sender UUID ({part}) in {printable(name)}"
        if part.lower().endswith(SQUAT_SUFFIXES):
            shown = printable(part)
            return f"a folder named like a data file or sidecar ({shown}) in {printable(name)}"
    if any(part.startswith(".") for part in parts):
        return f"a hidden component in {printable(name)}"
    return None


def held_name(sender: str, name: str) -> str:
    """Where ``sender``'s ``name`` is held, relative to the base, both checked first."""
    check_sender_uuid(sender)
    folder, _, base = check_data_name(name).rpartition("/")
    return f"{folder}/{sender}/{base}"


def held_path(base: str | os.PathLike[str], sender: str, name: str) -> str:
    """:func:`held_name` joined to a base folder (a data dir)."""
    return os.path.join(base, held_name(sender, name))


def sender_of_folder(parts: Sequence[str]) -> str | None:
    """The sender whose folder ``parts`` (a folder relative to the base) is, or None:
    a canonical UUID below a data root, not the root itself."""
    if len(parts) < 2 or parts[0] not in ROOTS or not is_sender_folder(parts[-1]):
        return None
    return parts[-1]


def sender_folders(top: str | os.PathLike[str], sender: str) -> Iterator[tuple[str, list[str]]]:
    """``(folder, file names)`` of each of ``sender``'s folders below ``top`` (a data
    root of a base), never walking into another sender's: with a fleet's thousands of
    senders, a walk into each was most of a round's receiver CPU."""
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d == sender or not is_sender_folder(d)]
        if os.path.basename(folder) == sender and os.fspath(folder) != os.fspath(top):
            yield folder, files


def owner_of(parts: Sequence[str]) -> str | None:
    """The sender whose folder ``parts`` (relative to the base) is or lies in."""
    for part in reversed(parts[1:]):
        if is_sender_folder(part):
            return part
    return None


def source_of(parts: Sequence[str]) -> tuple[str, str] | None:
    """``(sender, name)`` of a held data file, from its path's parts relative to the
    base (``root, dirs..., uuid, file``); None if the path is not a held data file
    (its name unchecked: :func:`sealsync.names.check_data_name` decides that)."""
    if len(parts) < 3 or parts[0] not in ROOTS or not is_sender_folder(parts[-2]):
        return None
    if not parts[-1].endswith(DATA_SUFFIXES) or parts[-1].startswith("."):
        return None
    return parts[-2], "/".join((*parts[:-2], parts[-1]))


def is_data_file(file: str) -> bool:
    """A data file's own name in a sender's folder (not a sidecar or a temporary)."""
    return file.endswith(DATA_SUFFIXES) and not file.startswith(".")


def piece(path: str, suffix: str) -> str:
    """A held file's piece: the data file itself (``""``) or one of its sidecars."""
    return f"{path}{suffix}"


def name_in(folder_parts: Sequence[str], file: str) -> str:
    """The relative name of ``file`` in the sender folder ``folder_parts``."""
    return "/".join((*folder_parts[:-1], file))


def sidecar_of(file: str) -> tuple[str, str] | None:
    """``(data file, suffix)`` when ``file`` is a sidecar of a held data file
    (``X.tsfile.mods`` gives ``("X.tsfile", ".mods")``), else None."""
    for suffix in (RESOURCE_SUFFIX, MODS2_SUFFIX, MODS_SUFFIX, MERGE_SUFFIX):
        if file.endswith(suffix) and is_data_file(file[: -len(suffix)]):
            return file[: -len(suffix)], suffix
    return None


def record_md5(fd: int, md5: str) -> None:
    """Record the verified data file's MD5 on its (open) temporary; best effort: a file
    system that takes no user attributes only loses what its readers could compare."""
    try:
        os.setxattr(fd, MD5_XATTR, md5.encode("ascii"))
    except OSError as exc:
        if exc.errno not in _NO_XATTRS:
            raise


def recorded_md5(path: str | os.PathLike[str]) -> str:
    """The MD5 recorded on a held data file, "" if none (a file system without user
    extended attributes, a restore that dropped them, or a value sealsync did not write)."""
    try:
        value = os.getxattr(path, MD5_XATTR, follow_symlinks=False)
    except OSError:
        return ""
    text = value.decode("ascii", "replace")
    return text if _MD5.fullmatch(text) else ""


def activity_marks(data_dir: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """``(size, mtime_ns)`` of what changes when the receiver loads or deletes a file
    in ``data_dir``: ``sync-receiver/`` and each sender folder in it (a round creates
    its ``sync.log`` and ``load.log`` there and removes them when it has loaded all it
    received, so the folder's own time moves at a round's start and end), each
    ``load.log`` (a line per file loaded, appended after the file is in place) and
    each deletion log. A changed mark means something to ingest or remove. Cheap (one
    listing and a stat or two per sender): a following loader polls it."""
    marks: dict[str, tuple[int, int]] = {}
    folder = os.path.join(data_dir, RECEIVER_FOLDER)
    try:
        entries = list(os.scandir(folder))
        st = os.stat(folder)
    except (FileNotFoundError, NotADirectoryError):
        return marks
    marks[folder] = (st.st_size, st.st_mtime_ns)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            paths = [entry.path, os.path.join(entry.path, LOAD_LOG)]
        elif deletions.is_log_name(entry.name):
            paths = [entry.path]
        else:
            continue
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue  # no load.log now, or gone meanwhile
            marks[path] = (st.st_size, st.st_mtime_ns)
    return marks
