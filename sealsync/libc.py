"""C library calls the ``os`` module lacks (``syncfs``, ``renameat2``), found by name.

One lookup for every caller: a C library without the symbol (an old glibc, musl, not
Linux) gives None, and the caller falls back to what ``os`` has. ctypes releases the
GIL for the call, as ``os`` does for its own system calls.
"""

from __future__ import annotations

import ctypes
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
