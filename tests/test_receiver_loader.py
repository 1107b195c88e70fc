"""The per-sender loader (docs/design.md §4.5, §9.2-§9.6), on real TsFiles and file systems."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from receiver_load_helpers import (
    UUID_A,
    UUID_B,
    Round,
    assert_clean,
    files_under,
    inspect,
    make_env,
    sender_files_on_disk,
    stage,
)

from receiver.layout import SenderFolder
from receiver.load.loader import FolderLoader
from receiver.recover.replay import recover_folder
from receiver.storage import DirectoryStorage, StorageError
from sealsync.errors import SealsyncError

GROUPS = ("root.sg0", "root.sg1", "root.sg2")


def names(group: str, count: int, root: str = "sequence") -> list[str]:
    return [f"{root}/{group}/0/{1000 + i}-{i}-0.tsfile" for i in range(count)]


def run_round(
    folder: SenderFolder,
    loader: FolderLoader,
    new: list[str] = (),  # type: ignore[assignment]
    deleted: list[str] = (),  # type: ignore[assignment]
    devices: dict[str, list[str]] | None = None,
) -> bool:
    """A round as the session drives it: log each event, hand it over, end, finish."""
    rnd = Round(folder)
    rnd.log.deleted_start()
    for name in deleted:
        rnd.log.deleted(name)
        loader.delete(name)
    rnd.log.deleted_end()
    rnd.log.tsfile_start()
    for name in new:
        group = name.split("/")[1]
        stage(folder, name, (devices or {}).get(name, [f"{group}.d_{folder.uuid[:4]}"]))
        rnd.log.tsfile(name)
        loader.load(name)
    rnd.log.tsfile_end()
    rnd.end()
    return loader.finish(timeout=60)


def test_three_groups_of_ten_load_exactly_and_the_folder_is_cleaned(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    expected = {n for g in GROUPS for n in names(g, 10)}
    with FolderLoader(folder, storage, owners, inspect) as loader:
        assert run_round(folder, loader, new=sorted(expected)) is True
        assert loader.pending() == 0
        assert loader.failures() == {}
    assert storage.list(UUID_A) == expected
    assert sender_files_on_disk(data_dir, UUID_A) == expected
    for group in GROUPS:
        assert {n for n in storage.list(UUID_A) if f"/{group}/" in n} == set(names(group, 10))
    assert owners.by_owner() == {UUID_A: sorted(f"{g}.d_{UUID_A[:4]}" for g in GROUPS)}
    assert_clean(folder)


def test_twenty_five_loaded_then_fifteen_deleted_leaves_the_right_ten(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    loaded = [n for g in GROUPS for n in names(g, 25)]
    deleted = [n for g in GROUPS for n in names(g, 25)[5:20]]
    with FolderLoader(folder, storage, owners, inspect) as loader:
        assert run_round(folder, loader, new=loaded) is True
        assert storage.list(UUID_A) == set(loaded)
        assert run_round(folder, loader, deleted=deleted) is True
    expected = {n for g in GROUPS for n in names(g, 25)[:5] + names(g, 25)[20:]}
    assert storage.list(UUID_A) == expected
    assert sender_files_on_disk(data_dir, UUID_A) == expected
    for group in GROUPS:
        assert len([n for n in expected if f"/{group}/" in n]) == 10
    assert_clean(folder)


def test_a_conflicting_file_is_kept_and_the_senders_other_files_load(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    a = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    b = SenderFolder(data_dir, "10.0.0.2", UUID_B)
    a_names = ["sequence/g/0/a1.tsfile"]
    b_names = ["sequence/g/0/b1.tsfile", "sequence/g/0/b2.tsfile", "sequence/g/0/b3.tsfile"]
    devices = {
        "sequence/g/0/a1.tsfile": ["root.g.da"],
        "sequence/g/0/b1.tsfile": ["root.g.db"],
        "sequence/g/0/b2.tsfile": ["root.g.da", "root.g.db2"],  # A owns root.g.da
        "sequence/g/0/b3.tsfile": ["root.g.db3"],
    }
    with (
        FolderLoader(a, storage, owners, inspect) as la,
        FolderLoader(b, storage, owners, inspect) as lb,
    ):
        assert run_round(a, la, new=a_names, devices=devices) is True
        assert run_round(b, lb, new=b_names, devices=devices) is False
        assert set(lb.failures()) == {"sequence/g/0/b2.tsfile"}
        assert "root.g.da" in lb.failures()["sequence/g/0/b2.tsfile"]
        assert UUID_A in lb.failures()["sequence/g/0/b2.tsfile"]
        assert owners.claim(["root.g.da"], UUID_B) == {"root.g.da": UUID_A}
        # A keeps loading its device
        more = {"sequence/g/0/a2.tsfile": ["root.g.da"]}
        assert run_round(a, la, new=list(more), devices=more) is True
    assert storage.list(UUID_A) == {"sequence/g/0/a1.tsfile", "sequence/g/0/a2.tsfile"}
    assert storage.list(UUID_B) == {"sequence/g/0/b1.tsfile", "sequence/g/0/b3.tsfile"}
    assert owners.owners_of(["root.g.da", "root.g.db", "root.g.db2", "root.g.db3"]) == {
        "root.g.da": UUID_A,
        "root.g.db": UUID_B,
        "root.g.db2": "",  # nothing of the refused file was claimed
        "root.g.db3": UUID_B,
    }
    # B's refused file and its round stay for recovery (nothing erased, docs/design.md §9.6)
    assert b.sync_log.exists() and b.sync_end.exists()
    assert (b.load_log.read_text().splitlines()) == [
        "load sequence/g/0/b1.tsfile",
        "load sequence/g/0/b3.tsfile",
    ]
    assert files_under(b.data) == {"sequence/g/0/b2.tsfile", "sequence/g/0/b2.tsfile.resource"}
    assert_clean(a)


def test_deleting_x_touches_only_that_senders_x(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    a = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    b = SenderFolder(data_dir, "10.0.0.2", UUID_B)
    x = "sequence/g/0/x.tsfile"
    own = data_dir / x  # the host's own sequence/g/0/X
    own.parent.mkdir(parents=True)
    own.write_bytes(b"the host's own file")
    with (
        FolderLoader(a, storage, owners, inspect) as la,
        FolderLoader(b, storage, owners, inspect) as lb,
    ):
        assert run_round(a, la, new=[x], devices={x: ["root.g.a"]}) is True
        assert run_round(b, lb, new=[x], devices={x: ["root.g.b"]}) is True
        b_bytes = storage.target(data_dir, UUID_B, x).read_bytes()
        assert run_round(a, la, deleted=[x]) is True
    assert storage.list(UUID_A) == set()
    assert storage.list(UUID_B) == {x}
    assert storage.target(data_dir, UUID_B, x).read_bytes() == b_bytes
    assert own.read_bytes() == b"the host's own file"
    assert not storage.target(data_dir, UUID_A, x).exists()


def test_a_synced_file_that_gains_mods_stays_loaded(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    x, y = "sequence/g/0/x.tsfile", "sequence/g/0/y.tsfile"
    with FolderLoader(folder, storage, owners, inspect) as loader:
        assert run_round(folder, loader, new=[x, y]) is True
        content = storage.target(data_dir, UUID_A, x).read_bytes()
        # X gained .mods on the sender: it is not shipped as deleted; the next round
        # deletes only what vanished and (when mods shipping lands) resends X with its mods
        rnd = Round(folder)
        rnd.deleted([y])
        loader.delete(y)
        staged = folder.staged(x)
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_bytes(content)
        Path(f"{staged}.resource").write_bytes(b"resource")
        Path(f"{staged}.mods").write_bytes(b"deleted points")
        rnd.new([x])
        loader.load(x)
        rnd.end()
        assert loader.finish(timeout=60) is True
    assert storage.list(UUID_A) == {x}
    target = storage.target(data_dir, UUID_A, x)
    assert target.read_bytes() == content
    assert Path(f"{target}.mods").read_bytes() == b"deleted points"
    assert_clean(folder)


def test_unsequence_files_load(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    new = names("root.sg0", 3, "unsequence") + names("root.sg0", 2)
    with FolderLoader(folder, storage, owners, inspect) as loader:
        assert run_round(folder, loader, new=new) is True
    assert storage.list(UUID_A) == set(new)
    assert sender_files_on_disk(data_dir, UUID_A) == set(new)


def test_a_different_existing_target_is_an_error_and_the_staged_file_is_kept(
    tmp_path: Path,
) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    x = "sequence/g/0/x.tsfile"
    with FolderLoader(folder, storage, owners, inspect) as loader:
        assert run_round(folder, loader, new=[x]) is True
        before = storage.target(data_dir, UUID_A, x).read_bytes()
        assert run_round(folder, loader, new=[x]) is False  # new bytes under the same name
        assert "different" in loader.failures()[x]
    assert storage.target(data_dir, UUID_A, x).read_bytes() == before
    assert files_under(folder.data) == {x, f"{x}.resource"}
    assert folder.sync_log.exists()


class FlakyStorage(DirectoryStorage):
    """Refuses loads while ``broken`` is set, like a host that is out of space."""

    broken = True

    def load(self, sender: str, name: str, staged: Path) -> None:
        if self.broken:
            raise StorageError(f"{name}: no space left on the host")
        super().load(sender, name, staged)


def test_a_failed_load_keeps_file_and_log_and_recovery_completes_it(tmp_path: Path) -> None:
    data_dir, _storage, owners = make_env(tmp_path)
    storage = FlakyStorage([data_dir])
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    new = names("root.sg0", 3)
    with FolderLoader(folder, storage, owners, inspect) as loader:
        assert run_round(folder, loader, new=new) is False
        assert set(loader.failures()) == set(new)
        assert loader.pending() == 0
    assert files_under(folder.data) == set(new) | {f"{n}.resource" for n in new}
    assert folder.sync_log.exists() and folder.sync_end.exists()
    assert storage.list(UUID_A) == set()
    assert recover_folder(folder, storage, owners, inspect) is False  # still broken: kept
    assert files_under(folder.data) == set(new) | {f"{n}.resource" for n in new}
    storage.broken = False
    assert recover_folder(folder, storage, owners, inspect) is True
    assert storage.list(UUID_A) == set(new)
    assert_clean(folder)


class BlockingStorage(DirectoryStorage):
    def __init__(self, data_dirs: list[Path]) -> None:
        super().__init__(data_dirs)
        self.release = threading.Event()
        self.entered = threading.Event()

    def load(self, sender: str, name: str, staged: Path) -> None:
        self.entered.set()
        assert self.release.wait(30)
        super().load(sender, name, staged)


def test_finish_waits_for_the_queue_and_reports_still_loading(tmp_path: Path) -> None:
    data_dir, _storage, owners = make_env(tmp_path)
    storage = BlockingStorage([data_dir])
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    new = names("root.sg0", 2)
    rnd = Round(folder)
    rnd.new(new)
    for name in new:
        stage(folder, name)
    rnd.end()
    with FolderLoader(folder, storage, owners, inspect) as loader:
        for name in new:
            loader.load(name)
        assert loader.finish(timeout=0.2) is False
        assert loader.pending() == 2
        assert folder.sync_log.exists()
        storage.release.set()
        assert loader.finish(timeout=60) is True
        assert loader.pending() == 0
    assert storage.list(UUID_A) == set(new)
    assert_clean(folder)


def test_finish_without_sync_end_keeps_the_round(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    x = "sequence/g/0/x.tsfile"
    rnd = Round(folder)
    rnd.new([x])
    stage(folder, x)
    with FolderLoader(folder, storage, owners, inspect) as loader:
        loader.load(x)
        assert loader.finish(timeout=60) is False
    assert storage.list(UUID_A) == {x}
    assert folder.load_log.read_text() == f"load {x}\n"
    assert folder.sync_log.exists()


def test_close_leaves_unapplied_events_for_recovery(tmp_path: Path) -> None:
    data_dir, _storage, owners = make_env(tmp_path)
    storage = BlockingStorage([data_dir])
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    new = names("root.sg0", 3)
    rnd = Round(folder)
    rnd.new(new)
    for name in new:
        stage(folder, name)
    rnd.end()
    loader = FolderLoader(folder, storage, owners, inspect)
    for name in new:
        loader.load(name)
    assert storage.entered.wait(30)  # the first load is in progress
    closer = threading.Thread(target=loader.close)
    closer.start()
    deadline = time.monotonic() + 30
    while not loader._stopping and time.monotonic() < deadline:  # close() has begun
        time.sleep(0.01)
    storage.release.set()  # the load in progress completes; the two queued ones wait
    closer.join(30)
    assert not closer.is_alive()
    assert folder.load_log.read_text() == f"load {new[0]}\n"
    with pytest.raises(SealsyncError, match="closed"):
        loader.load(new[0])
    assert recover_folder(folder, storage, owners, inspect) is True
    assert storage.list(UUID_A) == set(new)
    assert_clean(folder)


def test_a_loader_no_round_holds_ends_idle_and_the_next_round_gets_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread per sender for the life of the service does not scale to a fleet: a
    released loader ends once idle, a held one never does, and the folder's next round
    starts a new one that applies its events in order as the first did."""
    from receiver import rounds as rounds_module
    from receiver.load import loader as loader_module

    monkeypatch.setattr(loader_module, "IDLE_EXIT", 0.2)
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    rounds = rounds_module.Rounds(storage, owners, inspect)
    try:
        first = rounds.begin(folder)
        time.sleep(0.6)  # held by its round: idle, but alive
        assert first._thread.is_alive()
        assert run_round(folder, first, new=names("root.sg0", 3)) is True
        rounds.end(folder)
        first._thread.join(5)
        assert not first._thread.is_alive()  # released and idle: its thread ended

        second = rounds.begin(folder)
        assert second is not first and second._thread.is_alive()
        gone = names("root.sg0", 3)[:2]
        assert run_round(folder, second, new=names("root.sg1", 2), deleted=gone) is True
        rounds.end(folder)
        assert storage.list(UUID_A) == {*names("root.sg0", 3)[2:], *names("root.sg1", 2)}
        assert_clean(folder)
    finally:
        rounds.close()
