"""Which rows may leave the table: only those of files the receiver deleted on purpose.

A listing of the receiver's folders that comes back short is no proof of anything:
a typo in ``receiver_data_dirs``, an unmounted disk or a sender folder moved by hand
look exactly like "every file was deleted", and acting on it once wiped a table. So
a file that was in the table and is no longer listed loses its rows only on
evidence:

* **deleted**: the receiver logged the deletion of that very version (same sender,
  name, size and mtime) in a data dir's ``sync-receiver/deleted_<uuid>.log``
  (:mod:`sealsync.deletions`), or
* **replaced**: the same sender and name is listed now as another version.

A missing file without evidence keeps its rows and is counted and reported. When
the missing files without evidence are those of a whole data dir that is now missing
or empty, or of the whole listing, the run stops before it changes anything
(:class:`MissingFolder`, exit 1, one line naming the folder): no sender can cause
that, only the host or the config. When they are those of one sender's folders in a
data dir, that sender is *held* (:attr:`Verdict.held`): nothing of its rows leaves,
none of its files goes in, the run says why, and every other sender's files go on as
usual. A sender whose listing is incomplete (:class:`.discovery.Trouble`: a file it
cannot identify, such as one with a folder squatted at its ``.mods``) is held the
same way, whatever the options: its rows are those of files that are still there.
``load --prune-missing`` is the operator's explicit "yes, they are really gone" (a
sender retired by hand): their rows are removed without evidence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sealsync import deletions
from sealsync.errors import SealsyncError
from spark_loader.discovery import SourceFile, Trouble, troubled
from spark_loader.state import FileRecord, IngestState
from spark_loader.table import Partition

PRUNE_HINT = (
    "if these files were really removed, `sealsync load --prune-missing` takes their rows out"
)


class MissingFolder(SealsyncError):
    """A folder the table has rows from is missing or empty, without logged deletions."""

    kind = "missing_folder"


@dataclass
class Verdict:
    remove: list[str] = field(default_factory=list)  # file ids whose rows leave the table
    kept: list[str] = field(default_factory=list)  # missing, no evidence: rows kept
    pruned: int = 0  # removed without evidence (--prune-missing)
    labels: dict[str, str] = field(default_factory=dict)  # file id -> sender:name
    #: Senders whose files all wait this run, and why: none of their rows leaves and
    #: none of their files goes in; the other senders are not concerned.
    held: dict[str, str] = field(default_factory=dict)
    #: The ids of every file in the table of a held sender: kept as they are (a
    #: ``--full`` build carries them over).
    waiting: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Gone:
    file_id: str
    sender: str
    name: str
    data_dir: str  # "" when the record predates data dirs being recorded
    record: FileRecord | None


def decide(
    state: IngestState,
    partitions: dict[str, Partition],
    listed: Iterable[SourceFile],
    data_dirs: list[Path],
    prune_missing: bool = False,
    troubles: Iterable[Trouble] = (),
) -> Verdict:
    """Split the files in the table but not listed into removed and kept, and name
    the senders held (module docstring): a sender with ``troubles`` (its listing is
    incomplete), and, unless ``prune_missing``, one whose folders in a data dir are
    gone while the table holds rows from them.

    Raises MissingFolder (nothing decided, nothing changed) when the unexplained
    ones are a whole data dir's or the whole listing's, unless ``prune_missing``.
    """
    files = list(listed)
    trouble = list(troubles)
    held = troubled(trouble)
    wanted = {f.file_id for f in files}
    present = set(partitions) | {fid for fid, r in state.files.items() if r.rows == 0}
    gone = [_gone(fid, state, partitions) for fid in sorted(present - wanted)]
    verdict = Verdict(labels={g.file_id: f"{g.sender}:{g.name}" for g in gone})
    listed_names = {(f.sender, f.name) for f in files}
    logged = deletions.read(data_dirs) if gone else set()
    logged_names = {(d.sender, d.name) for d in logged}
    unexplained = []
    for g in gone:
        if g.sender in held:
            continue  # its listing cannot tell what is gone: nothing of it is decided
        if (g.sender, g.name) in listed_names or _logged(g, logged, logged_names):
            verdict.remove.append(g.file_id)
        else:
            unexplained.append(g)
    if prune_missing:
        verdict.remove.extend(g.file_id for g in unexplained)
        verdict.pruned = len(unexplained)
    elif unexplained:
        for sender, reason in _check_folders(unexplained, files, data_dirs, trouble).items():
            held.setdefault(sender, reason)
        verdict.kept = [g.file_id for g in unexplained if g.sender not in held]
    verdict.held = dict(sorted(held.items()))
    verdict.remove = [
        fid for fid in verdict.remove if _sender_of(fid, state, partitions) not in held
    ]
    verdict.waiting = sorted(fid for fid in present if _sender_of(fid, state, partitions) in held)
    return verdict


def _sender_of(fid: str, state: IngestState, partitions: dict[str, Partition]) -> str:
    record = state.files.get(fid)
    return record.sender if record is not None else partitions[fid].sender


def _gone(fid: str, state: IngestState, partitions: dict[str, Partition]) -> _Gone:
    record = state.files.get(fid)
    if record is not None:
        return _Gone(fid, record.sender, record.name, record.data_dir, record)
    partition = partitions[fid]
    return _Gone(fid, partition.sender, partition.source_file, "", None)


def _logged(g: _Gone, logged: set[deletions.Deleted], logged_names: set[tuple[str, str]]) -> bool:
    """Evidence for this version; a partition nobody recorded (a lost state file)
    has no known version, so any logged deletion of its name counts."""
    if g.record is None:
        return (g.sender, g.name) in logged_names
    return deletions.Deleted(g.sender, g.name, g.record.size, g.record.mtime_ns) in logged


def sender_folder(data_dir: str, sender: str, name: str) -> str:
    """The receiver's folder that holds ``sender``'s ``name`` in ``data_dir``."""
    return str(Path(data_dir).joinpath(*name.split("/")[:-1], sender))


def _check_folders(
    unexplained: list[_Gone],
    files: list[SourceFile],
    data_dirs: list[Path],
    troubles: list[Trouble],
) -> dict[str, str]:
    """Raise MissingFolder if the unexplained files are those of a whole data dir or of
    the whole listing; the senders whose own folders they are, and why (held)."""
    count = len(unexplained)
    if not files and not troubles:
        where = ", ".join(str(d) for d in data_dirs)
        raise MissingFolder(
            f"the receiver data dirs {where} hold no loaded files, but the table holds the "
            f"rows of {count} files from them: nothing removed (a wrong receiver_data_dirs "
            f"or an unmounted disk?); {PRUNE_HINT}"
        )
    configured = {str(d) for d in data_dirs}
    in_dir = {str(d): 0 for d in data_dirs}
    of_sender: set[tuple[str, str]] = set()
    senders: set[str] = set()
    for f in files:
        home = _home(f, data_dirs)
        in_dir[home] = in_dir.get(home, 0) + 1
        of_sender.add((home, f.sender))
        senders.add(f.sender)
    for t in troubles:  # seen, if not identified: the data dir is not empty
        in_dir[str(t.data_dir)] = in_dir.get(str(t.data_dir), 0) + 1
    for g in unexplained:
        if not g.data_dir:
            continue
        if g.data_dir not in configured:
            raise MissingFolder(
                f"{g.data_dir} is no longer in receiver_data_dirs, but the table holds the "
                f"rows of files from it ({g.sender}:{g.name}): nothing removed; {PRUNE_HINT}"
            )
        if not Path(g.data_dir).is_dir() or not in_dir.get(g.data_dir):
            state = "is missing" if not Path(g.data_dir).is_dir() else "holds no loaded files"
            raise MissingFolder(
                f"the receiver data dir {g.data_dir} {state}, but the table holds the rows "
                f"of files from it: nothing removed (an unmounted disk?); {PRUNE_HINT}"
            )
    held: dict[str, str] = {}
    for g in unexplained:
        if g.sender in held:
            continue
        if g.data_dir and (g.data_dir, g.sender) not in of_sender:
            folder = sender_folder(g.data_dir, g.sender, g.name)
            held[g.sender] = (
                f"sender {g.sender} has no loaded files left in {g.data_dir} (its folders "
                f"such as {folder} are missing or empty), but the table holds the rows of "
                f"files from them: nothing of it removed or loaded; {PRUNE_HINT}"
            )
        elif not g.data_dir and g.sender not in senders:
            held[g.sender] = (
                f"sender {g.sender} has no loaded files left in the receiver data dirs, but "
                f"the table holds the rows of its files: nothing of it removed or loaded; "
                f"{PRUNE_HINT}"
            )
    return held


def _home(source: SourceFile, data_dirs: list[Path]) -> str:
    """The configured data dir a listed file was found in."""
    if source.data_dir is not None:
        return str(source.data_dir)
    for d in data_dirs:
        if source.path.is_relative_to(d):
            return str(d)
    return ""
