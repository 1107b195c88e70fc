"""The receiver's replay of ``sync.log`` against ``load.log``, for every pair of prefixes.

A round arrives as ``sync.log`` lines (each verified file staged in ``data/`` and its
devices claimed before its line is written) while the loader applies the events in
order, each applied and then recorded in ``load.log``. A crash can cut both logs
anywhere, tear their last lines, and fall between a move and its record. Whatever the
cut, recovery (``receiver/recover/replay.py``) must apply exactly the events of
``sync.log`` that ``load.log`` lacks, in order, leave the storage as if each event of
``sync.log`` had been applied once, remove the round's state, and do nothing the
second time. The storage is the real ``DirectoryStorage`` (recording its calls) with
the real ``device_owner.log``, except in the exhaustive test over both prefixes, which
is about replay's decisions and uses small in-memory stand-ins for the two.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
from fakefs_helpers import (
    FAKEFS_SETTINGS,
    FakeInspect,
    as_bytes,
    complete_lines,
    files_under,
    fresh,
    put,
    record_cuts,
    sections,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import FakeFilesystem
from state_helpers import sync_log_lines

from receiver.layout import SenderFolder
from receiver.load.apply import Applier, read_load_log
from receiver.load.owners import DeviceOwners
from receiver.recover.replay import recover_all, recover_folder
from receiver.storage import DirectoryStorage, Storage, StorageError

ROOT = Path("/r")
DATA = ROOT / "data"
UUID = "0b5d1f7e-3c1a-4c2e-9a51-5d0f2f6a0a01"
FOLDER = SenderFolder(DATA, "10.0.0.1", UUID)

OLD = ["sequence/sg1/0/1-1-0.tsfile", "unsequence/sg2/0/2-2-0.tsfile"]
NEVER = "sequence/sg1/0/9-9-0.tsfile"  # deleted by the sender, never loaded here
RESHIPPED = OLD[1]  # its .mods changed: the same data file ships again with the new one
DELETED = [OLD[0], NEVER]
NEW = ["sequence/sg1/0/10-10-0.parquet", RESHIPPED]
LOG = as_bytes(sync_log_lines(DELETED, NEW))


def device(name: str) -> str:
    return "root.d" + name.rsplit("/", 1)[1].split("-")[0]


def data(name: str) -> bytes:
    """A data file's bytes: its device first (what :class:`FakeInspect` reads)."""
    return f"{device(name)}\npoints of {name}\n".encode()


def mods(name: str, round_: int) -> bytes:
    return f"DELETION,{device(name)},{round_}\n".encode()


class RecordingStorage(DirectoryStorage):
    """The default storage, recording each call recovery makes."""

    def __init__(self, data_dirs: list[Path]) -> None:
        super().__init__(data_dirs)
        self.calls: list[tuple[str, str]] = []

    def load(self, sender: str, name: str, staged: Path) -> None:
        self.calls.append(("load", name))
        super().load(sender, name, staged)

    def delete(self, sender: str, name: str) -> bool:
        self.calls.append(("delete", name))
        return super().delete(sender, name)

    def held(self) -> dict[str, bytes]:
        """Every piece held for the sender: data files and sidecars."""
        out = {}
        for name in self.list(UUID):
            target = self.target(DATA, UUID, name)
            for suffix in ("", ".resource", ".mods"):
                path = Path(f"{target}{suffix}")
                if path.exists():
                    out[name + suffix] = path.read_bytes()
        return out


class MemoryStorage(Storage):
    """A small recording host storage: a load takes the staged pieces into memory (and
    off the disk), a load whose pieces are gone is one an earlier attempt finished.
    It keeps the exhaustive test about replay's decisions; the default storage's own
    idempotence is exercised with :class:`RecordingStorage`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.files: dict[str, dict[str, bytes]] = {}

    def load(self, sender: str, name: str, staged: Path) -> None:
        assert sender == UUID
        self.calls.append(("load", name))
        pieces = {}
        for suffix in ("", ".mods", ".resource"):
            path = Path(f"{staged}{suffix}")
            if path.exists():
                pieces[name + suffix] = path.read_bytes()
                path.unlink()
        if not pieces and name not in self.files:
            raise StorageError(f"{name}: the staged file is missing and it is not loaded")
        if pieces:
            self.files[name] = pieces

    def delete(self, sender: str, name: str) -> bool:
        assert sender == UUID
        self.calls.append(("delete", name))
        return self.files.pop(name, None) is not None

    def list(self, sender: str) -> set[str]:
        return set(self.files) if sender == UUID else set()

    def inventory(self, sender: str) -> dict[str, tuple[int, str]]:
        return {name: (len(pieces[name]), "") for name, pieces in self.files.items()}

    def held(self) -> dict[str, bytes]:
        return {k: v for pieces in self.files.values() for k, v in pieces.items()}


class MemoryOwners:
    """Device ownership kept in memory, first claim wins (``device_owner.log``'s rule):
    with :class:`MemoryStorage`, replay's decisions are all that touches the disk."""

    def __init__(self) -> None:
        self.owner: dict[str, str] = {}

    def claim(self, devices: Iterable[str], uuid: str) -> dict[str, str]:
        conflicts = {d: self.owner[d] for d in devices if self.owner.get(d, uuid) != uuid}
        if not conflicts:
            self.owner.update(dict.fromkeys(devices, uuid))
        return conflicts

    def owners_of(self, devices: Iterable[str]) -> dict[str, str]:
        return {d: self.owner[d] for d in devices if d in self.owner}


@dataclass
class Env:
    storage: RecordingStorage | MemoryStorage
    owners: DeviceOwners
    inspect: FakeInspect

    def applier(self) -> Applier:
        return Applier(FOLDER, self.storage, self.owners, self.inspect)

    def recover(self) -> bool:
        self.storage.calls.clear()
        return recover_folder(FOLDER, self.storage, self.owners, self.inspect)


def stage(name: str, round_: int) -> None:
    """What the session does before logging ``name``: stage it with its sidecars (the
    session also claims its devices first; recovery claims them again, idempotently).
    Only RESHIPPED has a ``.mods``: a changed one is why it ships again."""
    staged = FOLDER.staged(name)
    put(staged, data(name))
    put(Path(f"{staged}.resource"), b"resource")
    if name == RESHIPPED:
        put(Path(f"{staged}.mods"), mods(name, round_))


def setup(fs: FakeFilesystem, real_storage: bool = True) -> Env:
    """A receiver holding OLD from an earlier, finished round: the default storage and
    ``device_owner.log``, or their in-memory stand-ins."""
    fresh(fs, ROOT)
    # MemoryOwners stands in by duck typing: replay only claims and the test only asks.
    owners = DeviceOwners(ROOT / "schema") if real_storage else cast(DeviceOwners, MemoryOwners())
    assert owners.claim([device(n) for n in OLD], UUID) == {}
    if not real_storage:
        memory = MemoryStorage()
        memory.files = {n: pieces_of(n, 1) for n in OLD}
        return Env(memory, owners, FakeInspect())
    storage = RecordingStorage([DATA])
    for name in OLD:
        target = storage.target(DATA, UUID, name)
        for piece, content in pieces_of(name, 1).items():
            put(Path(f"{target}{piece[len(name) :]}"), content)
    return Env(storage, owners, FakeInspect())


def pieces_of(name: str, round_: int) -> dict[str, bytes]:
    """The data file and sidecars of ``name`` as round ``round_`` shipped them."""
    out = {name: data(name), f"{name}.resource": b"resource"}
    if name == RESHIPPED:
        out[f"{name}.mods"] = mods(name, round_)
    return out


def events(log: bytes) -> list[tuple[str, str]]:
    """The model: what a ``sync.log`` prefix asks for, in order."""
    deleted, new = sections(complete_lines(log))
    return [("delete", n) for n in deleted] + [("load", n) for n in new]


def arrive(log: bytes, cut: int, new: list[str] = NEW) -> None:
    """The round's arrival cut after ``cut`` bytes of ``log``: a new file is staged once
    its line is begun (staging comes before the line), ``sync.end`` comes last."""
    FOLDER.data.mkdir(parents=True, exist_ok=True)
    start = 0
    for line in complete_lines(log):
        if line in new and start < cut:
            stage(line, round_=2)
        start += len(line) + 1
    FOLDER.sync_log.write_bytes(log[:cut])
    if cut == len(log):
        FOLDER.sync_end.write_bytes(b"")


def apply_some(env: Env, todo: list[tuple[str, str]], k: int, torn: bool, unlogged: bool) -> None:
    """The loader applied and recorded ``todo[:k]``; then maybe applied ``todo[k]``
    without its record (``unlogged``), and maybe tore the record's line (``torn``)."""
    applier = env.applier()
    for kind, name in todo[:k]:
        getattr(applier, kind)(name)
    applier.close()
    if k == len(todo):
        return
    kind, name = todo[k]
    if unlogged:
        size = FOLDER.load_log.stat().st_size if FOLDER.load_log.exists() else 0
        applier = env.applier()
        getattr(applier, kind)(name)
        applier.close()
        with open(FOLDER.load_log, "r+b") as f:
            f.truncate(size)
    if torn:
        with open(FOLDER.load_log, "ab") as f:
            f.write(f"{kind} {name}"[:-3].encode())
    recorded = read_load_log(FOLDER.load_log)
    assert recorded.loaded | recorded.deleted == {n for _, n in todo[:k]}


def expected_store(todo: list[tuple[str, str]]) -> dict[str, bytes]:
    """The model: OLD as the earlier round left it, with every event of ``todo``
    applied once."""
    files = {n: pieces_of(n, 1) for n in OLD}
    for kind, name in todo:
        if kind == "delete":
            files.pop(name, None)
        else:
            files[name] = pieces_of(name, 2)
    return {k: v for pieces in files.values() for k, v in pieces.items()}


def assert_replayed(env: Env, todo: list[tuple[str, str]], k: int) -> None:
    assert env.recover() is True
    assert env.storage.calls == todo[k:]
    after = env.storage.held()
    assert after == expected_store(todo)
    owned = env.owners.owners_of(device(n) for n in env.storage.list(UUID))
    assert set(owned.values()) <= {UUID} and len(owned) == len(env.storage.list(UUID))
    assert files_under(FOLDER.root) == set()
    assert env.recover() is True  # idempotent
    assert env.storage.calls == []
    assert env.storage.held() == after
    assert files_under(FOLDER.root) == set()


CUTS = record_cuts(LOG)


VARIANTS = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize("cut", CUTS)
def test_every_sync_log_prefix_with_every_load_log_prefix(fs: FakeFilesystem, cut: int) -> None:
    """Every prefix of ``load.log`` the loader can have written: ``k`` records, and the
    next one torn."""
    todo = events(LOG[:cut])
    for k in range(len(todo) + 1):
        for torn in [False, True] if k < len(todo) else [False]:
            env = setup(fs, real_storage=False)
            arrive(LOG, cut)
            apply_some(env, todo, k, torn=torn, unlogged=False)
            assert_replayed(env, todo, k)


@pytest.mark.parametrize(("torn", "unlogged"), VARIANTS)
def test_the_default_storage_replays_every_load_log_prefix(
    fs: FakeFilesystem, torn: bool, unlogged: bool
) -> None:
    """The whole round with the default storage and ``device_owner.log``, the next
    record torn, missing (the event applied, a crash before its record) or both: a file
    moved before the crash is recognised (identical pieces in place), RESHIPPED's new
    ``.mods`` replaces the old one."""
    todo = events(LOG)
    for k in range(len(todo) + (not (torn or unlogged))):
        env = setup(fs)
        arrive(LOG, len(LOG))
        apply_some(env, todo, k, torn=torn, unlogged=unlogged)
        assert_replayed(env, todo, k)


def test_without_sync_log_only_the_leftovers_go(fs: FakeFilesystem) -> None:
    env = setup(fs)
    before = env.storage.held()
    stage(NEW[0], round_=2)  # staged, never logged: the sender was never told
    FOLDER.load_log.write_bytes(f"load {NEW[0]}\n".encode())
    FOLDER.sync_end.write_bytes(b"")
    assert env.recover() is True
    assert env.storage.calls == []
    assert env.storage.held() == before
    assert files_under(FOLDER.root) == set()


def test_recover_all_replays_every_sender_folder(fs: FakeFilesystem) -> None:
    env = setup(fs)
    arrive(LOG, len(LOG))
    other = SenderFolder(DATA, "10.0.0.2", "7a1e9c44-2b7d-4f10-8c3e-1f2d3c4b5a02")
    put(other.staged(NEW[0]), b"root.other\n")
    put(other.root / "load.log", b"")  # its round had no sync.log: only leftovers
    put(DATA / "sync-receiver" / "not-a-sender" / "keep", b"")  # reported, left alone
    recover_all([DATA], env.storage, env.owners, env.inspect)
    assert env.storage.calls == events(LOG)
    assert env.storage.held() == expected_store(events(LOG))
    # Besides the junk, only the deletion log of the replayed deletions (the loader's
    # evidence, sealsync.deletions): no sender folder is left.
    assert files_under(DATA / "sync-receiver") == {
        "not-a-sender/keep",
        f"deleted_{FOLDER.uuid}.log",
    }


# --- random rounds ----------------------------------------------------------------------


@settings(FAKEFS_SETTINGS, max_examples=10)
@given(
    deleted=st.lists(st.sampled_from([*OLD, NEVER]), unique=True),
    new=st.lists(st.sampled_from([*NEW, "sequence/sg1/0/12-12-0.tsfile"]), unique=True),
    data_=st.data(),
)
def test_random_rounds_cut_anywhere_replay_to_the_model(
    fs: FakeFilesystem, deleted: list[str], new: list[str], data_: st.DataObject
) -> None:
    new = [n for n in new if n not in deleted]
    log = as_bytes(sync_log_lines(deleted, new))
    cut = data_.draw(st.integers(0, len(log)), label="cut")
    todo = events(log[:cut])
    k = data_.draw(st.integers(0, len(todo)), label="applied")
    torn, unlogged = data_.draw(st.booleans()), data_.draw(st.booleans())
    env = setup(fs)
    arrive(log, cut, new)
    apply_some(env, todo, k, torn=torn, unlogged=unlogged)
    assert_replayed(env, todo, k)
