"""``sync_schema_pos``: how many bytes of the schema log the receiver already holds.

Written after every acknowledged piece, atomically, so a crash costs at most one
piece sent again, which is harmless: the receiver skips bytes it already holds.
A missing or damaged file reads as 0 for the same reason: resending is always safe.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sealsync import durable

log = logging.getLogger(f"sealsync.{__name__}")


def read_position(path: Path) -> int:
    try:
        text = Path(path).read_text("ascii").strip()
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s unreadable (%s): the schema log is resent from its start", path, exc)
        return 0
    if not text.isdigit():
        log.warning("%s holds %r, not a position: the schema log is resent", path, text[:40])
        return 0
    return int(text)


def write_position(path: Path, position: int) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    durable.atomic_write(path, f"{position}\n")
