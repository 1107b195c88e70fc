"""Receiver recovery: finish whatever a crash left half applied (docs/design.md §4.6, §9.9).

At service start and at each round start, per sender folder: without ``sync.log``
there is no round to finish and the leftovers go; with it, every event ``sync.log``
holds that ``load.log`` does not record is applied again, and only then is the round
forgotten. ``load.log`` is read before anything is replayed and never truncated (the
original tool truncated it first and so replayed what it had already applied). Each
load and delete is idempotent, so replaying an event whose effect landed just before
the crash (file moved, line not yet logged) is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from receiver.layout import SenderFolder, read_sync_log, sender_folders
from receiver.load.apply import Applier, Inspect, clear_staging, finish_round, read_load_log
from receiver.load.owners import DeviceOwners
from receiver.partials import DEFAULT_MAX_AGE, PARTIAL_FOLDER, migrate_partials, sweep_all
from receiver.storage import Storage
from sealsync import durable
from sealsync.crashpoints import crash_point

log = logging.getLogger(f"sealsync.{__name__}")


def recover_folder(
    folder: SenderFolder,
    storage: Storage,
    owners: DeviceOwners,
    inspect: Inspect,
) -> bool:
    """Replay and clear one sender folder; True when clean, False when some event failed.

    On False nothing is cleared: the failed events stay in ``sync.log`` with their
    staged files, to be tried again at the next round start.
    """
    if not folder.sync_log.exists():
        durable.remove(folder.load_log)
        durable.remove(folder.sync_end)
        clear_staging(folder)
        return True
    arrived = read_sync_log(folder.sync_log)
    applied = read_load_log(folder.load_log)
    failed = 0
    applier = Applier(folder, storage, owners, inspect)
    try:
        for name in arrived.deleted:
            if name not in applied.deleted:
                failed += not _replay(folder, "delete", name, applier.delete)
        for name in arrived.new:
            if name not in applied.loaded:
                failed += not _replay(folder, "load", name, applier.load)
    finally:
        applier.close()
    if failed:
        log.warning("%s: %d event(s) not applied, kept for the next try", folder.root, failed)
        return False
    finish_round(folder)
    return True


def _replay(folder: SenderFolder, kind: str, name: str, apply: Callable[[str], None]) -> bool:
    try:
        apply(name)
    except Exception as exc:  # one bad event must not stop the others
        log.warning("%s: replaying %s %s failed: %s", folder.root, kind, name, exc)
        return False
    crash_point("receiver.recover.replayed")
    return True


def recover_all(
    data_dirs: list[Path],
    storage: Storage,
    owners: DeviceOwners,
    inspect: Inspect,
    partial_max_age: float = DEFAULT_MAX_AGE,
) -> None:
    """Recover every sender folder (service start); a folder that stays dirty is logged.

    Partial uploads (``partial/``) are swept too: expired ones, and what a crash
    left torn (a sidecar whose data is shorter than it says, data without a
    sidecar, a resumed stream's sidecar temporaries); intact ones stay to resume."""
    for folder in sender_folders(data_dirs):
        try:
            recover_folder(folder, storage, owners, inspect)
        except Exception as exc:  # one broken folder must not keep the service down
            log.warning("%s: recovery failed: %s", folder.root, exc)
        if (folder.root / PARTIAL_FOLDER).is_dir():  # kept per address by earlier versions
            try:
                moved = migrate_partials(folder.root, folder.data_dir, folder.uuid)
                if moved:
                    log.info("%s: moved %d partial upload(s) to the sender's", folder.root, moved)
            except OSError as exc:
                log.warning("%s: moving partial uploads failed: %s", folder.root, exc)
    removed = sweep_all(data_dirs, partial_max_age)
    if removed:
        log.info("removed %d partial-upload file(s)", removed)
