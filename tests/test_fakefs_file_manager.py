"""IoTDB's ``SyncFileManagerTest`` on a fake file system, against the sender's real selection.

What a round selects is computed the way ``sender/attempt.py`` does it (recovery, scan,
``last_local_files.txt``, the ``.mods`` identities, ``select``), and every time the dry
run (``sender/plan.py``, which predicts recovery instead of running it) must agree.
"Recorded as synced" is what a round whose receiver verified and acknowledged
everything leaves behind, through the real snapshot, ``snapshot_mods.txt``,
``sync.log`` and clean-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from fakefs_helpers import FAKEFS_SETTINGS, fresh, put
from hypothesis import given, settings
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import FakeFilesystem

from sealsync.config import ReceiverEndpoint
from sealsync.names import DATA_ROOTS
from sealsync.synclog import SyncLog
from sender.manage import shipped_mods
from sender.manage.layout import SenderPaths
from sender.manage.scan import SYMLINK, scan
from sender.manage.selection import Selection, select
from sender.manage.snapshot import take_snapshot
from sender.manage.state import read_file_set
from sender.plan import plan_dir
from sender.recover.recovery import recover

DATA = Path("/iotdb/data")
RECEIVER = ReceiverEndpoint("dc", "10.0.0.9", 5555)
GROUPS = ("root.sg0", "root.sg1", "root.sg2")
SIDECARS = (".resource", ".mods", ".merge")


def state() -> SenderPaths:
    return SenderPaths(DATA, RECEIVER.host, RECEIVER.port)


def name(group: str, i: int) -> str:
    """The ``i``-th file of ``group``: sequence and unsequence, three time partitions,
    TsFile and Parquet, named as IoTDB names them."""
    suffix = ".parquet" if i % 4 == 3 else ".tsfile"
    return f"{DATA_ROOTS[i % 2]}/{group}/{i % 3}/{1_600_000_000_000 + i}-{i}-0{suffix}"


def sidecar(name: str, suffix: str) -> Path:
    return Path(f"{DATA / name}{suffix}")


def write(name: str, *, sealed: bool = True) -> None:
    put(DATA / name, f"data of {name}".encode())
    if sealed:
        put(sidecar(name, ".resource"), b"resource")


def delete(name: str) -> None:
    """What IoTDB does to a file a merge or TTL removed: the data file and its sidecars."""
    for path in (DATA / name, *(sidecar(name, s) for s in SIDECARS)):
        if path.exists():
            path.unlink()


def append_mods(name: str, line: str) -> None:
    with open(sidecar(name, ".mods"), "a") as f:
        f.write(line)


def selection_now(paths: SenderPaths, *, dry_run_too: bool = True) -> Selection:
    """The selection a round makes, after the dry run predicted the same."""
    planned = plan_dir(DATA, RECEIVER) if dry_run_too else None
    recover(paths)
    found = scan(DATA)  # no scan cache: see fakefs_helpers on folder times
    last = read_file_set(paths.last_local_files, known=found.present)
    seen = shipped_mods.current_identities(DATA, found.with_mods & last)
    changed = shipped_mods.changed(seen, shipped_mods.read_identities(paths.shipped_mods))
    chosen = select(found, last, changed)
    if planned is not None:
        assert (planned.new, planned.deleted) == (chosen.new, chosen.deleted)
        assert planned.mods_changed == tuple(n for n in chosen.new if n in last)
    return chosen


def ship(paths: SenderPaths, chosen: Selection) -> list[str]:
    """A round whose receiver verified every new file and acknowledged every deletion."""
    paths.folder.mkdir(parents=True, exist_ok=True)
    placed = take_snapshot(DATA, paths.snapshot, chosen.new)
    names = list(placed)
    shipped_mods.record_snapshot(paths, [n for n in names if placed[n].has_mods])
    with SyncLog(paths.sync_log) as log:
        log.start()
        log.deleted_start()
        log.deleted_many(chosen.deleted)
        log.deleted_end()
        log.tsfile_start()
        log.tsfile_many(names)
        log.tsfile_end()
        log.end()
    recover(paths)
    assert set(os.listdir(paths.folder)) <= {"last_local_files.txt", "shipped_mods.txt"}
    for name in names:  # the snapshot's hard links are gone with it
        assert os.stat(DATA / name).st_nlink == 1
    return names


def select_and_ship(paths: SenderPaths) -> Selection:
    chosen = selection_now(paths)
    assert ship(paths, chosen) == list(chosen.new)
    return chosen


def test_sync_file_manager_scenario(fs: FakeFilesystem) -> None:
    """3 storage groups x 5 sealed files are new; 5 more per group are exactly the new
    ones once the first are synced; every third file deleted is exactly what is
    deleted."""
    paths = state()
    first = {name(g, i) for g in GROUPS for i in range(5)}
    assert {n.split("/")[0] for n in first} == set(DATA_ROOTS)
    for n in first:
        write(n)
    chosen = selection_now(paths)
    assert chosen == Selection(new=tuple(sorted(first)), deleted=())
    ship(paths, chosen)
    assert read_file_set(paths.last_local_files) == first
    assert selection_now(paths) == Selection((), ())

    second = {name(g, i) for g in GROUPS for i in range(5, 10)}
    for n in second:
        write(n)
    chosen = selection_now(paths)
    assert chosen == Selection(new=tuple(sorted(second)), deleted=())
    ship(paths, chosen)
    assert read_file_set(paths.last_local_files) == first | second

    gone = {n for g in GROUPS for n in sorted(name(g, i) for i in range(10))[::3]}
    assert len(gone) == 12
    for n in gone:
        delete(n)
    chosen = selection_now(paths)
    assert chosen == Selection(new=(), deleted=tuple(sorted(gone)))
    ship(paths, chosen)
    assert read_file_set(paths.last_local_files) == (first | second) - gone
    assert selection_now(paths) == Selection((), ())


def test_unsealed_files_wait_for_their_resource(fs: FakeFilesystem) -> None:
    paths = state()
    sealed, open_ = name(GROUPS[0], 0), name(GROUPS[0], 1)
    write(sealed)
    write(open_, sealed=False)
    assert select_and_ship(paths) == Selection(new=(sealed,), deleted=())
    assert selection_now(paths) == Selection((), ())
    put(sidecar(open_, ".resource"))
    assert select_and_ship(paths) == Selection(new=(open_,), deleted=())
    late = name(GROUPS[1], 2)
    write(late, sealed=False)
    delete(late)  # never sealed, never synced: its removal tells the receiver nothing
    assert selection_now(paths) == Selection((), ())


def test_a_synced_file_that_loses_its_resource_is_not_deleted(fs: FakeFilesystem) -> None:
    paths = state()
    n = name(GROUPS[2], 4)
    write(n)
    select_and_ship(paths)
    sidecar(n, ".resource").unlink()
    assert selection_now(paths) == Selection((), ())
    assert read_file_set(paths.last_local_files) == {n}


def test_files_being_merged_are_neither_new_nor_deleted(fs: FakeFilesystem) -> None:
    paths = state()
    synced, merging = name(GROUPS[0], 0), name(GROUPS[0], 1)
    write(synced)
    select_and_ship(paths)
    write(merging)
    for n in (synced, merging):
        put(sidecar(n, ".merge"), b"")
    assert selection_now(paths) == Selection((), ())
    sidecar(merging, ".merge").unlink()
    assert selection_now(paths) == Selection(new=(merging,), deleted=())
    sidecar(synced, ".merge").unlink()  # the merge left it as it was
    assert selection_now(paths) == Selection(new=(merging,), deleted=())


def test_a_synced_file_that_gains_mods_ships_again_and_is_never_deleted(fs: FakeFilesystem) -> None:
    paths = state()
    n, other = name(GROUPS[1], 0), name(GROUPS[1], 1)
    write(n)
    write(other)
    select_and_ship(paths)
    append_mods(n, "DELETION,root.sg1.d1,100\n")
    assert select_and_ship(paths) == Selection(new=(n,), deleted=())
    assert set(shipped_mods.read_identities(paths.shipped_mods)) == {n}
    assert selection_now(paths) == Selection((), ())
    append_mods(n, "DELETION,root.sg1.d1,200\n")  # grows: ships once more
    assert select_and_ship(paths) == Selection(new=(n,), deleted=())
    delete(n)  # with its .mods
    assert select_and_ship(paths) == Selection(new=(), deleted=(n,))
    assert not paths.shipped_mods.exists()
    assert read_file_set(paths.last_local_files) == {other}


def test_links_and_hostile_names_are_rejected_never_selected(fs: FakeFilesystem) -> None:
    paths = state()
    real = name(GROUPS[0], 0)
    write(real)
    link = f"sequence/{GROUPS[0]}/0/link-0-0.tsfile"
    os.symlink(DATA / real, DATA / link)
    put(sidecar(link, ".resource"))
    behind_link = "sequence/elsewhere/1-1-0.tsfile"
    write(behind_link)  # reached by its own path only, never through the link
    os.symlink(DATA / "sequence" / "elsewhere", DATA / "sequence" / GROUPS[1])
    odd = "unsequence/root.sg0/0/back\\slash.tsfile"
    write(odd)
    rejected = dict(scan(DATA).rejected)
    assert rejected.keys() == {link, f"sequence/{GROUPS[1]}", odd}
    assert rejected[link] == rejected[f"sequence/{GROUPS[1]}"] == SYMLINK
    assert "backslash" in rejected[odd]
    assert select_and_ship(paths) == Selection(new=(behind_link, real), deleted=())
    assert selection_now(paths) == Selection((), ())


def test_a_vanished_data_root_deletes_everything_synced_under_it(fs: FakeFilesystem) -> None:
    paths = state()
    names = {name(g, i) for g in GROUPS for i in range(4)}
    for n in names:
        write(n)
    select_and_ship(paths)
    for n in names:
        if n.startswith("unsequence/"):
            delete(n)
    unseq = {n for n in names if n.startswith("unsequence/")}
    assert selection_now(paths) == Selection(new=(), deleted=tuple(sorted(unseq)))


def test_a_file_removed_after_its_snapshot_still_ships_then_is_deleted(
    fs: FakeFilesystem,
) -> None:
    """A merge removing a selected file mid-round cannot break the round: the snapshot's
    hard link keeps its bytes; the next round tells the receiver it is gone."""
    paths = state()
    n = name(GROUPS[0], 0)
    write(n)
    chosen = selection_now(paths)
    paths.folder.mkdir(parents=True)
    assert list(take_snapshot(DATA, paths.snapshot, chosen.new)) == [n]
    delete(n)
    assert (paths.snapshot / n).read_bytes() == f"data of {n}".encode()
    with SyncLog(paths.sync_log) as log:
        log.start()
        log.tsfile_start()
        log.tsfile(n)
    recover(paths)  # the round ended without "sync end": recovery's fold all the same
    assert read_file_set(paths.last_local_files) == {n}
    assert select_and_ship(paths) == Selection(new=(), deleted=(n,))
    assert not os.path.lexists(paths.snapshot)


# --- random file sets and operations against a model ---------------------------------

POOL = [name(GROUPS[i % 3], i) for i in range(6)]

# Weighted so that files get sealed, synced and changed again within a few operations.
KINDS = [
    *["add"] * 3,
    "add_open",
    "seal",
    "unseal",
    "merge",
    "unmerge",
    *["mods"] * 2,
    "unmods",
    *["delete"] * 4,
]
# How each file of the pool starts (as operations), then rounds of changes: a round
# runs after the start and after each batch.
START = {
    "absent": [],
    "open": ["add_open"],
    "sealed": ["add"],
    "sealed with mods": ["add", "mods"],
    "merging": ["add", "merge"],
}
STARTS = st.lists(st.sampled_from(sorted(START)), min_size=len(POOL), max_size=len(POOL))
ROUNDS = st.lists(
    st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(POOL)), min_size=1, max_size=6),
    min_size=1,
    max_size=4,
)


@dataclass
class Model:
    """What selection must do, as plain sets: the files as they are, what is synced,
    and which ``.mods`` version each synced file shipped with."""

    exists: set[str] = field(default_factory=set)
    resource: set[str] = field(default_factory=set)
    merge: set[str] = field(default_factory=set)
    mods: dict[str, int] = field(default_factory=dict)
    synced: set[str] = field(default_factory=set)
    shipped: dict[str, int] = field(default_factory=dict)
    versions: int = 0

    def selection(self) -> Selection:
        sealed = {n for n in self.exists if n in self.resource and n not in self.merge}
        changed = {
            n
            for n in sealed & self.synced
            if n in self.mods and self.shipped.get(n) != self.mods[n]
        }
        return Selection(
            new=tuple(sorted((sealed - self.synced) | changed)),
            deleted=tuple(sorted(self.synced - self.exists)),
        )

    def ship(self, chosen: Selection) -> None:
        self.synced = (self.synced - set(chosen.deleted)) | set(chosen.new)
        for n in chosen.new:
            if n in self.mods:
                self.shipped[n] = self.mods[n]
            else:
                self.shipped.pop(n, None)
        self.shipped = {n: v for n, v in self.shipped.items() if n in self.synced}


def apply(model: Model, op: str, n: str) -> None:
    """``op`` on the fake tree and on the model alike."""
    if op in ("add", "add_open") and n not in model.exists:
        put(DATA / n, f"data of {n}".encode())
        model.exists.add(n)
    if op == "add" or op == "seal":
        put(sidecar(n, ".resource"))
        model.resource.add(n)
    elif op == "unseal" and n in model.resource:
        sidecar(n, ".resource").unlink()
        model.resource.discard(n)
    elif op == "merge":
        put(sidecar(n, ".merge"), b"")
        model.merge.add(n)
    elif op == "unmerge" and n in model.merge:
        sidecar(n, ".merge").unlink()
        model.merge.discard(n)
    elif op == "mods":
        # Every version of a .mods is longer than all before it, so its identity
        # (size, mtime) differs even where the fake clock does not move.
        model.versions += 1
        line = f"DELETION,root.sg.d0,{model.versions:08d}\n"
        if n in model.mods:
            append_mods(n, line * (model.versions - model.mods[n]))
        else:
            put(sidecar(n, ".mods"), (line * model.versions).encode())
        model.mods[n] = model.versions
    elif op == "unmods" and n in model.mods:
        sidecar(n, ".mods").unlink()
        del model.mods[n]
    elif op == "delete":
        delete(n)
        model.exists.discard(n)
        model.resource.discard(n)
        model.merge.discard(n)
        model.mods.pop(n, None)


@settings(FAKEFS_SETTINGS, max_examples=15)
@given(starts=STARTS, rounds=ROUNDS)
def test_random_operations_select_what_the_model_selects(
    fs: FakeFilesystem, starts: list[str], rounds: list[list[tuple[str, str]]]
) -> None:
    fresh(fs, DATA)
    paths = state()
    model = Model()
    first = [(op, n) for n, start in zip(POOL, starts, strict=True) for op in START[start]]
    for ops in [first, *rounds]:
        for op, n in ops:
            apply(model, op, n)
        expect = model.selection()
        assert selection_now(paths, dry_run_too=False) == expect
        assert ship(paths, expect) == list(expect.new)
        model.ship(expect)
        assert read_file_set(paths.last_local_files) == model.synced
        assert set(shipped_mods.read_identities(paths.shipped_mods)) == set(model.shipped)
    assert selection_now(paths, dry_run_too=False) == model.selection()
