"""What every format module shares: the inspection result and the cheap framing checks.

Received files are untrusted (docs/design.md §4.4), and the native readers are C++: the
cheapest defence is to look at the bytes ourselves first and hand a file to a native
reader only when its head and tail are what a complete file of that format has.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sealsync.errors import FormatError

#: Columns every ``to_arrow`` table starts with; measurements may not reuse them.
TIME_COLUMN = "time"
DEVICE_COLUMN = "device"
RESERVED_COLUMNS = (TIME_COLUMN, DEVICE_COLUMN)


@dataclass(frozen=True)
class FileInfo:
    """What the receiver needs to know about a data file before it accepts it.

    ``devices`` is read from the file itself (never from ``X.resource``) so that
    ownership checks cannot be fooled by a sidecar. ``rows`` counts rows as Spark
    will see them: one row per (time, device) with one column per measurement.
    """

    devices: tuple[str, ...]
    rows: int


def read_head_tail(path: str | os.PathLike[str], head: int, tail: int) -> tuple[int, bytes, bytes]:
    """Size plus the first ``head`` and last ``tail`` bytes, without reading the middle.

    Short files return what they have; callers compare against the magic, so a
    short read simply fails the comparison.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(head)
        if size > tail:
            f.seek(size - tail)
        else:
            f.seek(0)
        last = f.read(tail)
    return size, first, last


def read_up_to(path: str | os.PathLike[str], limit: int) -> bytes:
    """The file's bytes, at most ``limit`` and one more when it is longer, read in
    pieces: one ``read(limit + 1)`` reserves the whole ``limit`` first, more address
    space than a check worker may take for a cap of a gigabyte."""
    pieces: list[bytes] = []
    total = 0
    with open(path, "rb") as f:
        while total <= limit:
            piece = f.read(min(1 << 20, limit + 1 - total))
            if not piece:
                break
            pieces.append(piece)
            total += len(piece)
    return b"".join(pieces)


def one_line(exc: BaseException) -> str:
    """An exception as one short line: native readers put newlines and codes in theirs."""
    text = " ".join(str(exc).split()) or "no detail"
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}"


def unreadable(path: str | os.PathLike[str], kind: str, why: str) -> FormatError:
    return FormatError(f"{os.fspath(path)}: not a complete {kind} ({why})")
