"""Named crash points: where crash tests make a sender, receiver or loader die (test
runs only).

Crash safety is a claim about every instant between two durable steps. To prove it,
the code names those instants with :func:`crash_point`, and a test run sets::

    SEALSYNC_CRASH_AT=point[:nth][,point[:nth]...]

so that the process SIGKILLs itself on the ``nth`` (default 1st) time it reaches a
named point: a real ``kill -9``, with no cleanup, no ``finally`` and no flush. The
test then restarts the crashed side and checks that a rerun converges.
``SEALSYNC_CRASH_TRACE=<file>`` appends the name of every point reached, one a line,
so a test can prove each declared point is really on a path a round takes.
``SEALSYNC_STOP_AT`` takes the same spec and SIGSTOPs the process there instead, so
a test can kill either side while a round is frozen mid-way, however quickly the
round would otherwise be over.

Production never sets any of them. They are read once, at import: with none
set, :func:`crash_point` is one test of a module constant.

Every name the code uses is declared here (``SENDER_POINTS``, ``RECEIVER_POINTS``,
``LOADER_POINTS``),
so a test can enumerate them all; using an undeclared name fails under a crash or
trace run. ``RECOVERY_POINTS`` are reached only when recovery finds what an earlier
crash left behind, never in a clean round.
"""

from __future__ import annotations

import os
import signal
import threading

ENV_AT = "SEALSYNC_CRASH_AT"
ENV_TRACE = "SEALSYNC_CRASH_TRACE"
ENV_STOP = "SEALSYNC_STOP_AT"
ENV_NAMES = (ENV_AT, ENV_TRACE, ENV_STOP)
"""Every variable of the switch: what a test clears to run a process as production."""

SENDER_POINTS = frozenset(
    {
        # snapshot (docs/design.md §3.4): after each new file's hard links
        "sender.snapshot.linked",
        # after each kind of sync.log line is on disk
        "sender.synclog.start",
        "sender.synclog.deleted_start",
        "sender.synclog.deleted",
        "sender.synclog.deleted_end",
        "sender.synclog.tsfile_start",
        "sender.synclog.tsfile",
        "sender.synclog.tsfile_end",
        "sender.synclog.end",
        # file streaming: after a chunk of a multi-chunk file (the receiver holds part
        # of it), after a whole file stream (its verdict not yet read)
        "sender.file.mid_chunk",
        "sender.file.sent",
        # clean-up = recovery steps 5-8, after each durable step
        "sender.cleanup.current_written",
        "sender.cleanup.last_removed",
        "sender.cleanup.renamed",
        "sender.cleanup.snapshot_removed",
        "sender.cleanup.synclog_removed",
        # recovery branches only a crash leads to
        "sender.recover.current_dropped",
        "sender.recover.current_to_last",
    }
)

RECEIVER_POINTS = frozenset(
    {
        # after each kind of sync.log line is on disk
        "receiver.synclog.start",
        "receiver.synclog.deleted_start",
        "receiver.synclog.deleted",
        "receiver.synclog.deleted_end",
        "receiver.synclog.tsfile_start",
        "receiver.synclog.tsfile",
        "receiver.synclog.tsfile_end",
        "receiver.synclog.end",
        # files renamed into data/, their sync.log line not yet written
        "receiver.staged",
        # sync.end created, the loader not yet finished
        "receiver.sync_end",
        # loading: between the storage change and its load.log line, and after the line
        "receiver.load.moved",
        "receiver.loadlog.load",
        "receiver.delete.removed",
        "receiver.loadlog.delete",
        # forgetting a finished round, after each removal
        "receiver.finish.synclog_removed",
        "receiver.finish.loadlog_removed",
        "receiver.finish.syncend_removed",
        # recovery: after each event replayed
        "receiver.recover.replayed",
    }
)

LOADER_POINTS = frozenset(
    {
        # a remote table's inputs: after each file copied to the table's store
        "loader.upload.file",
        # after a batch's data files moved into their partitions (named uncommitted)
        "loader.batch.moved",
        # the run's one Delta commit: just before it, and just after it (its list of
        # uncommitted files and the ingest record not yet updated)
        "loader.commit.before",
        "loader.commit.after",
    }
)

RECOVERY_POINTS = frozenset(
    {
        "sender.recover.current_dropped",
        "sender.recover.current_to_last",
        "receiver.recover.replayed",
    }
)

POINTS = SENDER_POINTS | RECEIVER_POINTS | LOADER_POINTS


def parse_spec(spec: str, env: str = ENV_AT) -> dict[str, int]:
    """``point[:nth][,...]`` -> {point: nth}; ValueError for an unknown point or bad nth."""
    targets: dict[str, int] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, nth = item.partition(":")
        if name not in POINTS:
            raise ValueError(f"{env}: unknown crash point {name!r}")
        if nth and not (nth.isdigit() and int(nth) >= 1):
            raise ValueError(f"{env}: {item!r}: nth must be 1 or more")
        targets[name] = int(nth or 1)
    return targets


_TARGETS = parse_spec(os.environ.get(ENV_AT, ""))
_STOPS = parse_spec(os.environ.get(ENV_STOP, ""), ENV_STOP)
_TRACE = os.environ.get(ENV_TRACE) or None
ACTIVE = bool(_TARGETS) or bool(_STOPS) or _TRACE is not None
"""False in production: :func:`crash_point` returns at once."""

_hits: dict[str, int] = {}
_lock = threading.Lock()


def crash_point(name: str) -> None:
    """Die here by SIGKILL if the test run asked for it (see the module docstring)."""
    if not ACTIVE:
        return
    _reached(name)


def _reached(name: str) -> None:
    if name not in POINTS:
        raise AssertionError(f"crash point {name!r} is not declared in sealsync.crashpoints")
    with _lock:
        count = _hits.get(name, 0) + 1
        _hits[name] = count
        if _TRACE is not None:
            fd = os.open(_TRACE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{name}\n".encode())
            finally:
                os.close(fd)
        if _TARGETS.get(name) == count:
            os.kill(os.getpid(), signal.SIGKILL)
        if _STOPS.get(name) == count:
            os.kill(os.getpid(), signal.SIGSTOP)
