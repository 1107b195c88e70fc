"""Scanning a data dir: what is sealed, what exists, what is refused and why."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from state_helpers import write_data_file

from sealsync.errors import BadName, SealsyncError
from sealsync.names import _SAFE, check_data_name, data_name_problem, full_data_name_check
from sender.manage import scan as scan_module
from sender.manage.scan import NOT_FOLDER, NOT_REGULAR, SYMLINK, DataDirScan, scan


def test_empty_or_missing_data_dir(tmp_path: Path) -> None:
    assert scan(tmp_path / "absent") == DataDirScan(frozenset(), frozenset(), ())
    assert scan(tmp_path) == DataDirScan(frozenset(), frozenset(), ())


def test_sealed_present_and_ignored_entries(tmp_path: Path) -> None:
    a = write_data_file(tmp_path, "sequence/root.sg1/0/0/1-1-0.tsfile")
    b = write_data_file(tmp_path, "unsequence/root.sg1/0/0/2-1-0.parquet")
    c = write_data_file(tmp_path, "sequence/root.sg1/0/0/3-1-0.tsfile", sealed=False)
    d = write_data_file(tmp_path, "sequence/root.sg1/0/0/4-1-0.tsfile", merge=True)
    # sidecars without data files, unknown files, our own state folder, other roots
    (tmp_path / "sequence/root.sg1/0/0/9-9-0.tsfile.resource").write_bytes(b"r")
    (tmp_path / "sequence/root.sg1/0/0/9-9-0.tsfile.mods").write_bytes(b"m")
    (tmp_path / "sequence/root.sg1/0/0/compaction.log").write_bytes(b"")
    (tmp_path / "sequence/root.sg1/0/0/5-1-0.tsfile.tmp").write_bytes(b"")
    write_data_file(tmp_path, "sync-sender/h_1/snapshot/sequence/root.sg1/0/0/1-1-0.tsfile")
    write_data_file(tmp_path, "wal/root.sg1/6-1-0.tsfile")
    result = scan(tmp_path)
    assert result == DataDirScan(
        sealed=frozenset({a, b}), present=frozenset({a, b, c, d}), rejected=()
    )


def test_symlinked_file_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.tsfile"
    outside.write_bytes(b"secret")
    data = tmp_path / "data"
    folder = data / "sequence/root.sg1/0"
    folder.mkdir(parents=True)
    os.symlink(outside, folder / "1-1-0.tsfile")
    (folder / "1-1-0.tsfile.resource").write_bytes(b"r")
    good = write_data_file(data, "sequence/root.sg1/0/2-1-0.tsfile")
    assert scan(data) == DataDirScan(
        sealed=frozenset({good}),
        present=frozenset({good}),
        rejected=(("sequence/root.sg1/0/1-1-0.tsfile", SYMLINK),),
    )


def test_symlinked_folder_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    write_data_file(elsewhere, "0/1-1-0.tsfile")
    data = tmp_path / "data"
    (data / "unsequence").mkdir(parents=True)
    os.symlink(elsewhere, data / "unsequence" / "root.sg1")
    os.symlink(elsewhere, data / "sequence")
    assert scan(data) == DataDirScan(
        sealed=frozenset(),
        present=frozenset(),
        rejected=(("sequence", SYMLINK), ("unsequence/root.sg1", SYMLINK)),
    )


def test_symlinked_sidecar_does_not_seal(tmp_path: Path) -> None:
    real = tmp_path / "r"
    real.write_bytes(b"r")
    name = write_data_file(tmp_path, "sequence/sg/1-1-0.tsfile", sealed=False)
    os.symlink(real, tmp_path / f"{name}.resource")
    assert scan(tmp_path) == DataDirScan(
        sealed=frozenset(),
        present=frozenset({name}),
        rejected=((f"{name}.resource", SYMLINK),),
    )


def test_hostile_names_are_rejected_not_shipped(tmp_path: Path) -> None:
    good = write_data_file(tmp_path, "sequence/sg/0/1-1-0.tsfile")
    hostile = [
        "sequence/sg/0/evil\nsync end.tsfile",
        "sequence/sg/0/bell\x07.tsfile",
        "sequence/sg/0/back\\slash.tsfile",
        "sequence/bad\ndir/2-1-0.tsfile",
        "sequence/" + "/".join(["d" * 200] * 5) + "/" + "e" * 10 + ".tsfile",
    ]
    for name in hostile:
        write_data_file(tmp_path, name)
    raw = os.path.join(os.fsencode(tmp_path), b"sequence/sg/0/latin1-\xe9.tsfile")
    for suffix in (b"", b".resource"):
        with open(raw + suffix, "wb") as f:
            f.write(b"data")
    result = scan(tmp_path)
    assert (result.sealed, result.present) == (frozenset({good}), frozenset({good}))
    undecodable = os.fsdecode(b"sequence/sg/0/latin1-\xe9.tsfile")
    assert [name for name, _ in result.rejected] == sorted([*hostile, undecodable])
    reasons = dict(result.rejected)
    assert "newline" in reasons[hostile[0]]
    assert "control character" in reasons[hostile[1]]
    assert "backslash" in reasons[hostile[2]]
    assert "newline" in reasons[hostile[3]]
    assert "longer than 1024 bytes" in reasons[hostile[4]]
    assert "not valid UTF-8" in reasons[undecodable]


def test_special_files_with_data_names_are_rejected(tmp_path: Path) -> None:
    folder = tmp_path / "sequence" / "sg"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "1-1-0.tsfile")
    (folder / "1-1-0.tsfile.resource").write_bytes(b"r")
    (tmp_path / "unsequence").write_bytes(b"not a folder")
    assert scan(tmp_path) == DataDirScan(
        sealed=frozenset(),
        present=frozenset(),
        rejected=(("sequence/sg/1-1-0.tsfile", NOT_REGULAR), ("unsequence", NOT_FOLDER)),
    )


def test_an_unreadable_folder_stops_the_scan(tmp_path: Path, monkeypatch) -> None:
    # Its files would otherwise look deleted and be deleted on the receiver.
    write_data_file(tmp_path, "sequence/sg1/0/1-1-0.tsfile")
    write_data_file(tmp_path, "sequence/sg2/0/1-1-0.tsfile")
    locked = os.path.join(tmp_path, "sequence", "sg2")
    real_scandir = os.scandir

    def scandir(path):
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(scan_module.os, "scandir", scandir)
    with pytest.raises(SealsyncError, match="cannot read data folder .*sg2: Permission denied"):
        scan(tmp_path)


def test_a_folder_removed_during_the_walk_is_skipped(tmp_path: Path, monkeypatch) -> None:
    keep = write_data_file(tmp_path, "sequence/sg1/0/1-1-0.tsfile")
    write_data_file(tmp_path, "sequence/sg2/0/1-1-0.tsfile")
    gone = os.path.join(tmp_path, "sequence", "sg2", "0")
    real_scandir = os.scandir

    def scandir(path):
        if os.fspath(path) == gone:
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_scandir(path)

    monkeypatch.setattr(scan_module.os, "scandir", scandir)
    assert scan(tmp_path) == DataDirScan(frozenset({keep}), frozenset({keep}), ())


def test_many_files_exactly(tmp_path: Path) -> None:
    sealed = set()
    present = set()
    for g in range(4):
        for p in range(5):
            folder = tmp_path / ("sequence" if p % 2 else "unsequence") / f"root.sg{g}" / str(p)
            folder.mkdir(parents=True)
            for i in range(60):
                name = f"{i}-{i}-0.tsfile"
                (folder / name).write_bytes(b"")
                rel = folder.relative_to(tmp_path).as_posix() + "/" + name
                present.add(rel)
                if i % 4:
                    (folder / f"{name}.resource").write_bytes(b"")
                    sealed.add(rel)
    assert scan(tmp_path) == DataDirScan(frozenset(sealed), frozenset(present), ())


# --- the fast name check is exactly the full check (plus UTF-8) -------------------


def reference_problem(name: str) -> bool:
    try:
        full_data_name_check(name)
        name.encode("utf-8")
    except (BadName, UnicodeEncodeError):
        return True
    return False


def refused(check: Callable[[str], str], name: str) -> bool:
    try:
        check(name)
    except BadName:
        return True
    return False


parts = st.text(alphabet="ab.-_/\n\\\x00é\udcff ", max_size=12)
roots = st.sampled_from(["sequence/", "unsequence/", "sequence", "/sequence/", "seq/", ""])
suffixes = st.sampled_from([".tsfile", ".parquet", ".tsfile.resource", "", ".TSFILE", "."])


@settings(max_examples=400, deadline=None)
@given(root=roots, middle=parts, suffix=suffixes)
@example(root="sequence/", middle="", suffix=".tsfile")
@example(root="sequence/", middle=".", suffix=".tsfile")
@example(root="sequence/", middle="../a", suffix=".tsfile")
@example(root="sequence/", middle="a/", suffix=".tsfile")
@example(root="sequence/", middle="a//b", suffix=".tsfile")
def test_fast_check_agrees_with_check_data_name(root: str, middle: str, suffix: str) -> None:
    name = root + middle + suffix
    assert (data_name_problem(name) is not None) == reference_problem(name)
    assert refused(check_data_name, name) == refused(full_data_name_check, name)


@pytest.mark.parametrize(
    "name",
    [
        "sequence/a/" + "b" * 248 + ".tsfile",  # last part 255 bytes
        "sequence/a/" + "b" * 249 + ".tsfile",  # 256
        "sequence/a/" + "b" * 247 + ".parquet",  # 255
        "sequence/a/" + "b" * 248 + ".parquet",  # 256
        "sequence/" + "c" * 255 + "/x.tsfile",
        "sequence/" + "c" * 256 + "/x.tsfile",
        "sequence/" + "/".join(["d" * 200] * 5) + "/" + "e" * 6 + ".tsfile",  # 1024 bytes
        "sequence/" + "/".join(["d" * 200] * 5) + "/" + "e" * 7 + ".tsfile",  # 1025 bytes
        "sequence/..tsfile",
        "sequence/.tsfile",
        "sequence/.hidden/a.tsfile",
        "sequence/a..tsfile",
        "unsequence/x.parquet",
    ],
)
def test_fast_check_at_the_limits(name: str) -> None:
    assert (data_name_problem(name) is None) == (not reference_problem(name))
    assert refused(check_data_name, name) == refused(full_data_name_check, name)


def test_typical_names_take_the_fast_path() -> None:
    for name in (
        "sequence/root.sg1/0/0/1581324718762-101-1.tsfile",
        "unsequence/db_1/table-a/12/0/1-1-0.parquet",
    ):
        assert _SAFE.fullmatch(name)
