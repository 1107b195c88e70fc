"""Durable state primitives: atomic replace, fsynced appends, torn-line handling."""

from __future__ import annotations

import os
from pathlib import Path

from sealsync import durable


def test_atomic_write_replaces_whole_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "state.txt"
    durable.atomic_write(target, "old\n")
    durable.atomic_write(target, b"new contents\n")
    assert target.read_bytes() == b"new contents\n"
    assert sorted(os.listdir(tmp_path)) == ["state.txt"]


def test_write_lines_then_read_lines(tmp_path: Path) -> None:
    target = tmp_path / "set.txt"
    durable.write_lines(target, ["a", "b/c", "é"])
    assert durable.read_lines(target) == ["a", "b/c", "é"]
    assert durable.read_lines(tmp_path / "missing") == []


def test_read_lines_drops_a_torn_last_line(tmp_path: Path) -> None:
    target = tmp_path / "log"
    target.write_bytes(b"sync start\nsequence/g/0/a.tsfile\nsequence/g/0/b.ts")
    assert durable.read_lines(target) == ["sync start", "sequence/g/0/a.tsfile"]


def test_append_log_cuts_a_torn_tail_before_appending(tmp_path: Path) -> None:
    target = tmp_path / "log"
    target.write_bytes(b"one\ntw")
    with durable.AppendLog(target) as log:
        log.append("three")
        log.append_many(["four", "five"])
        log.append_many([])
    assert target.read_bytes() == b"one\nthree\nfour\nfive\n"


def test_append_log_creates_the_file(tmp_path: Path) -> None:
    with durable.AppendLog(tmp_path / "new.log") as log:
        log.append("x")
    assert (tmp_path / "new.log").read_text() == "x\n"


def test_remove_and_rename(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.write_text("1")
    (tmp_path / "sub").mkdir()
    durable.rename(a, tmp_path / "sub" / "b")
    assert (tmp_path / "sub" / "b").read_text() == "1" and not a.exists()
    assert durable.remove(tmp_path / "sub" / "b") is True
    assert durable.remove(tmp_path / "sub" / "b") is False
