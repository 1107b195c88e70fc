"""Rows leave the table only on evidence (no Spark): the receiver's deletion log and
the loader's decision over a real receiver folder (spark_loader.removals)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from receiver_load_helpers import UUID_A, inspect, loaded_path, make_env
from spark_loader_helpers import SENDER_A, SENDER_B, Receiver, two_senders
from test_receiver_loader import run_round

from receiver.layout import SenderFolder, sender_folders
from receiver.load.loader import FolderLoader
from sealsync import deletions
from spark_loader.discovery import discover
from spark_loader.removals import MissingFolder, Verdict, decide
from spark_loader.state import FileRecord, IngestState
from spark_loader.table import Table


def test_the_receiver_logs_each_deleted_version_before_removing_it(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    names = [f"sequence/g/0/{1000 + i}-{i}-0.tsfile" for i in range(4)]
    with FolderLoader(folder, storage, owners, inspect) as loader:
        assert run_round(folder, loader, new=names) is True
        versions = {}
        for name in names[:3]:
            st = os.stat(loaded_path(data_dir, UUID_A, name))
            versions[name] = (st.st_size, st.st_mtime_ns)
        assert run_round(folder, loader, deleted=names[:3]) is True

    assert deletions.read([data_dir]) == {
        deletions.Deleted(UUID_A, n, *versions[n]) for n in names[:3]
    }
    log = data_dir / "sync-receiver" / f"deleted_{UUID_A}.log"
    assert log.read_text().splitlines()[0] == f"delete {versions[names[0]][0]} " + (
        f"{versions[names[0]][1]} {names[0]}"
    )
    # The log is no sender folder: recovery and status list only the real one.
    assert sender_folders([data_dir]) == [folder]
    assert {f.name for f in discover([data_dir]).files} == {names[3]}


def test_a_deletion_of_a_file_already_gone_logs_nothing_new(tmp_path: Path) -> None:
    recv = Receiver(tmp_path)
    edge, _ = two_senders(tmp_path / "x")
    rel = next(iter(edge.data_files()))
    path = recv.place(edge, rel)
    size, mtime = path.stat().st_size, path.stat().st_mtime_ns
    recv.remove(rel)
    deletions.record_file(recv.data_dirs[0], SENDER_A, rel, path)  # a replay: already gone
    assert deletions.read(recv.data_dirs) == {deletions.Deleted(SENDER_A, rel, size, mtime)}


# ---------------------------------------------------------------- the decision


def _table_state(recv: Receiver) -> tuple[IngestState, dict]:
    """The state a run that ingested everything listed now would have recorded
    (every file with rows, no partitions needed: rows == 0 makes them present)."""
    state = IngestState()
    for f in discover(recv.data_dirs).files:
        state.files[f.file_id] = FileRecord(
            f.sender, f.name, f.size, f.mtime_ns, 0, str(f.data_dir)
        )
    return state, {}


def _decide(recv: Receiver, state: IngestState, prune: bool = False) -> Verdict:
    return decide(state, {}, discover(recv.data_dirs).files, recv.data_dirs, prune)


def _ids(state: IngestState, *keys: tuple[str, str]) -> list[str]:
    return sorted(fid for fid, r in state.files.items() if (r.sender, r.name) in keys)


def test_an_empty_data_dir_removes_nothing_and_names_it(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    state, _ = _table_state(recv)
    for entry in recv.data_dirs[0].iterdir():  # an unmounted disk: the folder is empty
        shutil.rmtree(entry)

    with pytest.raises(MissingFolder) as e:
        _decide(recv, state)

    assert f"{recv.data_dirs[0]} hold no loaded files" in str(e.value)
    assert "nothing removed" in str(e.value) and "--prune-missing" in str(e.value)
    assert e.value.exit_code == 1
    assert sorted(_decide(recv, state, prune=True).remove) == sorted(state.files)


def test_a_missing_or_empty_data_dir_among_several_is_named(tmp_path: Path) -> None:
    edge, _ = two_senders(tmp_path / "edge-only")
    recv = Receiver(tmp_path, data_dirs=2)
    rels = sorted(edge.data_files())
    for i, rel in enumerate(rels):
        recv.place(edge, rel, SENDER_A, data_dir=i % 2)
    state, _ = _table_state(recv)
    shutil.rmtree(recv.data_dirs[1])

    with pytest.raises(MissingFolder, match=f"data dir {recv.data_dirs[1]} is missing"):
        _decide(recv, state)
    recv.data_dirs[1].mkdir()
    with pytest.raises(MissingFolder, match=f"data dir {recv.data_dirs[1]} holds no loaded"):
        _decide(recv, state)


def test_a_data_dir_dropped_from_the_config_is_named(tmp_path: Path) -> None:
    edge, _ = two_senders(tmp_path / "edge-only")
    recv = Receiver(tmp_path, data_dirs=2)
    for i, rel in enumerate(sorted(edge.data_files())):
        recv.place(edge, rel, SENDER_A, data_dir=i % 2)
    state, _ = _table_state(recv)
    listed = discover(recv.data_dirs[:1]).files

    with pytest.raises(MissingFolder, match=f"{recv.data_dirs[1]} is no longer in receiver"):
        decide(state, {}, listed, recv.data_dirs[:1])


def test_a_senders_folders_gone_empty_are_named(tmp_path: Path) -> None:
    """That sender is held (its files wait, none of its rows leaves), not the run."""
    _, recv = two_senders(tmp_path)
    state, _ = _table_state(recv)
    b_files = [p for (s, _), p in recv.placed.items() if s == SENDER_B]
    for path in b_files:  # sender B's folders moved away by hand
        shutil.rmtree(path.parent, ignore_errors=True)

    verdict = _decide(recv, state)

    why = verdict.held[SENDER_B]
    assert list(verdict.held) == [SENDER_B] and verdict.remove == verdict.kept == []
    assert f"sender {SENDER_B} has no loaded files left in {recv.data_dirs[0]}" in why
    assert str(b_files[0].parent) in why or str(b_files[1].parent) in why
    assert verdict.waiting == sorted(f for f, r in state.files.items() if r.sender == SENDER_B)


def test_one_file_missing_without_evidence_is_kept_with_evidence_removed(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    state, _ = _table_state(recv)
    a_files = sorted(rel for (s, rel) in recv.placed if s == SENDER_A)
    b_files = sorted(rel for (s, rel) in recv.placed if s == SENDER_B)
    recv.remove_by_hand(a_files[0], SENDER_A)
    recv.remove(b_files[0], SENDER_B)  # logged by the receiver

    verdict = _decide(recv, state)

    assert verdict.kept == _ids(state, (SENDER_A, a_files[0]))
    assert verdict.remove == _ids(state, (SENDER_B, b_files[0]))
    assert verdict.pruned == 0
    pruned = _decide(recv, state, prune=True)
    assert sorted(pruned.remove) == _ids(state, (SENDER_A, a_files[0]), (SENDER_B, b_files[0]))
    assert pruned.pruned == 1


def test_a_logged_deletion_of_another_version_is_no_evidence(tmp_path: Path) -> None:
    edge, recv = two_senders(tmp_path)
    rel = sorted(rel for (s, rel) in recv.placed if s == SENDER_A)[0]
    recv.remove(rel, SENDER_A)  # an old version deleted (logged)...
    recv.place(edge, rel, SENDER_A)  # ...the name shipped again...
    os.utime(recv.placed[(SENDER_A, rel)], ns=(1, 1))  # ...as another version
    state, _ = _table_state(recv)
    recv.remove_by_hand(rel, SENDER_A)  # and that one vanishes without a word

    assert _decide(recv, state).kept == _ids(state, (SENDER_A, rel))


def test_a_replaced_file_is_its_own_evidence(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    state, _ = _table_state(recv)
    rel = sorted(rel for (s, rel) in recv.placed if s == SENDER_A)[0]
    old = _ids(state, (SENDER_A, rel))
    os.utime(recv.placed[(SENDER_A, rel)], ns=(5, 5))  # a new version, same name

    verdict = _decide(recv, state)

    assert verdict.remove == old and verdict.kept == []


def test_an_unrecorded_partition_needs_a_logged_deletion_of_its_name(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    table = Table(tmp_path / "table")
    rels = sorted(rel for (s, rel) in recv.placed if s == SENDER_A)
    parts = {}
    for rel in rels:
        part = table.partition(SENDER_A, rel, f"f{len(parts):032x}")
        Path(part.path).mkdir(parents=True)
        parts[part.file_id] = part
    recv.remove_by_hand(rels[0], SENDER_A)  # gone without a word: kept
    # rels[1] is listed under another id than its stray partition: replaced, removed.
    verdict = decide(IngestState(), parts, discover(recv.data_dirs).files, recv.data_dirs)

    assert verdict.kept == [next(iter(parts))]
    assert verdict.remove == [list(parts)[1]]
    deletions.record(recv.data_dirs[0], SENDER_A, [(rels[0], 1, 2)])  # any version of its name
    verdict = decide(IngestState(), parts, discover(recv.data_dirs).files, recv.data_dirs)
    assert sorted(verdict.remove) == sorted(parts) and verdict.kept == []


def test_a_full_disk_does_not_block_deletions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No room for the log line: the file is deleted all the same (it frees space), and
    the loader, finding no evidence, keeps its rows and reports them."""
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    names = ["sequence/g/0/1000-0-0.tsfile", "sequence/g/0/1001-1-0.tsfile"]
    with FolderLoader(folder, storage, owners, inspect) as loader:
        assert run_round(folder, loader, new=names) is True

        def full(*args: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(deletions, "record", full)  # its append finds no room
        assert run_round(folder, loader, deleted=names[:1]) is True

    assert storage.list(UUID_A) == {names[1]}
    assert deletions.read([data_dir]) == set()
    assert "no space to log the deletion of sequence/g/0/1000-0-0.tsfile" in caplog.text
