"""The sender's file manager: layout, identity and the original tool's selection scenarios."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from state_helpers import write_data_file

from sealsync.errors import ConfigError, SealsyncError
from sealsync.synclog import SyncLog
from sender.manage import identity
from sender.manage.identity import sender_uuid
from sender.manage.layout import SchemaPaths, SenderPaths, receiver_key
from sender.manage.scan import scan
from sender.manage.selection import Selection, select
from sender.manage.snapshot import take_snapshot
from sender.manage.state import read_file_set
from sender.recover.recovery import recover

# --- helpers -----------------------------------------------------------------------


def remove_file(data_dir: Path, name: str) -> None:
    for suffix in ("", ".resource", ".mods", ".merge"):
        Path(f"{data_dir / name}{suffix}").unlink(missing_ok=True)


def plan(paths: SenderPaths) -> Selection:
    return select(scan(paths.data_dir), read_file_set(paths.last_local_files))


def record_synced(paths: SenderPaths, sel: Selection) -> None:
    """A round in which the receiver acknowledged every deletion and verified every file."""
    paths.folder.mkdir(parents=True, exist_ok=True)
    linked = take_snapshot(paths.data_dir, paths.snapshot, sel.new)
    assert list(linked) == list(sel.new)
    with SyncLog(paths.sync_log) as log:
        log.start()
        log.deleted_start()
        log.deleted_many(sel.deleted)
        log.deleted_end()
        log.tsfile_start()
        log.tsfile_many(linked)
        log.tsfile_end()
        log.end()
    recover(paths)


def group_files(group: int, first: int, count: int) -> list[str]:
    return [
        f"sequence/root.sg{group}/0/{1581324718000 + i}-{i}-0.tsfile"
        for i in range(first, first + count)
    ]


@pytest.fixture
def paths(tmp_path: Path) -> SenderPaths:
    data = tmp_path / "data"
    data.mkdir()
    return SenderPaths(data, "192.168.130.16", 5555)


# --- the original tool's scenarios -------------------------------------------------


def test_first_round_selects_every_sealed_file(paths: SenderPaths) -> None:
    names = [write_data_file(paths.data_dir, n) for g in range(3) for n in group_files(g, 0, 5)]
    assert plan(paths) == Selection(new=tuple(sorted(names)), deleted=())


def test_a_recorded_round_becomes_last_local_files(paths: SenderPaths) -> None:
    names = {write_data_file(paths.data_dir, n) for g in range(3) for n in group_files(g, 0, 5)}
    record_synced(paths, plan(paths))
    assert read_file_set(paths.last_local_files) == names
    assert plan(paths) == Selection(new=(), deleted=())
    assert sorted(os.listdir(paths.folder)) == ["last_local_files.txt"]


def test_added_files_are_exactly_the_new_ones(paths: SenderPaths) -> None:
    for g in range(3):
        for n in group_files(g, 0, 5):
            write_data_file(paths.data_dir, n)
    record_synced(paths, plan(paths))
    added = [write_data_file(paths.data_dir, n) for g in range(3) for n in group_files(g, 5, 5)]
    assert len(added) == 15
    assert plan(paths) == Selection(new=tuple(sorted(added)), deleted=())


def test_deleted_files_are_exactly_the_removed_ones(paths: SenderPaths) -> None:
    names = sorted(
        write_data_file(paths.data_dir, n) for g in range(3) for n in group_files(g, 0, 5)
    )
    record_synced(paths, plan(paths))
    gone = names[::3]
    for name in gone:
        remove_file(paths.data_dir, name)
    assert plan(paths) == Selection(new=(), deleted=tuple(gone))
    record_synced(paths, plan(paths))
    assert read_file_set(paths.last_local_files) == set(names) - set(gone)
    assert plan(paths) == Selection(new=(), deleted=())


def test_unsealed_and_merging_files_are_never_new(paths: SenderPaths) -> None:
    sealed = write_data_file(paths.data_dir, "sequence/root.sg1/0/1-1-0.tsfile")
    write_data_file(paths.data_dir, "sequence/root.sg1/0/2-2-0.tsfile", sealed=False)
    write_data_file(paths.data_dir, "sequence/root.sg1/0/3-3-0.tsfile", merge=True)
    write_data_file(
        paths.data_dir, "unsequence/root.sg1/0/4-4-0.parquet", sealed=False, mods=b"mods"
    )
    assert plan(paths) == Selection(new=(sealed,), deleted=())
    record_synced(paths, plan(paths))
    assert read_file_set(paths.last_local_files) == {sealed}


def test_unsequence_files_at_any_depth_are_selected(paths: SenderPaths) -> None:
    names = [
        "unsequence/1-1-0.tsfile",
        "unsequence/root.sg1/2-2-0.tsfile",
        "unsequence/root.sg1/0/3-3-0.parquet",
        "unsequence/root.sg1/0/0/4-4-0.tsfile",
        "unsequence/db/table/7/0/5-5-0.tsfile",
        "sequence/6-6-0.parquet",
    ]
    for name in names:
        write_data_file(paths.data_dir, name)
    assert plan(paths) == Selection(new=tuple(sorted(names)), deleted=())


def test_a_synced_file_that_gains_mods_is_neither_new_nor_deleted(paths: SenderPaths) -> None:
    names = [write_data_file(paths.data_dir, n) for n in group_files(1, 0, 3)]
    record_synced(paths, plan(paths))
    Path(f"{paths.data_dir / names[1]}.mods").write_bytes(b"deletion")
    assert plan(paths) == Selection(new=(), deleted=())


def test_a_synced_file_being_merged_or_unsealed_is_not_deleted(paths: SenderPaths) -> None:
    names = [write_data_file(paths.data_dir, n) for n in group_files(1, 0, 3)]
    record_synced(paths, plan(paths))
    Path(f"{paths.data_dir / names[0]}.merge").write_bytes(b"")
    Path(f"{paths.data_dir / names[2]}.resource").unlink()
    assert plan(paths) == Selection(new=(), deleted=())


def test_deletion_names_one_file_not_every_file_of_that_name(paths: SenderPaths) -> None:
    # docs/design.md §9.4: the same bare name in two groups are two files.
    one = write_data_file(paths.data_dir, "sequence/root.sg1/0/100-1-0.tsfile")
    two = write_data_file(paths.data_dir, "sequence/root.sg2/0/100-1-0.tsfile")
    record_synced(paths, plan(paths))
    remove_file(paths.data_dir, one)
    assert plan(paths) == Selection(new=(), deleted=(one,))
    record_synced(paths, plan(paths))
    assert read_file_set(paths.last_local_files) == {two}


def test_receivers_keep_separate_state(paths: SenderPaths) -> None:
    names = {write_data_file(paths.data_dir, n) for n in group_files(1, 0, 4)}
    record_synced(paths, plan(paths))
    other = SenderPaths(paths.data_dir, "10.0.0.9", 5555)
    assert plan(other) == Selection(new=tuple(sorted(names)), deleted=())
    assert read_file_set(paths.last_local_files) == names


# --- layout ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "key"),
    [
        ("192.168.130.16", 5555, "192.168.130.16_5555"),
        ("dc1.example.org", 22, "dc1.example.org_22"),
        ("::1", 5555, "--1_5555"),
        ("[fe80::1]", 65535, "fe80--1_65535"),
        (" edge ", 1, "edge_1"),
    ],
)
def test_receiver_key(host: str, port: int, key: str) -> None:
    assert receiver_key(host, port) == key


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("a/b", 22),
        ("..", 22),
        ("", 22),
        ("[]", 22),
        ("a\nb", 22),
        ("a\\b", 22),
        ("h", 0),
        ("h", 65536),
        ("h", True),
        ("h", "22"),
    ],
)
def test_receiver_key_refuses_unsafe_values(host: str, port: object) -> None:
    with pytest.raises(ConfigError):
        receiver_key(host, port)  # type: ignore[arg-type]


def test_sender_paths(tmp_path: Path) -> None:
    p = SenderPaths(tmp_path / "data", "::1", 5555)
    folder = tmp_path / "data" / "sync-sender" / "--1_5555"
    assert (p.folder, p.last_local_files, p.current_local_files, p.snapshot, p.sync_log) == (
        folder,
        folder / "last_local_files.txt",
        folder / "current_local_files.txt",
        folder / "snapshot",
        folder / "sync.log",
    )


def test_schema_paths(tmp_path: Path) -> None:
    p = SchemaPaths(tmp_path / "schema", "192.168.130.16", 5555)
    folder = tmp_path / "schema" / "sync" / "192.168.130.16_5555"
    assert (p.folder, p.lock, p.schema_pos, p.schema_log) == (
        folder,
        folder / "sync.lock",
        folder / "sync_schema_pos",
        tmp_path / "schema" / "mlog.txt",
    )


# --- identity ----------------------------------------------------------------------


def test_uuid_is_created_once_and_stable(tmp_path: Path) -> None:
    first = sender_uuid(tmp_path)
    path = tmp_path / "sync" / "uuid.txt"
    assert path.read_text() == first + "\n"
    # canonical lowercase dashed form: the receiver refuses any other spelling
    assert str(uuid.UUID(first)) == first and uuid.UUID(first).version == 4
    inode = path.stat().st_ino
    assert [sender_uuid(tmp_path) for _ in range(3)] == [first] * 3
    assert path.stat().st_ino == inode
    assert os.listdir(tmp_path / "sync") == ["uuid.txt"]


def test_uuid_creation_never_replaces_one_that_appeared_meanwhile(tmp_path: Path) -> None:
    first = sender_uuid(tmp_path)
    path = identity.uuid_path(tmp_path)
    identity._create_once(path)  # a second sender that lost the race
    assert sender_uuid(tmp_path) == first
    assert os.listdir(tmp_path / "sync") == ["uuid.txt"]


def test_uuid_in_another_spelling_is_read_not_rewritten(tmp_path: Path) -> None:
    (tmp_path / "sync").mkdir()
    # IoTDB's old sync tool's spelling (32 hex digits), as that tool wrote it
    (tmp_path / "sync" / "uuid.txt").write_text("A45B6E63EB434AAD891264B5C08D448E")
    assert sender_uuid(tmp_path) == "a45b6e63-eb43-4aad-8912-64b5c08d448e"
    assert (tmp_path / "sync" / "uuid.txt").read_text() == "A45B6E63EB434AAD891264B5C08D448E"


@pytest.mark.parametrize(
    "content", [b"", b"\n", b"not-a-uuid\n", b"\xff\xfe\x00garbage", b"a45b6e63"]
)
def test_corrupt_uuid_is_an_error_not_a_new_identity(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "sync").mkdir()
    path = tmp_path / "sync" / "uuid.txt"
    path.write_bytes(content)
    with pytest.raises(SealsyncError, match="corrupt"):
        sender_uuid(tmp_path)
    assert path.read_bytes() == content


def test_unreadable_uuid_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "sync" / "uuid.txt").mkdir(parents=True)
    with pytest.raises(SealsyncError, match="cannot read the sender UUID"):
        sender_uuid(tmp_path)
