"""The receiver's open-files limit, raised to what its sessions can hold.

Every complete stream waiting for its batch's commit keeps its temporaries open (the
data file, its ``.resource``, its ``.mods`` or ``.mods2``), up to ``MAX_ARRIVED`` of them per
session, so ``max_sessions`` senders of small files hold thousands of descriptors at
once; the usual soft limit of 1024 would turn the excess into refused files
("Too many open files"). Like most servers (nginx's ``worker_rlimit_nofile``, the Go
and Java runtimes) the receiver raises the soft limit to the hard one at start, and
says so when even that is too low.
"""

from __future__ import annotations

import logging
import resource

from receiver.commit import MAX_ARRIVED

log = logging.getLogger(f"sealsync.{__name__}")

PER_STREAM = 3
"""Descriptors one waiting stream holds: data file, ``.resource``, ``.mods`` or ``.mods2``
(a release of IoTDB writes one of the two; a file with both holds one more)."""
BASE = 256
"""Descriptors besides the streams: listening and session sockets, logs, locks, the
inspection workers' pipes."""


def needed(max_sessions: int) -> int:
    """Descriptors ``max_sessions`` sessions of small files can hold at once."""
    return BASE + max_sessions * (MAX_ARRIVED * PER_STREAM + 16)


def raise_open_files_limit(max_sessions: int) -> int:
    """Raise the soft limit as far as the hard one allows; returns the soft limit now."""
    want = needed(max_sessions)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("open files limit raised from %d to %d", soft, target)
            soft = target
        except (ValueError, OSError) as exc:  # a hard limit the kernel caps lower
            log.warning("could not raise the open files limit from %d: %s", soft, exc)
    if soft != resource.RLIM_INFINITY and soft < want:
        log.warning(
            "open files limit %d is below the %d that max_sessions = %d sessions of small "
            "files can hold open: raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) "
            "or lower max_sessions",
            soft,
            want,
            max_sessions,
        )
    return soft
