"""The sender's file-set state files: ``last_local_files.txt``, ``current_local_files.txt``.

One relative data-file name per line, sorted, replaced atomically. The ``sync.log``
format both sides share lives in :mod:`sealsync.synclog`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from pathlib import Path

from sealsync import durable
from sealsync.names import data_name_problem, require_data_name

log = logging.getLogger(f"sealsync.{__name__}")


def read_file_set(path: Path, known: AbstractSet[str] = frozenset()) -> set[str]:
    """The names in a file-set file; a missing file is the empty set (nothing synced yet).

    A line that is not a valid data file name is skipped with a warning: the file is
    only written by ``write_file_set``, so such a line means outside damage, and the
    worst a skipped name costs is one file shipped again. Names in ``known`` (the
    scan's, validated already) are not checked again: with many files that check is
    a noticeable part of an idle round.
    """
    lines = set(durable.read_lines(path))
    lines.discard("")
    names = lines & known if known else set()
    for line in lines - names:
        problem = data_name_problem(line)
        if problem is None:
            names.add(line)
        else:
            log.warning("%s: ignoring a line that is not a data file name: %s", path, problem)
    return names


def write_file_set(path: Path, names: Iterable[str]) -> None:
    """Replace ``path`` atomically with the sorted names, one per line."""
    ordered = sorted(set(names))
    for name in ordered:
        require_data_name(name)
    durable.write_lines(path, ordered)


# Transitional re-exports: the sync.log format moved to sealsync.synclog.
from sealsync.synclog import (  # noqa: E402, F401
    SyncLog,
    SyncLogState,
    apply_sync_log,
    parse_sync_log,
    read_sync_log,
)
