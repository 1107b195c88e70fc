"""Durable state primitives: atomic replace, fsynced appends, torn-line handling."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sealsync import durable, libc


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


# --- atomic_write: unique temporaries, failures, modes, fsyncs ------------------------


def test_a_writer_paused_before_its_rename_is_not_disturbed_by_a_second_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writer A stops between writing its temporary and renaming it; writer B writes
    the same path from start to end meanwhile. A shared temporary name would let B
    truncate and rename A's file; with names of their own, A's rename still publishes
    A's content whole."""
    target = tmp_path / "state.txt"
    durable.atomic_write(target, "old\n")
    real_replace = os.replace
    a_ready, b_done = threading.Event(), threading.Event()
    a_name = "writer-a"

    def replace(src: str, dst: str | os.PathLike[str]) -> None:
        if threading.current_thread().name == a_name:
            a_ready.set()
            assert b_done.wait(10)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    errors: list[BaseException] = []

    def write_a() -> None:
        try:
            durable.atomic_write(target, b"A" * 100_000)
        except BaseException as exc:  # reported below
            errors.append(exc)

    a = threading.Thread(target=write_a, name=a_name)
    a.start()
    assert a_ready.wait(10)
    durable.atomic_write(target, b"B" * 10)
    assert target.read_bytes() == b"B" * 10
    b_done.set()
    a.join(10)
    assert errors == []
    assert target.read_bytes() == b"A" * 100_000
    assert sorted(os.listdir(tmp_path)) == ["state.txt"]


def test_concurrent_writers_of_one_path_always_leave_one_whole_content(
    tmp_path: Path,
) -> None:
    target = tmp_path / "state.txt"
    payloads = [bytes([65 + i]) * (200_000 + i) for i in range(4)]
    start = threading.Barrier(len(payloads))
    errors: list[BaseException] = []

    def writer(data: bytes) -> None:
        try:
            start.wait(10)
            for _ in range(20):
                durable.atomic_write(target, data)
                assert target.read_bytes() in payloads
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert target.read_bytes() in payloads
    assert sorted(os.listdir(tmp_path)) == ["state.txt"]


class Injected(OSError):
    pass


def _fail(*args: object, **kwargs: object) -> None:
    raise Injected(5, "injected failure")


def _short_write_then_fail() -> object:
    real_write = os.write
    calls = [0]

    def write(fd: int, data: bytes) -> int:
        calls[0] += 1
        if calls[0] > 1:
            raise Injected(28, "No space left on device")
        return real_write(fd, bytes(data)[:3])  # a short write: the loop must go on

    return write


@pytest.mark.parametrize(
    "name, make",
    [
        ("fsync", lambda: _fail),
        ("replace", lambda: _fail),
        ("write", _short_write_then_fail),
        ("fchmod", lambda: _fail),
    ],
    ids=["fsync", "replace", "short-write-then-enospc", "fchmod"],
)
def test_a_failure_leaves_the_old_content_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, make: Callable[[], object]
) -> None:
    target = tmp_path / "state.txt"
    durable.atomic_write(target, "old\n")
    monkeypatch.setattr(os, name, make())
    with pytest.raises(Injected):
        durable.atomic_write(target, "new content\n")
    monkeypatch.undo()
    assert target.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["state.txt"]


def test_a_failed_folder_fsync_is_reported_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.txt"
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise Injected(5, "injected failure")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(Injected):
        durable.atomic_write(target, "new\n")
    monkeypatch.undo()
    assert target.read_text() == "new\n"
    assert sorted(os.listdir(tmp_path)) == ["state.txt"]


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def test_file_then_rename_then_folder_are_made_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.txt"
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        path = Path(_fd_path(fd))
        events.append("fsync folder" if path == tmp_path else f"fsync {path.name}")
        real_fsync(fd)

    def replace(src: str, dst: str | os.PathLike[str]) -> None:
        events.append(f"replace {Path(src).name} -> {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    durable.atomic_write(target, "new\n")
    monkeypatch.undo()
    assert len(events) == 3
    first, rename, last = events
    tmp_name = first.removeprefix("fsync ")
    assert tmp_name.startswith(".state.txt.") and tmp_name.endswith(".tmp")
    assert rename == f"replace {tmp_name} -> state.txt"
    assert last == "fsync folder"


def test_sync_false_publishes_whole_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", _fail)
    durable.atomic_write(tmp_path / "x.resource", "{}\n", sync=False)
    monkeypatch.undo()
    assert (tmp_path / "x.resource").read_text() == "{}\n"
    assert sorted(os.listdir(tmp_path)) == ["x.resource"]


@pytest.mark.parametrize("umask, mode", [(0, 0o600), (0o077, 0o644), (0, 0o644)])
def test_the_mode_is_exact_from_the_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int, mode: int
) -> None:
    target = tmp_path / "key"
    seen: list[int] = []
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    old = os.umask(umask)
    try:
        durable.atomic_write(target, b"secret", mode)
    finally:
        os.umask(old)
    monkeypatch.undo()
    assert seen and set(seen) == {mode}
    assert stat.S_IMODE(target.stat().st_mode) == mode


def test_the_default_mode_is_0644_and_a_replace_applies_it_again(tmp_path: Path) -> None:
    target = tmp_path / "state.txt"
    target.write_text("old\n")
    target.chmod(0o600)
    durable.atomic_write(target, "new\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_create_once_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "uuid.txt"
    durable.atomic_write(target, "first\n", replace=False)
    with pytest.raises(FileExistsError) as info:
        durable.atomic_write(target, "second\n", replace=False)
    assert info.value.filename2 == str(target)
    assert target.read_text() == "first\n"
    assert sorted(os.listdir(tmp_path)) == ["uuid.txt"]


def test_a_temporary_a_crash_left_is_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "state.txt"
    (tmp_path / ".state.txt.k3j4h5g6.tmp").write_bytes(b"half")  # a killed writer's
    (tmp_path / ".state.txt.tmp").write_bytes(b"half")  # the shared name of old versions
    (tmp_path / ".other.txt.a1b2c3d4.tmp").write_bytes(b"not ours")
    durable.atomic_write(target, "new\n")
    assert sorted(os.listdir(tmp_path)) == [".other.txt.a1b2c3d4.tmp", "state.txt"]


def test_a_live_writers_temporary_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "state.txt"
    live = tmp_path / ".state.txt.livelive.tmp"
    fd = os.open(live, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a writer holds until its rename
        durable.atomic_write(target, "new\n")
        assert sorted(os.listdir(tmp_path)) == [live.name, "state.txt"]
    finally:
        os.close(fd)


def test_a_temporary_swept_before_its_writer_locked_it_is_replaced_by_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweeper may remove a new temporary in the instant before its writer locks it;
    the writer must notice and not write into a file no rename can publish."""
    real_mkstemp = tempfile.mkstemp
    made: list[str] = []

    def mkstemp(**kwargs: str) -> tuple[int, str]:
        fd, name = real_mkstemp(**kwargs)
        made.append(name)
        if len(made) == 1:
            os.unlink(name)  # the sweeper's work
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    durable.atomic_write(tmp_path / "state.txt", "new\n")
    monkeypatch.undo()
    assert len(made) == 2
    assert (tmp_path / "state.txt").read_text() == "new\n"
    assert sorted(os.listdir(tmp_path)) == ["state.txt"]


def test_syncfs_makes_a_real_call_and_raises_its_error(tmp_path: Path) -> None:
    # This machine's kernel reports syncfs errors (CI runs on one too): the call is the
    # real one, through the C library, and its failure is an OSError like fsync's.
    assert durable.can_syncfs()
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, b"bytes")
        durable.syncfs(fd)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as info:
        durable.syncfs(fd)  # closed now
    assert info.value.errno == errno.EBADF


@pytest.mark.parametrize(
    ("sysname", "release", "usable"),
    [
        ("Linux", "6.18.44-fc-v769", True),
        ("Linux", "5.8.0", True),
        ("Linux", "5.7.19", False),  # syncfs returned 0 after a failed write-back
        ("Linux", "4.19.0-25-amd64", False),
        ("Linux", "weird", False),
        ("Darwin", "23.1.0", False),
    ],
)
def test_syncfs_is_used_only_where_the_kernel_reports_its_errors(
    monkeypatch: pytest.MonkeyPatch, sysname: str, release: str, usable: bool
) -> None:
    real = os.uname()
    fake = os.uname_result((sysname, real.nodename, release, real.version, real.machine))
    monkeypatch.setattr(durable.os, "uname", lambda: fake)
    assert (durable._load_syncfs() is not None) is usable


def test_a_c_library_call_is_found_by_name_or_is_none() -> None:
    # the one lookup syncfs and the loader's renameat2 go through
    import ctypes

    close = libc.function("close", [ctypes.c_int])
    assert close is not None
    assert close(-1) == -1 and libc.errno() == errno.EBADF  # errno is the call's own
    assert libc.function("no_such_function_in_libc", []) is None


def test_rename_noreplace_moves_only_onto_a_free_name(tmp_path: Path) -> None:
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_bytes(b"new")
    assert durable.rename_noreplace(str(src), str(dst)) is True
    assert dst.read_bytes() == b"new" and not src.exists()
    src.write_bytes(b"newer")
    with pytest.raises(FileExistsError):
        durable.rename_noreplace(str(src), str(dst))
    assert dst.read_bytes() == b"new" and src.read_bytes() == b"newer"  # both untouched
    with pytest.raises(FileNotFoundError):
        durable.rename_noreplace(str(tmp_path / "missing"), str(tmp_path / "c"))


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS])
def test_rename_noreplace_declined_by_the_file_system_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # A file system without RENAME_NOREPLACE answers EINVAL: the caller is told to look
    # before renaming, and nothing moved.
    def declining(*args: object) -> int:
        ctypes.set_errno(code)
        return -1

    monkeypatch.setattr(libc, "_RENAMEAT2", declining)
    src = tmp_path / "a"
    src.write_bytes(b"x")
    assert durable.rename_noreplace(str(src), str(tmp_path / "b")) is False
    assert src.exists() and not (tmp_path / "b").exists()
    monkeypatch.setattr(libc, "_RENAMEAT2", None)  # a C library without renameat2
    assert durable.rename_noreplace(str(src), str(tmp_path / "b")) is False
