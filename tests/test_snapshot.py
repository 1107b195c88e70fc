"""Snapshots: hard links of a round's new files, a copy across file systems."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from state_helpers import write_data_file

from sealsync.errors import BadName
from sender.manage import shipped_mods
from sender.manage.snapshot import Placed, hard_link, snapshot_path, take_snapshot

A = "sequence/root.sg1/0/0/1-1-0.tsfile"
B = "sequence/root.sg1/0/0/2-1-0.tsfile"
C = "unsequence/root.sg2/0/3-1-0.parquet"


def entries(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    return data, data / "sync-sender" / "h_1" / "snapshot"


def test_links_share_the_inode_of_data_and_sidecars(dirs: tuple[Path, Path]) -> None:
    data, snap = dirs
    write_data_file(data, A, mods=b"mods")
    write_data_file(data, C)
    placed = take_snapshot(data, snap, [C, A])
    assert list(placed) == [A, C]
    assert entries(snap) == sorted([A, f"{A}.resource", f"{A}.mods", C, f"{C}.resource"])

    def size(name: str) -> int:
        return (data / name).stat().st_size

    assert placed == {
        A: Placed(size(A), size(A) + size(f"{A}.resource") + size(f"{A}.mods"), True),
        C: Placed(size(C), size(C) + size(f"{C}.resource"), False),
    }
    for name in (A, f"{A}.resource", f"{A}.mods", C, f"{C}.resource"):
        assert os.stat(snap / name).st_ino == os.stat(data / name).st_ino, name
    assert snapshot_path(snap, A) == str(snap / A)


def test_a_mods_the_scan_did_not_see_is_left_to_the_next_round(dirs: tuple[Path, Path]) -> None:
    """Only the scan's ``with_mods`` are linked with their ``.mods``: B's appeared after
    the scan, so B goes without it now, and the next round ships it as a changed one."""
    data, snap = dirs
    write_data_file(data, A, mods=b"mods")
    write_data_file(data, B, mods=b"late mods")
    placed = take_snapshot(data, snap, [A, B], with_mods={A})
    assert (placed[A].has_mods, placed[B].has_mods) == (True, False)
    assert (
        placed[B].stream_size
        == (data / B).stat().st_size + Path(f"{data / B}.resource").stat().st_size
    )
    assert entries(snap) == sorted([A, f"{A}.resource", f"{A}.mods", B, f"{B}.resource"])
    # B shipped with no .mods recorded: the next round finds its .mods changed
    shipped = shipped_mods.current_identities(data, {A})
    assert shipped_mods.changed(shipped_mods.current_identities(data, {A, B}), shipped) == {B}
    # without the scan's word, every file's .mods is looked for
    again = take_snapshot(data, snap.with_name("again"), [A, B])
    assert (again[A].has_mods, again[B].has_mods) == (True, True)


def test_snapshot_survives_the_original_being_deleted(dirs: tuple[Path, Path]) -> None:
    data, snap = dirs
    write_data_file(data, A)
    take_snapshot(data, snap, [A])
    (data / A).unlink()
    Path(f"{data / A}.resource").unlink()
    assert Path(snapshot_path(snap, A)).read_bytes() == b"data of " + A.encode()


def test_a_file_deleted_before_linking_is_dropped(dirs: tuple[Path, Path]) -> None:
    data, snap = dirs
    write_data_file(data, A)
    write_data_file(data, B)
    assert list(take_snapshot(data, snap, [A, B, C])) == [A, B]  # C vanished after selection
    assert entries(snap) == sorted([A, f"{A}.resource", B, f"{B}.resource"])


def test_a_vanishing_resource_drops_the_file(dirs: tuple[Path, Path]) -> None:
    data, snap = dirs
    write_data_file(data, A, mods=b"mods")
    write_data_file(data, B)

    def link_racing_a_merge(src: str, dst: str) -> None:
        if src.endswith(f"{A}.resource"):
            os.unlink(src)  # a merge deletes the file between our two links
        hard_link(src, dst)

    assert list(take_snapshot(data, snap, [A, B], link=link_racing_a_merge)) == [B]
    assert entries(snap) == sorted([B, f"{B}.resource"])


def test_a_vanishing_mods_keeps_the_file(dirs: tuple[Path, Path]) -> None:
    data, snap = dirs
    write_data_file(data, A, mods=b"mods")

    def link_racing(src: str, dst: str) -> None:
        if src.endswith(".mods"):
            os.unlink(src)
        hard_link(src, dst)

    placed = take_snapshot(data, snap, [A], link=link_racing)
    assert list(placed) == [A]
    assert not placed[A].has_mods
    assert entries(snap) == sorted([A, f"{A}.resource"])


def test_cross_device_falls_back_to_copy_for_the_round(dirs: tuple[Path, Path]) -> None:
    data, snap = dirs
    for name in (A, B, C):
        write_data_file(data, name, mods=b"mods" if name == B else None)
    calls = []

    def link_other_fs(src: str, dst: str) -> None:
        calls.append(src)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    assert list(take_snapshot(data, snap, [A, B, C], link=link_other_fs)) == [A, B, C]
    assert calls == [str(data / A)]  # one failed link, then copies for the rest
    copied = [A, f"{A}.resource", B, f"{B}.resource", f"{B}.mods", C, f"{C}.resource"]
    assert entries(snap) == sorted(copied)
    for name in copied:
        assert (snap / name).read_bytes() == (data / name).read_bytes()
        assert os.stat(snap / name).st_ino != os.stat(data / name).st_ino


def test_other_link_errors_are_not_hidden(dirs: tuple[Path, Path]) -> None:
    data, snap = dirs
    write_data_file(data, A)

    def link_disk_full(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as info:
        take_snapshot(data, snap, [A], link=link_disk_full)
    assert info.value.errno == errno.ENOSPC


@pytest.mark.parametrize("copy", [False, True])
def test_a_file_swapped_for_a_symlink_is_dropped(dirs: tuple[Path, Path], copy: bool) -> None:
    data, snap = dirs
    write_data_file(data, A)
    write_data_file(data, B)
    secret = data.parent / "secret"
    secret.write_bytes(b"secret")
    (data / A).unlink()
    os.symlink(secret, data / A)

    def link(src: str, dst: str) -> None:
        if copy:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        hard_link(src, dst)

    assert list(take_snapshot(data, snap, [A, B], link=link)) == [B]
    assert entries(snap) == sorted([B, f"{B}.resource"])


def test_stale_entries_from_an_earlier_round_are_replaced(dirs: tuple[Path, Path]) -> None:
    data, snap = dirs
    write_data_file(data, A)
    (snap / A).parent.mkdir(parents=True)
    for suffix in ("", ".resource", ".mods"):  # A has no .mods now: a stale one must go
        (snap / f"{A}{suffix}").write_bytes(b"stale")
    assert list(take_snapshot(data, snap, [A])) == [A]
    assert entries(snap) == sorted([A, f"{A}.resource"])
    for suffix in ("", ".resource"):
        assert os.stat(snap / f"{A}{suffix}").st_ino == os.stat(data / f"{A}{suffix}").st_ino


def test_a_copy_never_writes_through_a_stale_link_to_the_original(
    dirs: tuple[Path, Path],
) -> None:
    """A stale snapshot entry may be a hard link to the very file about to be copied:
    copying onto it would truncate the original before reading it."""
    data, snap = dirs
    write_data_file(data, A)
    write_data_file(data, B, mods=b"mods")
    originals = {n: (data / n).read_bytes() for n in (B, f"{B}.resource", f"{B}.mods")}
    (snap / B).parent.mkdir(parents=True)
    for name in originals:
        os.link(data / name, snap / name)

    def link_other_fs(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    assert list(take_snapshot(data, snap, [A, B], link=link_other_fs)) == [A, B]
    for name, content in originals.items():
        assert (data / name).read_bytes() == content
        assert (snap / name).read_bytes() == content
        assert os.stat(snap / name).st_ino != os.stat(data / name).st_ino


@pytest.mark.parametrize(
    "name",
    [
        "../outside.tsfile",
        "sequence/../../x.tsfile",
        "/etc/x.tsfile",
        "sequence/a\nb.tsfile",
        "sequence/x.resource",
    ],
)
def test_bad_names_never_reach_a_path_join(dirs: tuple[Path, Path], name: str) -> None:
    data, snap = dirs
    with pytest.raises(BadName):
        take_snapshot(data, snap, [name])
    with pytest.raises(BadName):
        snapshot_path(snap, name)
    assert not snap.exists()
