"""One sender per receiver: ``<schema dir>/sync/<host>_<port>/sync.lock`` (docs/design.md §3.1).

Two rounds towards the same receiver would interleave their ``sync.log`` lines and
ship files twice, so a second sender must not wait for the first (cron would stack
them up) but stop at once with its own exit code (75). The lock is the kernel's
(``flock`` through filelock), so a crashed sender never leaves a stale lock behind.

Within one process the lock is reentrant (one filelock instance per path), so the
CLI can hold it around a round that takes it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from sealsync.config import format_endpoint
from sealsync.errors import LocalIOError, LockHeld
from sender.manage.layout import SchemaPaths


@contextmanager
def receiver_lock(schema_dir: Path, host: str, port: int) -> Iterator[Path]:
    """Hold the receiver's lock for the ``with`` body, or raise LockHeld right away."""
    path = SchemaPaths(Path(schema_dir), host, port).lock
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path, timeout=0, is_singleton=True)
        lock.acquire()
    except Timeout:
        raise LockHeld(
            f"another sender holds the lock for {format_endpoint(host, port)} ({path})"
        ) from None
    except OSError as e:
        raise LocalIOError(f"cannot take the lock {path}: {e.strerror or e}") from None
    try:
        yield path
    finally:
        lock.release()
