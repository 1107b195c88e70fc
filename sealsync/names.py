"""Validation of data-file names, the one gate between a name and a path join.

Names travel in logs and on the wire relative to a data dir, POSIX style (docs/design.md §2.1).
A name that is absolute, climbs with ``..``, holds a NUL or a newline (logs are
line based), or is absurdly long never reaches the file system (docs/design.md §9.8).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from sealsync.errors import BadName

MAX_NAME_BYTES = 1024
MAX_PART_BYTES = 255
DATA_ROOTS = ("sequence", "unsequence")
DATA_SUFFIXES = (".tsfile", ".parquet")
RESOURCE_SUFFIX, MODS_SUFFIX, MODS2_SUFFIX = ".resource", ".mods", ".mods2"
SIDECAR_SUFFIXES = (RESOURCE_SUFFIX, MODS_SUFFIX, MODS2_SUFFIX)
#: The receiver's folder in each of its data dirs: rounds in flight, deletion logs
#: (``deletions``), the lock; the loader reads the deletion logs there too.
RECEIVER_FOLDER = "sync-receiver"
LOAD_LOG = "load.log"
"""In each sender folder of ``sync-receiver/``: the receiver's record of what it loaded."""


def check_relative(name: str) -> str:
    """Return ``name`` if it is a safe relative POSIX path, else raise BadName."""
    if not isinstance(name, str) or not name:
        raise BadName("empty file name")
    shown = name[:80].encode("unicode_escape").decode("ascii")
    raw = name.encode("utf-8", errors="surrogateescape")
    if len(raw) > MAX_NAME_BYTES:
        raise BadName(f"file name longer than {MAX_NAME_BYTES} bytes: {shown}...")
    if any(ch in name for ch in "\x00\n\r\\"):
        raise BadName(f"file name with a NUL, newline or backslash: {shown}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise BadName(f"file name with a control character: {shown}")
    if name.startswith("/"):
        raise BadName(f"absolute file name: {shown}")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise BadName(f"file name with an empty, '.' or '..' component: {shown}")
        if len(part.encode("utf-8", errors="surrogateescape")) > MAX_PART_BYTES:
            raise BadName(f"file name component longer than {MAX_PART_BYTES} bytes: {shown}")
    return name


# A fast front for check_data_name, for hot loops (the sender's over 100,000 names, the
# receiver's several checks per file received): names as databases write them
# (``sequence/root.sg1/0/1581324718762-101-1.tsfile``) match one precompiled pattern
# whose accepted set is a strict subset of what full_data_name_check accepts (a test
# holds it to that); anything else goes through full_data_name_check.
# ASCII-only components that cannot be '', '.' or '..' (no leading dot), each at most
# 255 bytes, the last one a data file with a non-empty stem; the whole at most 1024.
_PART = r"[A-Za-z0-9_+=@,-][A-Za-z0-9_.+=@,-]{0,254}"
_LAST = r"[A-Za-z0-9_+=@,-][A-Za-z0-9_.+=@,-]{0,246}\.(?:tsfile|parquet)"
_SAFE = re.compile(rf"(?=.{{1,1024}}\Z)(?:sequence|unsequence)(?:/{_PART})*/{_LAST}", re.DOTALL)


def check_data_name(name: str) -> str:
    """A data file's name: safe, under ``sequence/`` or ``unsequence/``, a known suffix."""
    if isinstance(name, str) and _SAFE.fullmatch(name):
        return name
    return full_data_name_check(name)


def full_data_name_check(name: str) -> str:
    """:func:`check_data_name` rule by rule, without the fast front (which is held to it)."""
    check_relative(name)
    path = PurePosixPath(name)
    if len(path.parts) < 2 or path.parts[0] not in DATA_ROOTS:
        raise BadName(f"data file not under sequence/ or unsequence/: {name}")
    if path.suffix not in DATA_SUFFIXES:
        raise BadName(f"not a .tsfile or .parquet data file: {name}")
    return name


def data_name_problem(name: str) -> str | None:
    """Why ``name`` may not be used as a data file name, or None if it may.

    Besides ``check_data_name``, the name must be valid UTF-8: state files and the wire
    carry UTF-8 text, and an undecodable name read from disk would fail only later,
    mid-round.
    """
    if _SAFE.fullmatch(name):
        return None
    try:
        full_data_name_check(name)
    except BadName as exc:
        return str(exc)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = name[:80].encode("utf-8", "backslashreplace").decode("utf-8")
        return f"file name that is not valid UTF-8: {shown}"
    return None


def require_data_name(name: str) -> str:
    """``name`` if :func:`data_name_problem` finds nothing, else BadName with the reason."""
    problem = data_name_problem(name)
    if problem is not None:
        raise BadName(problem)
    return name


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""Exactly the strings ``str(uuid.UUID(...))`` gives: a test holds the two to agree."""


def check_sender_uuid(value: str) -> str:
    """``value`` if it is a canonical lowercase UUID string, else BadName.

    The UUID names folders and keys ownership, so two spellings of one UUID
    (upper case, braces, no dashes) must never become two senders. Checked by
    pattern, not by parsing: it runs several times for every file received.
    """
    if not isinstance(value, str) or not _CANONICAL_UUID.fullmatch(value):
        shown = str(value)[:80].encode("unicode_escape").decode("ascii")
        raise BadName(f"sender uuid is not a canonical lowercase uuid: {shown}")
    return value
