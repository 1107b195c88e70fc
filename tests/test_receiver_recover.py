"""Receiver recovery: replay what sync.log has, load.log lacks (docs/design.md §4.6, §9.6, §9.9)."""

from __future__ import annotations

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
from receiver.load.apply import Applier
from receiver.load.owners import DeviceOwners
from receiver.recover.replay import recover_all, recover_folder
from receiver.storage import DirectoryStorage

NEW = [f"sequence/root.sg1/0/{i}-{i}-0.tsfile" for i in range(4)]
OLD = ["sequence/root.sg1/0/old-1.tsfile", "unsequence/root.sg1/0/old-2.tsfile"]


class CountingStorage(DirectoryStorage):
    """Records every call, to prove recovery replays only what load.log lacks."""

    def __init__(self, data_dirs: list[Path]) -> None:
        super().__init__(data_dirs)
        self.loads: list[str] = []
        self.deletes: list[str] = []

    def load(self, sender: str, name: str, staged: Path) -> None:
        self.loads.append(name)
        super().load(sender, name, staged)

    def delete(self, sender: str, name: str) -> bool:
        self.deletes.append(name)
        return super().delete(sender, name)


def crashed_round(
    tmp_path: Path, ended: bool
) -> tuple[Path, CountingStorage, DeviceOwners, SenderFolder]:
    """OLD loaded in an earlier round; this round deletes OLD and loads NEW; it crashed
    after the deletes and the first load were logged, before the second load."""
    data_dir, _storage, owners = make_env(tmp_path)
    storage = CountingStorage([data_dir])
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    applier = Applier(folder, storage, owners, inspect)
    for name in OLD:
        stage(folder, name)
        applier.load(name)
    applier.close()
    folder.load_log.unlink()  # that round finished
    rnd = Round(folder)
    rnd.deleted(OLD)
    for name in NEW:
        stage(folder, name)
    rnd.new(NEW)
    if ended:
        rnd.end()
    for name in OLD:
        applier.delete(name)
    applier.load(NEW[0])
    applier.close()
    storage.loads.clear()
    storage.deletes.clear()
    return data_dir, storage, owners, folder


@pytest.mark.parametrize("ended", [True, False])
def test_partial_load_log_replays_only_the_missing_events(tmp_path: Path, ended: bool) -> None:
    data_dir, storage, owners, folder = crashed_round(tmp_path, ended)
    assert folder.sync_end.exists() is ended
    assert recover_folder(folder, storage, owners, inspect) is True
    assert storage.deletes == []
    assert storage.loads == NEW[1:]
    assert storage.list(UUID_A) == set(NEW)
    assert sender_files_on_disk(data_dir, UUID_A) == set(NEW)
    assert_clean(folder)


def test_a_file_moved_but_not_logged_replays_idempotently(tmp_path: Path) -> None:
    data_dir, storage, owners, folder = crashed_round(tmp_path, ended=True)
    storage.load(UUID_A, NEW[1], folder.staged(NEW[1]))  # moved; crash before "load X"
    moved = storage.target(data_dir, UUID_A, NEW[1]).read_bytes()
    storage.loads.clear()
    assert recover_folder(folder, storage, owners, inspect) is True
    assert storage.loads == NEW[1:]
    assert storage.target(data_dir, UUID_A, NEW[1]).read_bytes() == moved
    assert storage.list(UUID_A) == set(NEW)
    assert_clean(folder)


@pytest.mark.parametrize("moved", [True, False])
def test_a_torn_last_line_in_load_log_is_not_a_record(tmp_path: Path, moved: bool) -> None:
    data_dir, storage, owners, folder = crashed_round(tmp_path, ended=True)
    if moved:
        storage.load(UUID_A, NEW[1], folder.staged(NEW[1]))
        storage.loads.clear()
    with open(folder.load_log, "a") as f:
        f.write(f"load {NEW[1]}")  # torn: no newline
    assert recover_folder(folder, storage, owners, inspect) is True
    assert storage.loads == NEW[1:]
    assert storage.list(UUID_A) == set(NEW)
    assert sender_files_on_disk(data_dir, UUID_A) == set(NEW)
    assert_clean(folder)


def test_load_log_is_kept_whole_while_a_replay_fails(tmp_path: Path) -> None:
    _data_dir, storage, owners, folder = crashed_round(tmp_path, ended=True)
    before = folder.load_log.read_text()
    owners.release(["root.sg.d0"])  # released, and another sender took it meanwhile
    assert owners.claim(["root.sg.d0"], UUID_B) == {}
    assert recover_folder(folder, storage, owners, inspect) is False
    assert folder.load_log.read_text() == before
    assert folder.sync_log.exists() and folder.sync_end.exists()
    assert files_under(folder.data) == {n for x in NEW[1:] for n in (x, f"{x}.resource")}
    owners.release(["root.sg.d0"])
    assert recover_folder(folder, storage, owners, inspect) is True
    assert storage.list(UUID_A) == set(NEW)
    assert_clean(folder)


def test_without_sync_log_the_leftovers_go(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    stage(folder, NEW[0])  # staged but never logged: the sender was never told
    folder.load_log.write_text(f"load {NEW[1]}\n")
    folder.sync_end.write_text("")
    assert recover_folder(folder, storage, owners, inspect) is True
    assert storage.list(UUID_A) == set()
    assert_clean(folder)


def test_recover_all_covers_every_data_dir_and_sender(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir()
    d2.mkdir()
    storage = DirectoryStorage([d1, d2])
    _d, _s, owners = make_env(tmp_path)
    folders = [SenderFolder(d1, "10.0.0.1", UUID_A), SenderFolder(d2, "10.0.0.2", UUID_B)]
    expected = {}
    for folder in folders:
        names = [f"sequence/g/0/{folder.uuid[:4]}-{i}.tsfile" for i in range(2)]
        rnd = Round(folder)
        for name in names:
            stage(folder, name, [f"root.g.d{folder.uuid[:4]}"])
        rnd.new(names)
        expected[folder.uuid] = set(names)
    junk = d1 / "sync-receiver" / "not-a-sender"
    junk.mkdir()
    (junk / "sync.log").write_text("sync start\n")
    recover_all([d1, d2], storage, owners, inspect)
    for folder in folders:
        assert storage.list(folder.uuid) == expected[folder.uuid]
        assert_clean(folder)
    assert (junk / "sync.log").read_text() == "sync start\n"
