"""C library calls the ``os`` module lacks (``syncfs``, ``renameat2``), found by name.

One lookup for every caller: a C library without the symbol (an old glibc, musl, not
Linux) gives None, and the caller falls back to what ``os`` has. ctypes releases the
GIL for the call, as ``os`` does for its own system calls.
"""

from __future__ import annotations

import ctypes
import errno as errnos
import os
from collections.abc import Callable
from typing import Any


def function(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """``name`` from the C library, returning a C int and setting ``errno``; None if absent."""
    try:
        call = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    call.argtypes = argtypes
    call.restype = ctypes.c_int
    return call  # type: ignore[no-any-return]


def errno() -> int:
    """The ``errno`` the last call through :func:`function` set on this thread."""
    return ctypes.get_errno()


RENAME_NOREPLACE = 1
"""``renameat2`` flag: fail with EEXIST instead of replacing the target."""
RENAME_EXCHANGE = 2
"""``renameat2`` flag: swap the two paths atomically."""
_AT_FDCWD = -100
_RENAMEAT2 = function(
    "renameat2", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
)


def renameat2(src: str | os.PathLike[str], dst: str | os.PathLike[str], flags: int) -> bool:
    """``renameat2(2)`` with ``flags``; False, with nothing done, where the C library, the
    kernel or the file system cannot (the caller then does without the flag).

    OSError as ``os.rename`` raises it otherwise (FileExistsError for a target that
    ``RENAME_NOREPLACE`` keeps, FileNotFoundError for a missing source).
    """
    if _RENAMEAT2 is None:  # glibc < 2.28, musl, not Linux
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    code = errno()
    if code in (errnos.ENOSYS, errnos.EINVAL, errnos.ENOTSUP, errnos.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(src), None, os.fspath(dst))
