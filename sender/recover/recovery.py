"""The sender's recovery, IoTDB's old sync tool's algorithm step by step (docs/design.md §3.2).

It is also the clean-up after a successful round: one code path for both means the
path that runs after a crash is the one every round exercises. Each step is
idempotent and durable before the next (``durable`` fsyncs the folder after every
unlink, rename and replace), so a crash at any instant followed by a rerun ends in
the same ``last_local_files.txt``: ``(last - deleted) | new`` for what ``sync.log``
recorded, nothing more and nothing less.

The same fold brings ``shipped_mods.txt`` up to date (which ``.mods`` each synced file
shipped with, :mod:`sender.manage.shipped_mods`): it is idempotent and durable
before step 5 writes ``current_local_files.txt``, because the branch that finds
``current`` alone (step 7) trusts everything of step 4 to be done.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sealsync import durable
from sealsync.crashpoints import crash_point
from sealsync.synclog import apply_sync_log, read_sync_log
from sender.manage import shipped_mods
from sender.manage.layout import SenderPaths
from sender.manage.state import read_file_set, write_file_set


def recover(paths: SenderPaths) -> None:
    """Bring ``paths.folder`` to a state with no round in flight."""
    if not paths.folder.is_dir():
        return  # never synced with this receiver from this data dir
    current, last, sync_log = paths.current_local_files, paths.last_local_files, paths.sync_log
    if current.exists():  # 1
        if last.exists():  # 2: last is still the truth; current is redone from it and the log
            durable.remove(current)
            crash_point("sender.recover.current_dropped")
        else:  # cleanup wrote current in full (atomically), then deleted last
            durable.rename(current, last)  # 7
            crash_point("sender.recover.current_to_last")
            _drop_round(paths)  # 8
            return
    if sync_log.exists():  # 3
        round_log = read_sync_log(sync_log)
        names = apply_sync_log(read_file_set(last), round_log)  # 4
        shipped_mods.fold_round(paths, round_log, names)  # 4, for the .mods identities
        write_file_set(current, names)  # 5
        crash_point("sender.cleanup.current_written")
        durable.remove(last)  # 6
        crash_point("sender.cleanup.last_removed")
        durable.rename(current, last)  # 7
        crash_point("sender.cleanup.renamed")
    _drop_round(paths)  # 8


def _drop_round(paths: SenderPaths) -> None:
    """Step 8: the snapshot first, the log last, so a log left behind still means "redo 4-8";
    the snapshot's ``.mods`` identities after the log, which may still need them."""
    if _remove_tree(paths.snapshot):
        crash_point("sender.cleanup.snapshot_removed")
    if durable.remove(paths.sync_log):
        crash_point("sender.cleanup.synclog_removed")
    if os.path.lexists(paths.snapshot_mods):  # most rounds have none: no call at all
        durable.remove(paths.snapshot_mods)


def _remove_tree(path: Path) -> bool:
    """Remove ``path`` (a tree or a file) durably; True if it existed."""
    if path.is_symlink() or path.is_file():
        return durable.remove(path)
    if path.is_dir():
        shutil.rmtree(path)
        durable.fsync_dir(path.parent)
        return True
    return False


def recover_all(data_dirs: list[Path], host: str, port: int) -> None:
    """Recover every data dir that has a state folder for this receiver."""
    for data_dir in data_dirs:
        recover(SenderPaths(Path(data_dir), host, port))
