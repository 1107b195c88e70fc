"""OpenSSH's file-mode habits, for both ends and for config loading.

A private key that group or others can read is no longer private, and a config,
key or trust file (``known_hosts``, ``authorized_keys``) that group or others can
write lets them choose whom this end trusts or which key it presents. OpenSSH
refuses such files rather than use them; so does sealsync: config loading checks
every file a config names (so every command refuses before it changes anything),
and each end checks again where it reads the file, since a file can change while a
receiver runs.

Each check returns ``None`` or the problem as text naming the mode and the command
that fixes it; the caller puts the path and its context in front (one line, like
every sealsync error).
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

#: Bits that make a private key readable (or anything else) by group or others.
PRIVATE_MASK = 0o077
#: Bits that let group or others write a file.
WRITE_MASK = 0o022


def file_mode(path: str | os.PathLike[str]) -> int:
    """The permission bits of ``path`` (symlinks followed, as open() follows them)."""
    return stat.S_IMODE(os.stat(path).st_mode)


def _whom(bits: int) -> str:
    """``group``, ``others`` or ``group and others``: whose bits are set in ``bits``."""
    names = [name for name, shift in (("group", 3), ("others", 0)) if (bits >> shift) & 0o7]
    return " and ".join(names)


def _access(bits: int) -> str:
    verbs = [verb for verb, mask in (("read", 0o044), ("write", 0o022)) if bits & mask]
    return " and ".join(verbs) if verbs else "use"


def private_mode_problem(path: str | os.PathLike[str], mode: int | None = None) -> str | None:
    """Why ``path`` is not fit to be a private key (group or others may touch it), or None.

    ``mode``: the permission bits if the caller has them already (from its own stat).
    """
    whole = file_mode(path) if mode is None else stat.S_IMODE(mode)
    bits = whole & PRIVATE_MASK
    if not bits:
        return None
    return (
        f"mode {whole:04o} lets {_whom(bits)} {_access(bits)} it, and a private key must be "
        f"its owner's alone: run chmod 600 {shlex.quote(str(Path(path)))}"
    )


def writable_problem(path: str | os.PathLike[str], mode: int | None = None) -> str | None:
    """Why group or others could change ``path`` (a config, key or trust file), or None."""
    whole = file_mode(path) if mode is None else stat.S_IMODE(mode)
    bits = whole & WRITE_MASK
    if not bits:
        return None
    return (
        f"mode {whole:04o} lets {_whom(bits)} write it, so they could change whom sealsync "
        f"trusts: run chmod go-w {shlex.quote(str(Path(path)))}"
    )


def restrict_writes(path: str | os.PathLike[str]) -> None:
    """Take group and other write bits off ``path``: what a writer of a config or trust
    file does so that a permissive umask (002) cannot get the file refused."""
    os.chmod(path, file_mode(path) & ~WRITE_MASK)
