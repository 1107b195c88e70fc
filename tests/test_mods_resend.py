"""A synced file whose ``X.mods`` changed ships again (docs/design.md §3.7, §9.2).

:mod:`sender.manage.shipped_mods` keeps the ``(size, mtime_ns)`` of the
``.mods`` each synced file shipped with. Checked here: selection (the round's and the
dry run's), the state file and its fold into recovery under crashes, the identity
being taken before the bytes stream (an append during the round ships again), the
idle mark seeing an append that changes no folder, and the whole thing against the
real receiver over SSH.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, populate
from sender_transfer_helpers import (
    FAKE_RECEIVER,
    FakeReceiver,
    fake_round_config,
    round_with_fake,
)
from state_helpers import Crash, DurableStepCrash, sync_log_lines, write_data_file

from receiver.storage import DirectoryStorage
from sealsync import durable
from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.formats import mods2
from sealsync.protocol import Verdict
from sealsync.synclog import SyncLogState, read_sync_log
from sender import attempt as attempt_mod
from sender.manage import idle_mark, scan_cache, shipped_mods
from sender.manage import scan as scan_module
from sender.manage.layout import SenderPaths
from sender.manage.scan import DataDirScan, scan
from sender.manage.selection import Selection, select
from sender.manage.snapshot import take_snapshot
from sender.manage.state import read_file_set, write_file_set
from sender.plan import plan_dir
from sender.recover.recovery import recover

RECEIVER = FAKE_RECEIVER
A = "sequence/root.sg1/0/1-1-0.tsfile"
B = "sequence/root.sg1/0/2-2-0.tsfile"
C = "unsequence/root.sg1/0/3-3-0.tsfile"
D = "sequence/root.sg2/0/4-4-0.parquet"
E = "sequence/root.sg2/0/5-5-0.tsfile"


config_for = fake_round_config


def paths_of(config: SenderConfig) -> SenderPaths:
    return SenderPaths(config.data_dirs[0], RECEIVER.host, RECEIVER.port)


one_round = round_with_fake  # (report, peer)


def begins(peer: FakeReceiver) -> list[str]:
    return [v for k, v in peer.frames if k == "FILE_BEGIN"]


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def planned(config: SenderConfig) -> tuple[str, ...]:
    """What ``send --dry-run`` would ship (the selection a round makes)."""
    return plan_dir(config.data_dirs[0], RECEIVER).new


# --- selection, pure and over a real data dir --------------------------------------


def test_select_adds_sealed_names_whose_mods_changed() -> None:
    found = DataDirScan(
        frozenset({A, B, C}), frozenset({A, B, C, D}), (), with_mods=frozenset({A, B})
    )
    assert select(found, {A, B, D}) == Selection(new=(C,), deleted=())
    assert select(found, {A, B, D}, frozenset({B})) == Selection(new=(B, C), deleted=())
    # D exists but is not sealed (a merge is rewriting it): it is not shipped meanwhile
    assert select(found, {A, B, D}, frozenset({D})) == Selection(new=(C,), deleted=())
    assert select(found, {A, B, C, D, E}, frozenset({A})) == Selection(new=(A,), deleted=(E,))


def test_changed_compares_identities() -> None:
    shipped = {A: (10, 1), B: (20, 2)}
    assert shipped_mods.changed({A: (10, 1), B: (20, 2)}, shipped) == frozenset()
    assert shipped_mods.changed({A: (11, 3), B: (20, 2), C: (5, 5)}, shipped) == {A, C}
    assert shipped_mods.changed({A: (10, 9)}, shipped) == {A}  # same size, newer mtime


def test_selection_picks_a_synced_file_until_its_mods_identity_is_recorded(
    tmp_path: Path,
) -> None:
    config = config_for(tmp_path)
    data, paths = config.data_dirs[0], paths_of(config)
    for name in (A, B, C):
        write_data_file(data, name, b"x" * 10)
    paths.folder.mkdir(parents=True)
    write_file_set(paths.last_local_files, [A, B, C])
    assert planned(config) == ()

    Path(f"{data / A}.mods").write_bytes(b"DELETION,root.sg1.d0,5\n")  # created
    assert planned(config) == (A,)
    ident = shipped_mods.mods_identity(f"{data / A}.mods")
    assert ident is not None
    shipped_mods.write_identities(paths.shipped_mods, {A: ident})
    assert planned(config) == ()  # recorded: unchanged, not selected

    append(Path(f"{data / A}.mods"), b"DELETION,root.sg1.d1,7\n")  # appended
    assert planned(config) == (A,)
    shipped_mods.write_identities(
        paths.shipped_mods, {A: shipped_mods.mods_identity(f"{data / A}.mods")}
    )  # type: ignore[dict-item]
    assert planned(config) == ()

    os.utime(f"{data / A}.mods", ns=(1, 1))  # rewritten to the same size
    assert planned(config) == (A,)


def test_only_files_with_a_mods_are_stated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_for(tmp_path)
    data, paths = config.data_dirs[0], paths_of(config)
    for name in (A, B, C, D):
        write_data_file(data, name, b"x", mods=b"m" if name in (B, D) else None)
    Path(f"{data / E}.mods").parent.mkdir(parents=True, exist_ok=True)
    Path(f"{data / E}.mods").write_bytes(b"m")  # a .mods without its data file
    paths.folder.mkdir(parents=True)
    write_file_set(paths.last_local_files, [A, B, C])  # D is not synced yet
    found = scan(data)
    assert found.with_mods == {B, D}
    asked: list[str] = []
    real = shipped_mods.mods_identity

    def counting(path: str) -> tuple[int, int] | None:
        asked.append(os.path.relpath(path, data))
        return real(path)

    monkeypatch.setattr(shipped_mods, "mods_identity", counting)
    assert planned(config) == (B, D)  # D is new, B has no record yet
    assert asked == [f"{B}.mods", f"{B}.mods2"]  # either may hold its deletions


def test_a_mods2_ships_again_when_it_grows(tmp_path: Path) -> None:
    """IoTDB 2.x's ``X.mods2`` counts as ``X.mods`` does: a file that gets one, or
    whose one grows, ships again; one with both changes when either does."""
    config = config_for(tmp_path)
    data, paths = config.data_dirs[0], paths_of(config)
    write_data_file(data, A, b"x")
    paths.folder.mkdir(parents=True)
    write_file_set(paths.last_local_files, [A])
    assert planned(config) == ()
    Path(f"{data / A}.mods2").write_bytes(b"\x01" + bytes(16))
    assert scan(data).with_mods == {A}
    assert planned(config) == (A,)
    before = shipped_mods.current_identities(data, [A])[A]
    with open(f"{data / A}.mods2", "ab") as f:
        f.write(b"\x00")
    assert shipped_mods.current_identities(data, [A])[A] != before
    Path(f"{data / A}.mods").write_bytes(b"m")
    both = shipped_mods.current_identities(data, [A])[A]
    st1, st2 = os.stat(f"{data / A}.mods"), os.stat(f"{data / A}.mods2")
    assert both == (st1.st_size + st2.st_size, st1.st_mtime_ns + st2.st_mtime_ns)


def test_scan_cache_keeps_which_files_have_a_mods(
    tmp_path: Path, trusting: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write_data_file(data, A, b"a", mods=b"m")
    write_data_file(data, B, b"b")
    write_data_file(data, C, b"c", mods=b"m")
    cache = tmp_path / "scan_cache"
    full = scan(data)
    assert full.with_mods == {A, C}
    assert scan(data, cache=cache) == full and cache.exists()
    listed: list[str] = []
    real_scandir = os.scandir

    def counting(path: str):  # type: ignore[no-untyped-def]
        listed.append(path)
        return real_scandir(path)

    monkeypatch.setattr(scan_module.os, "scandir", counting)
    cached = scan(data, cache=cache)
    assert listed == [] and cached.with_mods == {A, C}  # from the cached listings


# --- the state file --------------------------------------------------------------


def test_state_file_round_trips_sorted_with_tabs(tmp_path: Path) -> None:
    path = tmp_path / "shipped_mods.txt"
    entries = {B: (0, 1_700_000_000_123_456_789), A: (123, 5), D: (1 << 40, -3)}
    shipped_mods.write_identities(path, entries)
    assert path.read_text() == (f"{A}\t123\t5\n{B}\t0\t1700000000123456789\n{D}\t{1 << 40}\t-3\n")
    assert shipped_mods.read_identities(path) == entries
    assert shipped_mods.read_identities(tmp_path / "absent") == {}


def test_damaged_lines_are_dropped_and_only_cost_a_resend(tmp_path: Path) -> None:
    path = tmp_path / "shipped_mods.txt"
    path.write_text(
        f"{A}\t1\t2\n"
        f"{B}\tone\t2\n"  # not a number
        f"../etc/passwd.tsfile\t1\t2\n"  # not a data name
        f"{C}\t-1\t2\n"  # negative size
        f"{D}\t1\n"  # a field missing
        f"{E}\t3\t4"  # torn: no newline
    )
    assert shipped_mods.read_identities(path) == {A: (1, 2)}


def test_a_write_torn_by_a_crash_leaves_the_old_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "shipped_mods.txt"
    shipped_mods.write_identities(path, {A: (1, 2)})

    def dying_replace(src: str, dst: str) -> None:
        raise OSError(5, "died before the rename")

    real_write = os.write
    monkeypatch.setattr(durable.os, "replace", dying_replace)
    with pytest.raises(OSError):
        shipped_mods.write_identities(path, {A: (3, 4), B: (5, 6)})
    assert shipped_mods.read_identities(path) == {A: (1, 2)}

    def half_write(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.undo()
    monkeypatch.setattr(durable.os, "write", half_write)
    with pytest.raises(OSError):
        shipped_mods.write_identities(path, {A: (7, 8), C: (9, 10)})
    monkeypatch.undo()
    assert shipped_mods.read_identities(path) == {A: (1, 2)}
    shipped_mods.write_identities(path, {B: (5, 6)})  # the leftover temporary is no obstacle
    assert shipped_mods.read_identities(path) == {B: (5, 6)}


def test_fold_is_the_round_applied_and_idempotent() -> None:
    shipped = {A: (1, 1), B: (2, 2), E: (5, 5)}
    snapshot = {A: (10, 10), C: (3, 3)}
    log = SyncLogState(deleted=(E,), new=(A, C, D), ended=True)
    synced = {A, B, C, D}
    once = shipped_mods.fold(shipped, snapshot, log, synced)
    # A re-shipped with a new .mods, C new with one, D new without, E deleted, B untouched
    assert once == {A: (10, 10), B: (2, 2), C: (3, 3)}
    assert shipped_mods.fold(once, snapshot, log, synced) == once
    # a verified name whose snapshot had no .mods loses its record: it shipped without
    assert shipped_mods.fold({D: (4, 4)}, {}, log, synced) == {}
    # a name not verified keeps its old record, however new the snapshot's is
    assert shipped_mods.fold(shipped, snapshot, SyncLogState((), (), False), synced) == {
        A: (1, 1),
        B: (2, 2),
    }


# --- recovery folds the round in, crash or no crash ---------------------------------

SYNCED = [A, B, E]
NEW = [A, C, D]  # A ships again (its .mods grew), C and D are new
LOG_LINES = sync_log_lines([E], NEW)


def crashed_round(tmp_path: Path, lines: list[str]) -> tuple[SenderPaths, dict]:
    """The state of a round that died with ``lines`` of its sync.log written."""
    data = tmp_path / "data"
    if data.exists():
        shutil.rmtree(data)
    for name in (A, B, C, D):
        write_data_file(data, name, name.encode(), mods=b"m1" if name in (A, B, C) else None)
    paths = SenderPaths(data, "h", 1)
    paths.folder.mkdir(parents=True)
    write_file_set(paths.last_local_files, SYNCED)
    old = {A: (2, 1), B: shipped_mods.mods_identity(f"{data / B}.mods"), E: (9, 9)}
    shipped_mods.write_identities(paths.shipped_mods, old)  # type: ignore[arg-type]
    append(Path(f"{data / A}.mods"), b"+grown")
    placed = take_snapshot(data, paths.snapshot, NEW)
    shipped_mods.record_snapshot(paths, [n for n, p in placed.items() if p.has_mods])
    durable.write_lines(paths.sync_log, lines)
    return paths, old


def expected_after(paths: SenderPaths, lines: list[str], old: dict) -> dict:
    done = read_sync_log(paths.sync_log) if paths.sync_log.exists() else None
    assert done is not None
    synced = (set(SYNCED) - set(done.deleted)) | set(done.new)
    return shipped_mods.fold(old, shipped_mods.read_identities(paths.snapshot_mods), done, synced)


@pytest.mark.parametrize("cut", range(len(LOG_LINES) + 1))
def test_recovery_folds_what_the_log_proves(tmp_path: Path, cut: int) -> None:
    paths, old = crashed_round(tmp_path, LOG_LINES[:cut])
    want = expected_after(paths, LOG_LINES[:cut], old)
    verified = set(read_sync_log(paths.sync_log).new)
    recover(paths)
    got = shipped_mods.read_identities(paths.shipped_mods)
    assert got == want
    data = paths.data_dir
    for name in (A, C):  # a verified name carries the identity of what it shipped with
        now = shipped_mods.mods_identity(f"{data / name}.mods")
        assert (got.get(name) == now) == (name in verified)
    assert D not in got and (E in got) == (E in old and cut <= 2)
    assert not paths.snapshot_mods.exists() and not paths.sync_log.exists()
    recover(paths)
    assert shipped_mods.read_identities(paths.shipped_mods) == want


def test_a_crash_before_any_durable_step_of_the_fold_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    injector = DurableStepCrash(monkeypatch)
    paths, old = crashed_round(tmp_path, LOG_LINES)
    want = expected_after(paths, LOG_LINES, old)
    injector.arm(0)
    recover(paths)
    assert injector.steps == [
        "atomic_write shipped_mods.txt",  # before current exists: step 7 trusts it done
        "atomic_write current_local_files.txt",
        "remove last_local_files.txt",
        "rename current_local_files.txt",
        "rmtree snapshot",
        "remove sync.log",
        "remove snapshot_mods.txt",  # after the log that may still need it
    ]
    steps = injector.count
    for first in range(1, steps + 1):
        for second in range(0, steps + 1):
            paths, old = crashed_round(tmp_path, LOG_LINES)
            want = expected_after(paths, LOG_LINES, old)
            for crash_at in (first, second, 0):
                injector.arm(crash_at)
                try:
                    recover(paths)
                except Crash:
                    continue
            assert shipped_mods.read_identities(paths.shipped_mods) == want, (first, second)
            assert read_file_set(paths.last_local_files) == {A, B, C, D}
            assert sorted(os.listdir(paths.folder)) == ["last_local_files.txt", "shipped_mods.txt"]


def test_dry_run_during_a_crashed_round_counts_what_recovery_will_record(
    tmp_path: Path,
) -> None:
    paths, _ = crashed_round(tmp_path, LOG_LINES)
    before = {p: p.read_bytes() for p in paths.folder.iterdir() if p.is_file()}
    # A and C were verified with the .mods they have now; B's record is current too
    assert plan_dir(paths.data_dir, ReceiverEndpoint("x", "h", 1)).new == ()
    append(Path(f"{paths.data_dir / C}.mods"), b"+later")
    assert plan_dir(paths.data_dir, ReceiverEndpoint("x", "h", 1)).new == (C,)
    assert {p: p.read_bytes() for p in paths.folder.iterdir() if p.is_file()} == before


def test_snapshot_identities_are_the_originals_whether_linked_or_copied(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    write_data_file(data, A, b"a", mods=b"a-mods;")
    write_data_file(data, B, b"b")
    os.utime(f"{data / A}.mods", ns=(5, 1_600_000_000_123_456_789))
    original = shipped_mods.mods_identity(f"{data / A}.mods")

    def other_fs(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    for link in (None, other_fs):
        paths = SenderPaths(data, "h" if link is None else "other", 1)
        paths.folder.mkdir(parents=True)
        kwargs = {} if link is None else {"link": link}
        placed = take_snapshot(data, paths.snapshot, [A, B], **kwargs)  # type: ignore[arg-type]
        shipped_mods.record_snapshot(paths, [n for n, p in placed.items() if p.has_mods])
        assert shipped_mods.read_identities(paths.snapshot_mods) == {A: original}
        # a copy is another inode but keeps size and mtime: no needless resend
        same = os.stat(paths.snapshot / f"{A}.mods").st_ino == os.stat(f"{data / A}.mods").st_ino
        assert same == (link is None)


# --- rounds against the scripted receiver ---------------------------------------------


def test_an_append_while_the_file_streams_ships_it_again(tmp_path: Path) -> None:
    """The identity is taken before the bytes are read: an append during the round can
    only be recorded as not shipped yet, never as shipped."""
    config = config_for(tmp_path)
    data, paths = config.data_dirs[0], paths_of(config)
    write_data_file(data, A, b"a" * 100, mods=b"first;")
    mods = Path(f"{data / A}.mods")
    before = shipped_mods.mods_identity(mods)

    def append_on_arrival(name: str, attempt: int, stream: bytes) -> tuple[str, str]:
        append(mods, b"during;")  # after the sender read the file, before it logs it
        return Verdict.VERIFIED, ""

    report, peer = one_round(config, FakeReceiver(policy=append_on_arrival))
    assert report.ok and peer.files[A].endswith(b"first;")
    assert shipped_mods.read_identities(paths.shipped_mods) == {A: before}
    assert shipped_mods.mods_identity(mods) != before
    report, peer = one_round(config)
    assert begins(peer) == [A] and peer.files[A].endswith(b"first;during;")
    report, peer = one_round(config)
    assert begins(peer) == [] and report.dirs[0].shipped == []


def test_a_resend_that_fails_keeps_the_old_record(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    data, paths = config.data_dirs[0], paths_of(config)
    write_data_file(data, A, b"a" * 100, mods=b"one;")
    one_round(config)
    recorded = shipped_mods.read_identities(paths.shipped_mods)
    assert recorded == {A: shipped_mods.mods_identity(f"{data / A}.mods")}
    append(Path(f"{data / A}.mods"), b"two;")

    def refuse(name: str, attempt: int, stream: bytes) -> tuple[str, str]:
        return Verdict.REFUSED, "disk full"

    report, peer = one_round(config, FakeReceiver(policy=refuse))
    assert begins(peer) == [A] and A in report.dirs[0].refused
    assert shipped_mods.read_identities(paths.shipped_mods) == recorded
    assert read_file_set(paths.last_local_files) == {A}  # never deleted for it
    report, peer = one_round(config)
    assert report.dirs[0].shipped == [A] and peer.files[A].endswith(b"one;two;")
    assert shipped_mods.read_identities(paths.shipped_mods) == {
        A: shipped_mods.mods_identity(f"{data / A}.mods")
    }


def test_deleted_files_lose_their_record(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    data, paths = config.data_dirs[0], paths_of(config)
    write_data_file(data, A, b"a", mods=b"m")
    write_data_file(data, B, b"b", mods=b"m")
    one_round(config)
    assert set(shipped_mods.read_identities(paths.shipped_mods)) == {A, B}
    for suffix in ("", ".resource", ".mods"):
        Path(f"{data / A}{suffix}").unlink()
    report, _ = one_round(config)
    assert report.dirs[0].deleted == [A]
    assert set(shipped_mods.read_identities(paths.shipped_mods)) == {B}
    for suffix in ("", ".resource", ".mods"):
        Path(f"{data / B}{suffix}").unlink()
    one_round(config)
    assert not paths.shipped_mods.exists()  # no record left: no file either
    assert not paths.snapshot_mods.exists()


def test_an_idle_round_does_not_hide_an_append_to_a_synced_mods(
    tmp_path: Path, trusting: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_for(tmp_path)
    data, paths = config.data_dirs[0], paths_of(config)
    write_data_file(data, A, b"a" * 100)
    write_data_file(data, B, b"b" * 100, mods=b"b1;")
    _, peer = one_round(config)
    assert begins(peer) == [A, B]
    mods = Path(f"{data / A}.mods")
    mods.write_bytes(b"a1;")  # created: its folder changes
    _, peer = one_round(config)
    assert begins(peer) == [A]
    _, peer = one_round(config)  # nothing to do: the idle mark is written
    assert begins(peer) == [] and paths.idle_mark.exists()
    assert f"\t{A}\n" in paths.idle_mark.read_text() and f"\t{B}\n" in paths.idle_mark.read_text()
    marked = (paths.idle_mark, data, paths.last_local_files, paths.shipped_mods)
    assert idle_mark.unchanged(*marked)

    scans: list[Path] = []
    real_scan = attempt_mod.scan

    def counting_scan(data_dir: Path, cache: Path | None = None) -> DataDirScan:
        scans.append(data_dir)
        return real_scan(data_dir, cache=cache)

    monkeypatch.setattr(attempt_mod, "scan", counting_scan)
    _, peer = one_round(config)
    assert begins(peer) == [] and scans == []  # the short way

    folder = data / "sequence/root.sg1/0"
    key = scan_cache.folder_key(os.lstat(folder))
    append(mods, b"a2;")  # IoTDB deletes more points of the synced A
    assert scan_cache.folder_key(os.lstat(folder)) == key  # no folder noticed
    assert not idle_mark.unchanged(*marked)
    _, peer = one_round(config)
    assert begins(peer) == [A] and peer.files[A].endswith(b"a1;a2;") and scans == [data]
    _, peer = one_round(config)
    _, peer = one_round(config)
    assert begins(peer) == [] and idle_mark.unchanged(*marked)


def test_the_mark_keeps_what_selection_saw_not_what_is_there_later(
    tmp_path: Path, trusting: None
) -> None:
    """An append between selection and the mark must not be written down as seen."""
    data = tmp_path / "data"
    write_data_file(data, A, b"a", mods=b"m1;")
    paths = SenderPaths(data, "h", 1)
    paths.folder.mkdir(parents=True)
    write_file_set(paths.last_local_files, [A])
    found = scan(data, cache=paths.scan_cache)
    seen = shipped_mods.current_identities(data, found.with_mods)
    append(Path(f"{data / A}.mods"), b"m2;")
    idle_mark.record(
        paths.idle_mark, data, found.folders, paths.last_local_files, paths.shipped_mods, seen
    )
    assert not paths.idle_mark.exists()
    seen = shipped_mods.current_identities(data, found.with_mods)
    idle_mark.record(
        paths.idle_mark, data, found.folders, paths.last_local_files, paths.shipped_mods, seen
    )
    assert idle_mark.unchanged(paths.idle_mark, data, paths.last_local_files, paths.shipped_mods)
    shipped_mods.write_identities(paths.shipped_mods, seen)  # state changed: mark stale
    assert not idle_mark.unchanged(
        paths.idle_mark, data, paths.last_local_files, paths.shipped_mods
    )


# --- end to end: real sender processes, the real receiver over SSH -------------------


@pytest.fixture
def dep(start_deployment: Callable[..., Deployment]) -> Deployment:
    return start_deployment()


@pytest.mark.slow
def test_a_changed_mods_reaches_the_receiver_and_the_file_is_never_deleted(
    dep: Deployment,
) -> None:
    sender = dep.senders[0]
    edge = sender.edge
    names = populate(edge, groups=2, files=2, unsequence=1)
    storage = DirectoryStorage([dep.receiver_data])

    def stored(name: str) -> Path:
        return storage.target(dep.receiver_data, sender.uuid, name)

    def send() -> dict:
        doc = sender.send_json()
        assert doc["ok"] is True, doc
        (receiver,) = doc["receivers"]
        (d,) = receiver["dirs"]
        assert d["deleted"] == []
        assert dep.loaded_hashes(sender) == sender.sealed_hashes()  # nothing ever deleted
        assert dep.round_state_left() == []
        return receiver

    first = send()
    assert first["shipped_files"] == len(names)
    victim = names[1]
    assert not Path(f"{stored(victim)}.mods2").exists()

    edge.add_mods(victim, "root.sg0.d1", 10_000)
    status = subprocess.run(
        [*SEALSYNC, "status", "--config", str(sender.config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    (pending,) = json.loads(status.stdout)["receivers"][0]["data_dirs"]
    assert (pending["pending_new"], pending["pending_deleted"]) == (1, 0)
    dry = sender.send("--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["receivers"][0]["data_dirs"][0]["new"] == [victim]

    second = send()
    assert second["shipped_files"] == 1
    assert second["dirs"][0]["shipped"] == [victim]
    local_mods = edge.path(victim + ".mods2")
    assert Path(f"{stored(victim)}.mods2").read_bytes() == local_mods.read_bytes() != b""

    third = send()
    assert third["shipped_files"] == 0

    edge.add_mods(victim, "root.sg0.d0", 20_000)
    fourth = send()
    assert fourth["dirs"][0]["shipped"] == [victim]
    assert Path(f"{stored(victim)}.mods2").read_bytes() == local_mods.read_bytes()
    assert len(mods2.read(local_mods)) == 2
    assert send()["shipped_files"] == 0
