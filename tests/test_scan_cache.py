"""The scan cache (sender.manage.scan_cache) and read_file_set's ``known``.

A cached scan must give exactly what a full scan gives, reuse only folders whose
(dev, ino, mtime, ctime) did not change, and never trust a listing taken too soon
after its folder changed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sender.manage import scan as scan_module
from sender.manage.scan import scan
from sender.manage.state import read_file_set, write_file_set


def make(root: Path, rel: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")


def populate(root: Path) -> None:
    for rel in (
        "sequence/root.sg1/0/1-1-0.tsfile",
        "sequence/root.sg1/0/1-1-0.tsfile.resource",
        "sequence/root.sg1/0/2-2-0.tsfile",  # not sealed: no .resource
        "sequence/root.sg1/0/3-3-0.tsfile",
        "sequence/root.sg1/0/3-3-0.tsfile.resource",
        "sequence/root.sg1/0/3-3-0.tsfile.merge",  # being merged: not sealed
        "sequence/root.sg1/1/4-4-0.tsfile",
        "sequence/root.sg1/1/4-4-0.tsfile.resource",
        "sequence/root.sg1/1/4-4-0.tsfile.mods",
        "unsequence/root.sg2/0/deep/5-5-0.parquet",
        "unsequence/root.sg2/0/deep/5-5-0.parquet.resource",
    ):
        make(root, rel)


class CountingScandir:
    """Counts the folders the walk lists."""

    def __init__(self) -> None:
        self.listed: list[str] = []
        self._real = os.scandir

    def __call__(self, path: str) -> os.ScandirIterator[str]:
        self.listed.append(path)
        return self._real(path)


def test_cached_scan_equals_a_full_scan_and_lists_nothing_unchanged(
    tmp_path: Path, trusting: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    populate(data)
    cache = tmp_path / "state" / "scan_cache"
    cache.parent.mkdir()
    full = scan(data)
    assert full.sealed == {
        "sequence/root.sg1/0/1-1-0.tsfile",
        "sequence/root.sg1/1/4-4-0.tsfile",
        "unsequence/root.sg2/0/deep/5-5-0.parquet",
    }
    assert scan(data, cache=cache) == full  # lists everything, writes the cache
    assert cache.exists()
    counter = CountingScandir()
    monkeypatch.setattr(scan_module.os, "scandir", counter)
    assert scan(data, cache=cache) == full
    assert counter.listed == []


def test_a_changed_folder_is_listed_again(
    tmp_path: Path, trusting: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    populate(data)
    cache = tmp_path / "scan_cache"
    scan(data, cache=cache)
    make(data, "sequence/root.sg1/0/2-2-0.tsfile.resource")  # 2-2-0 is sealed now
    (data / "sequence/root.sg1/1/4-4-0.tsfile").unlink()
    (data / "sequence/root.sg1/1/4-4-0.tsfile.resource").unlink()
    make(data, "unsequence/root.sg2/0/deep/5-5-0.parquet.merge")
    counter = CountingScandir()
    monkeypatch.setattr(scan_module.os, "scandir", counter)
    cached = scan(data, cache=cache)
    monkeypatch.undo()
    assert cached == scan(data)
    assert cached.sealed == {
        "sequence/root.sg1/0/1-1-0.tsfile",
        "sequence/root.sg1/0/2-2-0.tsfile",
    }
    assert sorted(Path(p).relative_to(data).as_posix() for p in counter.listed) == [
        "sequence/root.sg1/0",
        "sequence/root.sg1/1",
        "unsequence/root.sg2/0/deep",
    ]


def test_a_listing_taken_right_after_a_change_is_not_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    populate(data)
    cache = tmp_path / "scan_cache"
    assert scan(data, cache=cache) == scan(data)
    assert not cache.exists()  # every folder changed within RACY_NS: nothing trusted


def test_a_damaged_or_foreign_cache_is_ignored(
    tmp_path: Path, trusting: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    populate(data)
    cache = tmp_path / "scan_cache"
    full = scan(data, cache=cache)
    raw = bytearray(cache.read_bytes())
    at = raw.index(b"1-1-0.tsfile")
    raw[at] = ord("9")  # claims a file that is not there, CRC no longer matches
    cache.write_bytes(bytes(raw))
    counter = CountingScandir()
    monkeypatch.setattr(scan_module.os, "scandir", counter)
    assert scan(data, cache=cache) == full
    assert len(counter.listed) == 8  # every folder listed again
    cache.write_bytes(b"something else\n")
    assert scan(data, cache=cache) == full


def test_folders_with_rejected_entries_are_never_cached(
    tmp_path: Path, trusting: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    populate(data)
    os.symlink("/etc/passwd", data / "sequence/root.sg1/0/9-9-0.tsfile")
    cache = tmp_path / "scan_cache"
    first = scan(data, cache=cache)
    assert first.rejected == (("sequence/root.sg1/0/9-9-0.tsfile", "symbolic link, not followed"),)
    counter = CountingScandir()
    monkeypatch.setattr(scan_module.os, "scandir", counter)
    assert scan(data, cache=cache) == first
    assert [Path(p).relative_to(data).as_posix() for p in counter.listed] == ["sequence/root.sg1/0"]


def test_read_file_set_trusts_known_names_and_still_drops_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "last_local_files.txt"
    good = ["sequence/g/0/a.tsfile", "sequence/g/0/b.tsfile"]
    write_file_set(path, good)
    with open(path, "a") as f:
        f.write("../../etc/passwd\nsequence/g/0/c.tsfile\n\n")
    assert read_file_set(path, known=frozenset({"sequence/g/0/a.tsfile"})) == {
        *good,
        "sequence/g/0/c.tsfile",
    }
    assert read_file_set(path) == {*good, "sequence/g/0/c.tsfile"}
