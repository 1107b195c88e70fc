"""OpenSSH's file-mode habits, for both ends and for config loading.

A private key that group or others can read is no longer private, and a config,
key or trust file (``known_hosts``, ``authorized_keys``) that group or others can
write lets them choose whom this end trusts or which key it presents. OpenSSH
refuses such files rather than use them; so does sealsync: config loading checks
every file a config names (so every command refuses before it changes anything),
and each end checks again where it reads the file, since a file can change while a
receiver runs.

The folder holding a key or trust file matters as much as the file: whoever may write
a folder may rename a file in it and put another in its place, whatever the file's
own mode. So a keys folder group or others may write is refused as the file would be
(sshd's ``StrictModes`` does the same), unless its sticky bit keeps them from
replacing what they do not own (``/tmp``'s mode 1777).

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
    """Why ``path`` is not fit to be a private key (group or others may touch it, or
    replace it through its folder), or None.

    ``mode``: the permission bits if the caller has them already (from its own stat).
    """
    whole = file_mode(path) if mode is None else stat.S_IMODE(mode)
    bits = whole & PRIVATE_MASK
    if not bits:
        return folder_problem(path)
    return (
        f"mode {whole:04o} lets {_whom(bits)} {_access(bits)} it, and a private key must be "
        f"its owner's alone: run chmod 600 {shlex.quote(str(Path(path)))}"
    )


def folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why group or others could replace ``path`` by writing its folder, or None: the
    folder as the path names it and, for a symbolic link, the folder of its target."""
    named = Path(path).absolute().parent
    folders = [named]
    real = Path(os.path.realpath(path)).parent
    if real != named:
        folders.append(real)
    for folder in folders:
        try:
            st = os.stat(folder)
        except OSError:
            continue  # the file's own read reports a folder it cannot reach
        whole = stat.S_IMODE(st.st_mode)
        bits = whole & WRITE_MASK
        if bits and not whole & stat.S_ISVTX:
            return (
                f"its folder {folder} has mode {whole:04o}, which lets {_whom(bits)} "
                f"replace it: run chmod go-w {shlex.quote(str(folder))}"
            )
    return None


def trust_file_problem(path: str | os.PathLike[str], mode: int | None = None) -> str | None:
    """Why group or others could change a trust file (``known_hosts``,
    ``authorized_keys``) or put another in its place, or None."""
    return writable_problem(path, mode) or folder_problem(path)


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
