"""The loader is per sender (no Spark): one sender's trouble holds its own files only.

Discovery splits what it sees by sender: a file of one sender it cannot identify (a
folder squatted at its ``.mods``, a stat that fails, a folder that cannot be listed) is
that sender's :class:`~spark_loader.discovery.Trouble`, and every other sender's files
are listed as usual. The removals decision holds such a sender, and one whose folders
are gone without logged deletions: nothing of theirs is removed, and the run says
why, where it once stopped for every sender.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from config_helpers import loader_config_file
from spark_loader_helpers import SENDER_A, SENDER_B, Receiver, two_senders

from sealsync.config import load_loader_config
from spark_loader import lastrun, run_load
from spark_loader.discovery import Discovery, discover
from spark_loader.removals import MissingFolder, Verdict, decide
from spark_loader.report import LoadReport
from spark_loader.state import FileRecord, IngestState, save_state
from spark_loader.status import loader_status, render_loader


def _recorded(recv: Receiver) -> IngestState:
    """The state of a table holding every file listed now (rows 0: no partition needed)."""
    state = IngestState()
    for f in discover(recv.data_dirs).files:
        state.files[f.file_id] = FileRecord(
            f.sender, f.name, f.size, f.mtime_ns, 0, str(f.data_dir)
        )
    return state


def _of(state: IngestState, sender: str) -> list[str]:
    return sorted(fid for fid, r in state.files.items() if r.sender == sender)


def _squat(recv: Receiver, sender: str) -> Path:
    """A folder at the ``.mods`` path of the sender's first file, with a stray file
    under it, as an earlier receiver let a sender leave; the file it squats."""
    rel = sorted(rel for (s, rel) in recv.placed if s == sender)[0]
    path = recv.placed[(sender, rel)]
    folder = Path(f"{path}.mods") / sender
    folder.mkdir(parents=True)
    return path


def _decide(recv: Receiver, state: IngestState, found: Discovery, prune: bool = False) -> Verdict:
    return decide(state, {}, found.files, recv.data_dirs, prune, found.troubles)


# ---------------------------------------------------------------- discovery


def test_a_squatted_mods_path_is_its_senders_trouble_alone(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    squatted = _squat(recv, SENDER_B)

    found = discover(recv.data_dirs)

    assert {f.sender for f in found.files} == {SENDER_A, SENDER_B}
    assert sorted(f.path for f in found.files if f.sender == SENDER_A) == sorted(
        p for (s, _), p in recv.placed.items() if s == SENDER_A
    )
    assert squatted not in {f.path for f in found.files}
    assert [(t.sender, t.path, t.data_dir) for t in found.troubles] == [
        (SENDER_B, squatted, recv.data_dirs[0])
    ]
    assert found.troubles[0].reason == "cannot stat its .mods: not a regular file"
    assert found.skipped == {str(squatted): "cannot stat its .mods: not a regular file"}
    assert list(found.troubled) == [SENDER_B]
    assert str(squatted) in found.troubled[SENDER_B]
    by_sender = found.by_sender()
    assert list(by_sender) == sorted([SENDER_A, SENDER_B])
    assert len(by_sender[SENDER_A]) == 2 and len(by_sender[SENDER_B]) == 1


def test_a_sender_with_nothing_identifiable_still_has_its_place(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    for rel in sorted(rel for (s, rel) in recv.placed if s == SENDER_B):
        Path(f"{recv.placed[(SENDER_B, rel)]}.mods2").mkdir()

    found = discover(recv.data_dirs)

    assert {f.sender for f in found.files} == {SENDER_A}
    assert found.by_sender()[SENDER_B] == []
    assert {t.sender for t in found.troubles} == {SENDER_B} and len(found.troubles) == 2
    assert all(t.reason == "cannot stat its .mods2: not a regular file" for t in found.troubles)


@pytest.fixture
def unlistable(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[Path]]:
    """Folders ``os.scandir`` refuses (permission denied), whoever runs the test."""
    refused: set[Path] = set()
    real = os.scandir

    def scandir(path: str | os.PathLike[str]) -> object:
        if Path(os.fspath(path)) in refused:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    yield refused


def test_a_folder_that_cannot_be_listed_is_its_owners_trouble(
    tmp_path: Path, unlistable: set[Path]
) -> None:
    _, recv = two_senders(tmp_path)
    b_folder = next(p.parent for (s, _), p in recv.placed.items() if s == SENDER_B)
    unlistable.add(b_folder)

    found = discover(recv.data_dirs)

    assert {f.sender for f in found.files} == {SENDER_A}
    assert [(t.sender, t.path) for t in found.troubles] == [(SENDER_B, b_folder)]
    assert found.troubles[0].reason == "cannot list it: Permission denied"
    assert found.skipped == {}


def test_a_host_folder_that_cannot_be_listed_is_reported_holding_nobody(
    tmp_path: Path, unlistable: set[Path]
) -> None:
    _, recv = two_senders(tmp_path)
    a_path = next(p for (s, _), p in recv.placed.items() if s == SENDER_A)
    host = a_path.parent.parent  # the folder above the sender's
    unlistable.add(host)

    found = discover(recv.data_dirs)

    assert found.troubles == []
    assert found.skipped == {str(host): "cannot list it: Permission denied"}
    assert a_path not in {f.path for f in found.files}


def test_bad_names_and_duplicates_hold_nobody(tmp_path: Path) -> None:
    edge, _ = two_senders(tmp_path / "x")
    recv = Receiver(tmp_path, data_dirs=2)
    rel = sorted(edge.data_files())[0]
    recv.place(edge, rel, SENDER_A, data_dir=0)
    twin = recv.storage.target(recv.data_dirs[1], SENDER_A, rel)
    twin.parent.mkdir(parents=True)
    shutil.copy2(recv.placed[(SENDER_A, rel)], twin)
    odd = recv.data_dirs[0] / "sequence" / "g\x01" / SENDER_B / "f.tsfile"
    odd.parent.mkdir(parents=True)
    odd.write_bytes(b"a name no receiver writes")

    found = discover(recv.data_dirs)

    assert [f.sender for f in found.files] == [SENDER_A]
    assert sorted(found.skipped) == sorted([str(twin), str(odd)]) and found.troubles == []
    assert found.skipped[str(odd)].startswith("not a name the receiver writes")
    assert found.troubled == {} and list(found.by_sender()) == [SENDER_A]


# ---------------------------------------------------------------- the decision


def test_a_troubled_sender_is_held_and_the_others_decided(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    state = _recorded(recv)
    _squat(recv, SENDER_B)
    a_rels = sorted(rel for (s, rel) in recv.placed if s == SENDER_A)
    old_a = [fid for fid in _of(state, SENDER_A) if state.files[fid].name == a_rels[0]]
    os.utime(recv.placed[(SENDER_A, a_rels[0])], ns=(5, 5))  # A's file replaced
    found = discover(recv.data_dirs)

    for prune in (False, True):
        verdict = _decide(recv, state, found, prune)

        assert list(verdict.held) == [SENDER_B]
        assert "cannot stat its .mods: not a regular file" in verdict.held[SENDER_B]
        assert verdict.remove == old_a  # A goes on as usual
        assert verdict.kept == [] and verdict.pruned == 0
        assert verdict.waiting == _of(state, SENDER_B)  # every file of B, listed or not


def test_a_senders_folder_gone_holds_that_sender_only(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    state = _recorded(recv)
    b_paths = [p for (s, _), p in recv.placed.items() if s == SENDER_B]
    for path in b_paths:  # B's folders moved away by hand
        shutil.rmtree(path.parent, ignore_errors=True)
    a_rel = sorted(rel for (s, rel) in recv.placed if s == SENDER_A)[0]
    recv.remove(a_rel, SENDER_A)  # A deletes a file, logged
    found = discover(recv.data_dirs)

    verdict = _decide(recv, state, found)

    assert list(verdict.held) == [SENDER_B]
    why = verdict.held[SENDER_B]
    assert f"sender {SENDER_B} has no loaded files left in {recv.data_dirs[0]}" in why
    assert str(b_paths[0].parent) in why or str(b_paths[1].parent) in why
    assert "--prune-missing" in why
    assert verdict.remove == [fid for fid in _of(state, SENDER_A) if state.files[fid].name == a_rel]
    assert verdict.kept == [] and verdict.waiting == _of(state, SENDER_B)

    pruned = _decide(recv, state, found, prune=True)  # the operator's "really gone"
    assert pruned.held == {} and pruned.waiting == []
    assert sorted(pruned.remove) == sorted([*verdict.remove, *_of(state, SENDER_B)])


def test_a_data_dir_holding_only_a_troubled_senders_files_is_not_empty(tmp_path: Path) -> None:
    """Data dir 1 holds B's files, none identifiable, and one file of A's, removed by
    hand: no stop for an "empty" data dir; A (nothing left there) and B are held."""
    edge, one = two_senders(tmp_path / "one")
    recv = Receiver(tmp_path, data_dirs=2)
    a_rels = sorted(rel for (s, rel) in one.placed if s == SENDER_A)
    for sender, rel in sorted(one.placed):
        recv.place(edge, rel, sender, data_dir=0 if (sender, rel) == (SENDER_A, a_rels[0]) else 1)
    state = _recorded(recv)
    for rel in sorted(rel for (s, rel) in recv.placed if s == SENDER_B):
        Path(f"{recv.placed[(SENDER_B, rel)]}.mods").mkdir()
    recv.remove_by_hand(a_rels[1], SENDER_A)

    verdict = _decide(recv, state, discover(recv.data_dirs))

    assert list(verdict.held) == [SENDER_A, SENDER_B] and verdict.remove == []
    assert f"no loaded files left in {recv.data_dirs[1]}" in verdict.held[SENDER_A]
    assert "its listing is incomplete" in verdict.held[SENDER_B]
    shutil.rmtree(recv.data_dirs[1])  # the disk is gone: the host's trouble, a stop
    with pytest.raises(MissingFolder, match=f"data dir {recv.data_dirs[1]} is missing"):
        _decide(recv, state, discover(recv.data_dirs))


# ---------------------------------------------------------------- report, record, status


def test_a_held_sender_fails_the_report() -> None:
    report = LoadReport(ingested=3)
    assert report.ok
    report.hold(SENDER_B, "its folder is gone")
    report.hold(SENDER_B, "a second reason is not kept")

    assert not report.ok
    assert report.to_dict()["held"] == {SENDER_B: "its folder is gone"}
    assert report.summary().endswith("; the files of 1 senders wait")
    assert report.held_lines() == [f"the files of sender {SENDER_B} wait: its folder is gone"]


def test_a_run_holds_the_troubled_sender_and_status_names_it(tmp_path: Path) -> None:
    """No Spark: nothing new to ingest. B's file squatted: the run fails (exit 1 at
    the CLI), last_run.json and status name B and why; once the stray folder is gone,
    the next run is clean."""
    _, recv = two_senders(tmp_path)
    prom = tmp_path / "loader.prom"
    toml = loader_config_file(tmp_path / "l.toml", recv.config(tmp_path), metrics_textfile=prom)
    config = load_loader_config(toml)
    state = _recorded(recv)
    config.state_dir.mkdir()
    save_state(config.state_dir, state)
    squatted = _squat(recv, SENDER_B)

    report = run_load(config)

    assert not report.ok and (report.removed, report.unchanged) == (0, 2)  # A's two
    assert list(report.held) == [SENDER_B] and str(squatted) in report.held[SENDER_B]
    last = lastrun.read(config.state_dir)
    assert last is not None and last["outcome"] == "failed" and last["kind"] == "skipped_files"
    assert last["held"] == report.held
    assert f"the files of 1 senders wait ({SENDER_B})" in last["error"]
    doc = loader_status(config)
    assert doc["held"] == report.held
    assert doc["troubled"] == {SENDER_B: report.held[SENDER_B]}  # still there now
    lines = render_loader(doc)
    held = lines.index(
        "  held:         the files of 1 senders waited in the last run (nothing of theirs "
        "loaded or removed; the others loaded):"
    )
    assert lines[held + 1] == f"                {SENDER_B}: {report.held[SENDER_B]}"
    assert not any(line.startswith("  troubled:") for line in lines)  # said once
    assert "\nsealsync_loader_last_attempt_held_senders 1.0\n" in prom.read_text()

    shutil.rmtree(f"{squatted}.mods")  # the operator removes the stray folder
    assert loader_status(config)["troubled"] == {}
    again = run_load(config)  # B's file is the version already recorded: nothing to do
    assert again.ok and again.held == {} and lastrun.held(config.state_dir) == {}
    assert "\nsealsync_loader_last_attempt_held_senders 0.0\n" in prom.read_text()
