"""The ``sync.log`` format, one module for sender and receiver (docs/design.md §3.5, §4.2).

``sync.log`` lines are facts: a name in it was acknowledged (deleted) or verified
(new) by the receiver, and recovery acts on it whatever else happened. So a line is on
disk before the round moves on, a name can never forge a marker line (names are
validated before writing and cannot contain a newline), and reading tolerates a log
cut anywhere by a crash. The vocabulary is IoTDB's old sync tool's::

    sync start
    sync deleted file names start
    <relative name of a deleted file>...
    sync deleted file names end
    sync tsfile start
    <relative name of a new file>...
    sync tsfile end
    sync end
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from sealsync import durable
from sealsync.names import data_name_problem, require_data_name

log = logging.getLogger(__name__)

SYNC_START = "sync start"
DELETED_START = "sync deleted file names start"
DELETED_END = "sync deleted file names end"
TSFILE_START = "sync tsfile start"
TSFILE_END = "sync tsfile end"
SYNC_END = "sync end"


class SyncLog:
    """The progress log of one round, every line fsynced before its method returns."""

    def __init__(self, path: Path) -> None:
        self._log = durable.AppendLog(path)

    def start(self) -> None:
        self._log.append(SYNC_START)

    def deleted_start(self) -> None:
        self._log.append(DELETED_START)

    def deleted(self, name: str) -> None:
        self._log.append(require_data_name(name))

    def deleted_many(self, names: Iterable[str]) -> None:
        """Several acknowledged deletions for the price of one fsync."""
        self._log.append_many([require_data_name(name) for name in names])

    def deleted_end(self) -> None:
        self._log.append(DELETED_END)

    def tsfile_start(self) -> None:
        self._log.append(TSFILE_START)

    def tsfile(self, name: str) -> None:
        self._log.append(require_data_name(name))

    def tsfile_many(self, names: Iterable[str]) -> None:
        """Several verified files for the price of one fsync (pipelined verdicts)."""
        self._log.append_many([require_data_name(name) for name in names])

    def tsfile_end(self) -> None:
        self._log.append(TSFILE_END)

    def end(self) -> None:
        self._log.append(SYNC_END)

    def close(self) -> None:
        self._log.close()

    def __enter__(self) -> SyncLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class SyncLogState:
    deleted: tuple[str, ...]
    """Names the receiver acknowledged as deleted, in log order, each once."""
    new: tuple[str, ...]
    """Names the receiver verified, in log order, each once."""
    ended: bool
    """The round reached ``sync end``."""


def parse_sync_log(lines: list[str]) -> SyncLogState:
    """What a (possibly cut) log proves: names count only inside their section.

    A name outside any section, an unknown line or an invalid name is ignored rather
    than fatal: the log is read during recovery, and refusing to recover would block
    every later round; an ignored name is at worst shipped or deleted again.
    """
    deleted: dict[str, None] = {}
    new: dict[str, None] = {}
    section: dict[str, None] | None = None
    ended = False
    for line in lines:
        if line == DELETED_START:
            section = deleted
        elif line == TSFILE_START:
            section = new
        elif line in (DELETED_END, TSFILE_END):
            section = None
        elif line == SYNC_END:
            section = None
            ended = True
        elif line == SYNC_START or not line:
            continue
        elif section is None:
            log.warning("sync.log: ignoring a line outside any section: %r", line[:200])
        elif data_name_problem(line) is None:
            section[line] = None
        else:
            log.warning("sync.log: ignoring an invalid name: %r", line[:200])
    return SyncLogState(deleted=tuple(deleted), new=tuple(new), ended=ended)


def read_sync_log(path: Path) -> SyncLogState:
    """The state of ``path``; a torn last line (crash mid-append) is not read."""
    return parse_sync_log(durable.read_lines(path))


def apply_sync_log(last: AbstractSet[str], log: SyncLogState) -> set[str]:
    """The synced set after a round's log: ``(last - deleted) | new`` (docs/design.md §3.6).

    The one place this rule lives, shared by clean-up, recovery and the dry run, so
    that a dry run predicts exactly what recovery will do. Idempotent: applying a log
    to a set that already includes it changes nothing. ``last`` is not modified.
    """
    return (set(last) - set(log.deleted)) | set(log.new)
