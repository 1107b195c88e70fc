"""The receiver's layout and default storage (docs/design.md §2.3, §4.8, §9.4, §9.8)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from receiver_load_helpers import UUID_A, UUID_B, copy_file, files_under, stage

from receiver.folders import make_dirs
from receiver.layout import SenderFolder, sender_folders
from receiver.storage import DirectoryStorage, StorageError
from receiver.storage import directory as storage_module
from sealsync import received
from sealsync.errors import BadName
from sealsync.names import check_sender_uuid

NAME = "sequence/root.sg1/0/100-1-0.tsfile"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


def folder_a(data_dir: Path) -> SenderFolder:
    return SenderFolder(data_dir, "10.0.0.1", UUID_A)


# ------------------------------------------------------------------ layout


def test_sender_folder_paths(data_dir: Path) -> None:
    folder = folder_a(data_dir)
    root = data_dir / "sync-receiver" / f"10.0.0.1_{UUID_A}"
    assert folder.root == root
    assert (folder.sync_log, folder.load_log, folder.sync_end, folder.data) == (
        root / "sync.log",
        root / "load.log",
        root / "sync.end",
        root / "data",
    )
    assert folder.staged(NAME) == root / "data" / "sequence" / "root.sg1" / "0" / "100-1-0.tsfile"
    assert folder.staged_name(NAME) == os.fspath(folder.staged(NAME))


def test_sender_folder_ipv6_has_no_colons(data_dir: Path) -> None:
    folder = SenderFolder(data_dir, "::1", UUID_A)
    assert folder.root.name == f"--1_{UUID_A}"


@pytest.mark.parametrize(
    "name", ["sequence/../x.tsfile", "/sequence/x.tsfile", "other/x.tsfile", "sequence/x.txt"]
)
def test_staged_rejects_bad_names(data_dir: Path, name: str) -> None:
    with pytest.raises(BadName):
        folder_a(data_dir).staged(name)
    with pytest.raises(BadName):
        folder_a(data_dir).staged_name(name)


@pytest.mark.parametrize(
    "value",
    [UUID_A.upper(), "{" + UUID_A + "}", UUID_A.replace("-", ""), "../x", "", "not-a-uuid"],
)
def test_non_canonical_uuid_rejected(data_dir: Path, value: str) -> None:
    with pytest.raises(BadName):
        check_sender_uuid(value)
    with pytest.raises(BadName):
        SenderFolder(data_dir, "10.0.0.1", value)
    with pytest.raises(BadName):
        DirectoryStorage([data_dir]).list(value)


spellings = st.uuids().flatmap(
    lambda u: st.sampled_from([str(u), str(u).upper(), u.hex, f"{{{u}}}", f"urn:uuid:{u}"])
)


@given(st.one_of(spellings, st.text(alphabet="0123456789abcdefABCDEF-{} \n", max_size=40)))
@example(f"{UUID_A}\n")
@example(f" {UUID_A}")
def test_uuid_check_is_exactly_canonical_spelling(value: str) -> None:
    # the check is a pattern, for speed; it must accept exactly what uuid parses
    # and spells back unchanged
    try:
        canonical = str(uuid.UUID(value)) == value
    except ValueError:
        canonical = False
    try:
        check_sender_uuid(value)
        accepted = True
    except BadName:
        accepted = False
    assert accepted == canonical


def test_sender_folders_lists_only_ours(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    a = SenderFolder(d1, "10.0.0.1", UUID_A)
    b = SenderFolder(d2, "::1", UUID_B)
    for folder in (a, b):
        folder.data.mkdir(parents=True)
    (d1 / "sync-receiver" / "junk").mkdir()
    (d1 / "sync-receiver" / f"10.0.0.1_{UUID_A.upper()}").mkdir()
    (d1 / "sync-receiver" / "a-file").write_text("x")
    assert sender_folders([d1, d2, tmp_path / "missing"]) == [a, SenderFolder(d2, "--1", UUID_B)]


# ------------------------------------------------------------------ storage


def test_load_moves_file_and_sidecars_under_the_sender_uuid(data_dir: Path) -> None:
    folder = folder_a(data_dir)
    staged = stage(folder, NAME, mods=b"mods")
    content = staged.read_bytes()
    storage = DirectoryStorage([data_dir])
    storage.load(UUID_A, NAME, staged)
    target = data_dir / "sequence" / "root.sg1" / "0" / UUID_A / "100-1-0.tsfile"
    assert target.read_bytes() == content
    assert Path(f"{target}.resource").read_bytes() == b"resource"
    assert Path(f"{target}.mods").read_bytes() == b"mods"
    assert files_under(folder.data) == set()
    assert storage.list(UUID_A) == {NAME}
    assert storage.list(UUID_B) == set()


def test_unsequence_and_shallow_names(data_dir: Path) -> None:
    folder = folder_a(data_dir)
    storage = DirectoryStorage([data_dir])
    names = {"unsequence/root.sg1/0/1-1-0.tsfile", "sequence/top.tsfile"}
    for name in names:
        storage.load(UUID_A, name, stage(folder, name))
    assert storage.list(UUID_A) == names
    assert (data_dir / "sequence" / UUID_A / "top.tsfile").is_file()
    assert (data_dir / "unsequence" / "root.sg1" / "0" / UUID_A / "1-1-0.tsfile").is_file()


def test_load_again_identical_is_a_no_op(data_dir: Path) -> None:
    folder = folder_a(data_dir)
    storage = DirectoryStorage([data_dir])
    staged = stage(folder, NAME)
    keep = data_dir / "copy.tsfile"
    copy_file(staged, keep)
    storage.load(UUID_A, NAME, staged)
    # crash between the move and the log: the replay finds nothing staged
    storage.load(UUID_A, NAME, staged)
    # the sender sent it again (identical): the staged copy is dropped
    copy_file(keep, staged)
    Path(f"{staged}.resource").write_bytes(b"resource")
    storage.load(UUID_A, NAME, staged)
    assert files_under(folder.data) == set()
    assert storage.list(UUID_A) == {NAME}
    target = storage.target(data_dir, UUID_A, NAME)
    assert target.read_bytes() == keep.read_bytes()


def test_load_completes_a_half_moved_file(data_dir: Path) -> None:
    folder = folder_a(data_dir)
    storage = DirectoryStorage([data_dir])
    staged = stage(folder, NAME, mods=b"m")
    target = storage.target(data_dir, UUID_A, NAME)
    target.parent.mkdir(parents=True)
    staged.rename(target)  # crashed after moving the data file only
    storage.load(UUID_A, NAME, staged)
    assert files_under(target.parent) == {
        target.name,
        f"{target.name}.mods",
        f"{target.name}.resource",
    }
    assert files_under(folder.data) == set()


def test_load_over_a_different_file_is_an_error_and_keeps_the_staged_file(data_dir: Path) -> None:
    folder = folder_a(data_dir)
    storage = DirectoryStorage([data_dir])
    storage.load(UUID_A, NAME, stage(folder, NAME))
    target = storage.target(data_dir, UUID_A, NAME)
    before = target.read_bytes()
    staged = stage(folder, NAME, devices=["root.sg.other"], mods=b"m")
    with pytest.raises(StorageError, match="different"):
        storage.load(UUID_A, NAME, staged)
    assert target.read_bytes() == before
    assert files_under(folder.data) == {
        f"{NAME}",
        f"{NAME}.resource",
        f"{NAME}.mods",
    }
    assert not Path(f"{target}.mods").exists()


def test_a_newer_resource_of_the_same_data_replaces_the_older(data_dir: Path) -> None:
    # IoTDB 0.12 rewrites a sealed file's .resource when a DELETE reaches the file, and
    # the sender ships the file again with it (and the grown .mods).
    folder = folder_a(data_dir)
    storage = DirectoryStorage([data_dir])
    staged = stage(folder, NAME)
    keep = data_dir / "copy.tsfile"
    copy_file(staged, keep)
    storage.load(UUID_A, NAME, staged)
    copy_file(keep, staged)
    Path(f"{staged}.resource").write_bytes(b"another resource")
    storage.load(UUID_A, NAME, staged)
    target = storage.target(data_dir, UUID_A, NAME)
    assert Path(f"{target}.resource").read_bytes() == b"another resource"
    assert files_under(folder.data) == set()


def test_gained_mods_replace_older_mods_of_the_same_file(data_dir: Path) -> None:
    folder = folder_a(data_dir)
    storage = DirectoryStorage([data_dir])
    staged = stage(folder, NAME, mods=b"old")
    keep = data_dir / "copy.tsfile"
    copy_file(staged, keep)
    storage.load(UUID_A, NAME, staged)
    copy_file(keep, staged)
    Path(f"{staged}.resource").write_bytes(b"resource")
    Path(f"{staged}.mods").write_bytes(b"old plus new")
    storage.load(UUID_A, NAME, staged)
    target = storage.target(data_dir, UUID_A, NAME)
    assert Path(f"{target}.mods").read_bytes() == b"old plus new"
    assert storage.list(UUID_A) == {NAME}


def test_staged_file_missing_and_not_loaded_is_an_error(data_dir: Path) -> None:
    storage = DirectoryStorage([data_dir])
    with pytest.raises(StorageError, match="missing"):
        storage.load(UUID_A, NAME, folder_a(data_dir).staged(NAME))


def test_staged_file_outside_the_data_dirs_is_refused(tmp_path: Path, data_dir: Path) -> None:
    elsewhere = SenderFolder(tmp_path / "elsewhere", "10.0.0.1", UUID_A)
    staged = stage(elsewhere, NAME)
    with pytest.raises(StorageError, match="outside"):
        DirectoryStorage([data_dir]).load(UUID_A, NAME, staged)
    assert staged.is_file()


def test_staged_file_must_match_the_name(data_dir: Path) -> None:
    staged = stage(folder_a(data_dir), NAME)
    with pytest.raises(StorageError, match="does not match"):
        DirectoryStorage([data_dir]).load(UUID_A, "sequence/root.sg1/0/other.tsfile", staged)


@pytest.mark.parametrize(
    "name", ["sequence/../../etc/x.tsfile", "sequence/a\nb.tsfile", "x.tsfile"]
)
def test_bad_names_never_reach_a_path(data_dir: Path, name: str) -> None:
    storage = DirectoryStorage([data_dir])
    with pytest.raises(BadName):
        storage.delete(UUID_A, name)
    with pytest.raises(BadName):
        storage.load(UUID_A, name, data_dir / "x.tsfile")


def test_delete_touches_only_that_senders_copy(data_dir: Path) -> None:
    storage = DirectoryStorage([data_dir])
    a = folder_a(data_dir)
    b = SenderFolder(data_dir, "10.0.0.2", UUID_B)
    storage.load(UUID_A, NAME, stage(a, NAME, mods=b"m"))
    storage.load(UUID_B, NAME, stage(b, NAME))
    own = data_dir / NAME  # the host's own file of the same name
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_bytes(b"host")
    Path(f"{own}.resource").write_bytes(b"host resource")
    before = files_under(data_dir)

    assert storage.delete(UUID_A, NAME) is True
    assert storage.delete(UUID_A, NAME) is False  # idempotent
    target_a = storage.target(data_dir, UUID_A, NAME)
    gone = {
        p.relative_to(data_dir).as_posix()
        for p in (target_a, Path(f"{target_a}.resource"), Path(f"{target_a}.mods"))
    }
    assert files_under(data_dir) == before - gone
    assert storage.list(UUID_A) == set()
    assert storage.list(UUID_B) == {NAME}
    assert own.read_bytes() == b"host"


def test_several_data_dirs(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir()
    d2.mkdir()
    storage = DirectoryStorage([d1, d2])
    n1, n2 = "sequence/g/0/1.tsfile", "sequence/g/0/2.tsfile"
    storage.load(UUID_A, n1, stage(SenderFolder(d1, "10.0.0.1", UUID_A), n1))
    storage.load(UUID_A, n2, stage(SenderFolder(d2, "10.0.0.1", UUID_A), n2))
    assert storage.target(d1, UUID_A, n1).is_file()
    assert storage.target(d2, UUID_A, n2).is_file()
    assert storage.list(UUID_A) == {n1, n2}
    assert storage.delete(UUID_A, n2) is True
    assert storage.list(UUID_A) == {n1}


def test_list_ignores_host_files_and_non_data_files(data_dir: Path) -> None:
    storage = DirectoryStorage([data_dir])
    storage.load(UUID_A, NAME, stage(folder_a(data_dir), NAME))
    (data_dir / "sequence" / "root.sg1" / "0" / "own.tsfile").write_bytes(b"host")
    nested = storage.target(data_dir, UUID_A, NAME).parent / "sub"
    nested.mkdir()
    (nested / "deeper.tsfile").write_bytes(b"not ours")
    assert storage.list(UUID_A) == {NAME}


# ------------------------------------------------------------------ symbolic links


def test_load_refuses_a_link_planted_inside_the_storage(data_dir: Path, tmp_path: Path) -> None:
    """A link below the data dir would carry the move anywhere the receiver may write."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (data_dir / "sequence").mkdir()
    (data_dir / "sequence" / "root.sg1").symlink_to(outside)
    staged = stage(folder_a(data_dir), NAME)
    storage = DirectoryStorage([data_dir])

    with pytest.raises(OSError, match="root.sg1 is a symbolic link") as err:
        storage.load(UUID_A, NAME, staged)

    assert err.value.errno == 40  # ELOOP
    assert list(outside.iterdir()) == []  # nothing written through the link
    assert staged.exists() and Path(f"{staged}.resource").exists()  # the staged set is whole


def test_delete_refuses_a_link_planted_inside_the_storage(data_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "0" / UUID_A
    outside.mkdir(parents=True)
    victim = outside / "100-1-0.tsfile"
    victim.write_bytes(b"not the receiver's")
    (data_dir / "sequence").mkdir()
    (data_dir / "sequence" / "root.sg1").symlink_to(tmp_path / "outside")

    with pytest.raises(OSError, match="symbolic link"):
        DirectoryStorage([data_dir]).delete(UUID_A, NAME)

    assert victim.read_bytes() == b"not the receiver's"


def test_a_linked_data_dir_itself_is_the_operators_choice(tmp_path: Path) -> None:
    real = tmp_path / "disk"
    real.mkdir()
    linked = tmp_path / "data"
    linked.symlink_to(real)
    staged = stage(folder_a(linked), NAME)

    DirectoryStorage([linked]).load(UUID_A, NAME, staged)

    assert (real / "sequence" / "root.sg1" / "0" / UUID_A / "100-1-0.tsfile").exists()


# ------------------------------------------------------------------ loads in one rename a piece


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _prepare(case: str, data_dir: Path) -> Path:
    """A staged ``NAME`` and what the storage already holds of it, as ``case`` says."""
    storage = DirectoryStorage([data_dir])
    folder = folder_a(data_dir)
    target = storage.target(data_dir, UUID_A, NAME)
    if case in ("identical", "different data", "different resource", "gained mods"):
        staged = stage(folder, NAME, mods=b"old" if case == "gained mods" else None)
        keep = data_dir.parent / f"keep-{data_dir.name}"
        copy_file(staged, keep)
        storage.load(UUID_A, NAME, staged)
        if case == "different data":
            return stage(folder, NAME, devices=["root.sg.other"], mods=b"m")
        copy_file(keep, staged)
        resource = b"another resource" if case == "different resource" else b"resource"
        Path(f"{staged}.resource").write_bytes(resource)
        if case == "gained mods":
            Path(f"{staged}.mods").write_bytes(b"old plus new")
        return staged
    staged = stage(folder, NAME, mods=b"m" if case != "fresh" else None)
    if case == "half moved":
        make_dirs(target.parent)
        staged.rename(target)
    elif case == "stray resource":  # put there by another hand: no data file beside it
        make_dirs(target.parent)
        Path(f"{target}.resource").write_bytes(b"not ours")
    elif case == "stray mods":
        make_dirs(target.parent)
        Path(f"{target}.mods").write_bytes(b"older")
    elif case == "missing":
        for piece in (staged, Path(f"{staged}.resource"), Path(f"{staged}.mods")):
            piece.unlink()
    return staged


CASES = [
    "fresh",
    "fresh with mods",
    "identical",
    "half moved",
    "different data",
    "different resource",
    "gained mods",
    "stray resource",
    "stray mods",
    "missing",
]


@pytest.mark.parametrize("case", CASES)
def test_a_batch_load_ends_exactly_as_a_load_with_lookups_does(tmp_path: Path, case: str) -> None:
    # Inside deferred_sync (the loader's batches) a load first tries one rename per piece
    # that never replaces a target (_load_new) and leaves everything else to the load
    # that looks each piece up first. Whatever the storage held, both must leave the
    # same files with the same bytes and raise the same error, or none.
    first = tmp_path / "first" / "data"
    first.mkdir(parents=True)
    staged_name = _prepare(case, first).relative_to(first)
    outcomes = []
    for batched in (False, True):
        data_dir = tmp_path / f"batched-{batched}" / "data"
        shutil.copytree(first, data_dir)  # the same bytes on both sides
        storage = DirectoryStorage([data_dir])
        error = None
        try:
            if batched:
                with storage.deferred_sync():
                    storage.load(UUID_A, NAME, data_dir / staged_name)
            else:
                storage.load(UUID_A, NAME, data_dir / staged_name)
        except StorageError as exc:
            error = str(exc).replace(str(data_dir), "<data dir>")
        outcomes.append((error, _tree(data_dir)))
    assert outcomes[0] == outcomes[1]
    if case.startswith("fresh"):
        assert outcomes[0][0] is None
        assert [p for p in outcomes[0][1] if p.startswith("sequence/")]  # it did load


def test_a_new_file_loads_by_renames_alone(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The usual case, a file never loaded, looks nothing up: the renames that refuse
    # to replace find out that the targets are free.
    staged = stage(folder_a(data_dir), NAME, mods=b"m")
    storage = DirectoryStorage([data_dir])
    looked: list[str] = []
    monkeypatch.setattr(
        storage_module.os.path, "exists", lambda p: looked.append(p) or Path(p).exists()
    )
    with storage.deferred_sync():
        storage.load(UUID_A, NAME, staged)
    assert looked == []
    target = storage.target(data_dir, UUID_A, NAME)
    assert sorted(files_under(target.parent)) == [
        target.name,
        f"{target.name}.mods",
        f"{target.name}.resource",
    ]


def test_a_file_system_that_declines_the_rename_falls_back_for_good(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried: list[str] = []

    def declined(src: str, dst: str) -> bool:
        tried.append(src)
        return False

    monkeypatch.setattr(storage_module.durable, "rename_noreplace", declined)
    storage = DirectoryStorage([data_dir])
    names = ["sequence/root.sg1/0/1-1-0.tsfile", "sequence/root.sg1/0/2-2-0.tsfile"]
    with storage.deferred_sync():
        for name in names:
            storage.load(UUID_A, name, stage(folder_a(data_dir), name))
    assert len(tried) == 1  # asked once; the second load went straight to lookups
    assert storage.list(UUID_A) == set(names)


# ------------------------------------------------------------------ a closed namespace


@pytest.mark.parametrize(
    "name",
    [
        f"sequence/root.sg1/0/{UUID_A}/100-1-0.tsfile/x.tsfile",  # into A's folder
        f"sequence/root.sg1/0/{UUID_A.upper()}/x.tsfile",
        f"sequence/root.sg1/0/{UUID_A.replace('-', '')}/x.tsfile",
        "sequence/root.sg1/0/1-1-0.tsfile.mods/z.tsfile",  # squats a sidecar's path
        "sequence/root.sg1/0/1-1-0.tsfile.resource/z.tsfile",
        "sequence/root.sg1/0/a.mods2/z.tsfile",
        "sequence/root.sg1/0/a.merge/z.tsfile",
        "sequence/root.sg1/0/a.parquet/z.tsfile",
        "sequence/root.sg1/.incoming-x/z.tsfile",
        "sequence/root.sg1/0/.hidden.tsfile",
    ],
)
def test_names_that_reach_another_file_or_sender_are_refused(data_dir: Path, name: str) -> None:
    assert received.name_problem(name) is not None
    folder = SenderFolder(data_dir, "10.0.0.2", UUID_B)
    staged = stage(folder, name)
    with pytest.raises(StorageError, match="refused name"):
        DirectoryStorage([data_dir]).load(UUID_B, name, staged)
    assert not (data_dir / "sequence" / "root.sg1").exists()  # no folder was made


@pytest.mark.parametrize(
    "name",
    [NAME, "sequence/root.sg1/1/2/3/a-b.tsfile", "unsequence/x.parquet", "sequence/a.b/c.tsfile"],
)
def test_database_names_are_stored(name: str) -> None:
    assert received.name_problem(name) is None


def test_a_deletion_removes_the_folders_it_empties(data_dir: Path) -> None:
    folder = folder_a(data_dir)
    storage = DirectoryStorage([data_dir])
    deep = "sequence/" + "/".join(f"d{i}" for i in range(30)) + "/x.tsfile"
    for name in (NAME, deep, "sequence/root.sg1/0/other.tsfile"):
        storage.load(UUID_A, name, stage(folder, name))
    (data_dir / "sequence" / "host-own").mkdir()  # the host's empty folder stays
    assert storage.delete(UUID_A, deep)
    assert not (data_dir / "sequence" / "d0").exists()
    assert storage.delete(UUID_A, NAME)
    assert (data_dir / "sequence" / "root.sg1" / "0" / UUID_A / "other.tsfile").is_file()
    assert storage.delete(UUID_A, "sequence/root.sg1/0/other.tsfile")
    assert sorted(os.listdir(data_dir / "sequence")) == ["host-own"]
    assert storage.list(UUID_A) == set()


def test_migration_keeps_every_file_and_removes_only_empty_sender_folders(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A storage as earlier versions left it: every loaded file stays where it is and
    is still listed; empty folders inside senders' folders (and the folders that held
    only those) go; a file an earlier version let squat inside another sender's folder
    stays, and the log names its sender; the host's own empty folders stay."""
    folder = folder_a(data_dir)
    storage = DirectoryStorage([data_dir])
    names = {NAME, "unsequence/root.sg1/0/1-1-0.tsfile", "sequence/root.sg2/7/9-9-0.tsfile"}
    for name in names:
        storage.load(UUID_A, name, stage(folder, name, mods=b"m"))
    before = {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}
    empty = data_dir / "sequence" / "root.sg3" / "0" / UUID_A / "a" / "b"
    empty.mkdir(parents=True)
    squat = data_dir / "sequence" / "root.sg1" / "0" / UUID_A / "100-1-0.tsfile.x" / UUID_B
    squat.mkdir(parents=True)
    (squat / "x.tsfile").write_bytes(b"b's")
    host = data_dir / "sequence" / "host" / "empty"
    host.mkdir(parents=True)
    with caplog.at_level("INFO", logger="sealsync.receiver.storage"):
        storage_module.log_migration([data_dir])
    after = {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}
    assert {p: b for p, b in after.items() if p.parent != squat} == before
    assert (squat / "x.tsfile").read_bytes() == b"b's"
    assert storage.list(UUID_A) == names
    assert not (data_dir / "sequence" / "root.sg3").exists()
    assert host.is_dir()
    assert "removed 5 empty folders" in caplog.text  # b, a, the uuid, 0, root.sg3
    assert f"sender {UUID_B} holds 1 files under names the receiver now refuses" in caplog.text
