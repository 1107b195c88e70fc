"""The sender's recovery over every prefix of a ``sync.log`` and every mix of state files.

The model is IoTDB's old sync tool's nine steps (docs/design.md §3.2,
``sender/recover/recovery.py``) stated as plain set arithmetic: ``current_local_files.txt`` without
``last_local_files.txt`` is the cleaned-up set; otherwise a stale ``current`` is dropped
and ``sync.log`` (its complete lines, names counting only inside their section)
turns ``last`` into ``(last - acknowledged deleted) | verified new``; afterwards only
``last_local_files.txt`` (and ``shipped_mods.txt`` while it has entries) is left.
``shipped_mods.txt`` follows the same log: verified names take their
``snapshot_mods.txt`` identity, names no longer synced lose theirs. The dry run
(``sender/plan.py``) must predict each result before recovery runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from fakefs_helpers import (
    FAKEFS_SETTINGS,
    as_bytes,
    complete_lines,
    data_names,
    fresh,
    line_cuts,
    put,
    record_cuts,
    sections,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import FakeFilesystem
from state_helpers import sync_log_lines

from sealsync.names import data_name_problem
from sender.manage import shipped_mods
from sender.manage.layout import SenderPaths
from sender.manage.shipped_mods import ModsId, read_identities
from sender.manage.state import read_file_set
from sender.plan import effective_last
from sender.recover import recovery
from sender.recover.recovery import recover, recover_all

DATA = Path("/edge/data")
PATHS = SenderPaths(DATA, "192.168.130.16", 5555)

SYNCED = [f"sequence/root.sg{g}/0/{i}-{i}-0.tsfile" for g in (1, 2) for i in range(3)]
GONE = [SYNCED[1]]
RESHIPPED = SYNCED[2]  # synced before, ships again this round: its .mods changed
NEW = ["sequence/root.sg1/0/10-10-0.tsfile", RESHIPPED, "unsequence/root.sg1/0/12-12-0.parquet"]
STALE = {"sequence/root.sg9/0/99-99-0.tsfile"}
SHIPPED = {SYNCED[0]: (10, 1000), GONE[0]: (5, 500), RESHIPPED: (7, 700)}
SNAPSHOT_MODS = {NEW[0]: (3, 300), RESHIPPED: (12, 1200)}
LOG = as_bytes(sync_log_lines(GONE, NEW))

LAST = "last_local_files.txt"
SHIPPED_FILE = "shipped_mods.txt"


@dataclass(frozen=True)
class Crashed:
    """What a crash left in the state folder."""

    last: set[str] | None
    current: set[str] | None
    snapshot: bool
    log: bytes | None
    shipped: Mapping[str, ModsId]
    snapshot_mods: Mapping[str, ModsId] | None


def expected(state: Crashed) -> tuple[set[str] | None, dict[str, ModsId]]:
    """The model: the synced set (None: no ``last_local_files.txt``) and the ``.mods``
    identities recovery must leave behind."""
    if state.current is not None and state.last is None:  # steps 1, 2 -> 7, 8
        return set(state.current), dict(state.shipped)
    if state.log is None:  # 3 -> 8
        return (None if state.last is None else set(state.last)), dict(state.shipped)
    deleted, new = sections(complete_lines(state.log))  # 4
    deleted = [n for n in deleted if data_name_problem(n) is None]
    new = [n for n in new if data_name_problem(n) is None]
    synced = (set(state.last or ()) - set(deleted)) | set(new)
    snap = state.snapshot_mods or {}
    shipped = {n: i for n, i in state.shipped.items() if n in synced and n not in new}
    shipped.update({n: snap[n] for n in new if n in snap and n in synced})
    return synced, shipped


def lay_out(state: Crashed, paths: SenderPaths = PATHS) -> None:
    """Put ``state`` on disk, in the documented formats (docs/formats.md; the writers
    are held to them in test_fakefs_state_files)."""
    paths.folder.mkdir(parents=True, exist_ok=True)
    if state.last is not None:
        paths.last_local_files.write_bytes(as_bytes(sorted(state.last)))
    if state.current is not None:
        paths.current_local_files.write_bytes(as_bytes(sorted(state.current)))
    if state.snapshot:
        put(paths.snapshot / NEW[0], b"data")
    if state.log is not None:
        paths.sync_log.write_bytes(state.log)
    if state.shipped:
        paths.shipped_mods.write_bytes(identities(state.shipped))
    if state.snapshot_mods is not None:
        paths.snapshot_mods.write_bytes(identities(state.snapshot_mods))


def identities(entries: Mapping[str, ModsId]) -> bytes:
    return as_bytes(sorted(f"{n}\t{size}\t{mtime}" for n, (size, mtime) in entries.items()))


def snapshot_of(paths: SenderPaths) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(paths.folder.iterdir())}


def assert_recovered(state: Crashed, paths: SenderPaths = PATHS) -> None:
    synced, shipped = expected(state)
    assert read_file_set(paths.last_local_files) == (synced or set())
    assert read_identities(paths.shipped_mods) == shipped
    left = {LAST} if synced is not None else set()
    left |= {SHIPPED_FILE} if shipped else set()
    assert set(os.listdir(paths.folder)) == left


def check(state: Crashed, paths: SenderPaths = PATHS) -> None:
    """The dry run's prediction, recovery, and a second recovery that changes nothing."""
    synced, shipped = expected(state)
    predicted, note = effective_last(paths)
    assert predicted == (synced or set())
    assert shipped_mods.effective_shipped(paths, predicted) == shipped
    assert (note is None) == (state.current is None and state.log is None and not state.snapshot)
    recover(paths)
    assert_recovered(state, paths)
    after = snapshot_of(paths)
    recover(paths)
    assert snapshot_of(paths) == after


def crashed_round(cut: bytes | None, *, last: bool, current: bool, snapshot: bool) -> Crashed:
    """A round that crashed with ``cut`` of its log written, in a state folder where
    ``last``/``current``/``snapshot/`` exist as told (``current`` alone: the clean-up
    wrote it from this log and removed ``last``; beside ``last``: stale)."""
    base = set(SYNCED) if last else set()
    shipped = SHIPPED if last else {}
    if current and not last:
        # The clean-up folded the log (and the .mods identities) before writing current.
        done = expected(Crashed(set(SYNCED), None, snapshot, cut, SHIPPED, SNAPSHOT_MODS))
        return Crashed(None, done[0], snapshot, cut, done[1], SNAPSHOT_MODS)
    return Crashed(
        base if last else None,
        STALE if current else None,
        snapshot,
        cut,
        shipped,
        SNAPSHOT_MODS if cut is not None or snapshot else None,
    )


# No log, the log cut at every line boundary, and (while the round is in flight: a
# snapshot and no current_local_files.txt) every line torn just before its newline;
# the random test below cuts anywhere in any state.
BOUNDARIES = [LOG[:c] for c in line_cuts(LOG) if c == 0 or LOG[c - 1] == ord("\n")]
TORN = [LOG[:c] for c in record_cuts(LOG) if LOG[:c] not in BOUNDARIES]


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "no-snapshot"])
@pytest.mark.parametrize("current", [True, False], ids=["current", "no-current"])
@pytest.mark.parametrize("last", [True, False], ids=["last", "no-last"])
def test_every_log_prefix_with_every_mix_of_state_files(
    fs: FakeFilesystem, last: bool, current: bool, snapshot: bool
) -> None:
    assert len(BOUNDARIES) == len(TORN) + 1 == LOG.count(b"\n") + 1
    in_flight = snapshot and not current
    for cut in [None, *BOUNDARIES, *(TORN if in_flight else [])]:
        fresh(fs, DATA)
        state = crashed_round(cut, last=last, current=current, snapshot=snapshot)
        lay_out(state)
        check(state)


def test_the_model_on_the_whole_log() -> None:
    """The model itself, on the complete log of a round that followed a synced one."""
    synced, shipped = expected(crashed_round(LOG, last=True, current=False, snapshot=True))
    assert synced == (set(SYNCED) - set(GONE)) | set(NEW)
    assert shipped == {SYNCED[0]: (10, 1000), **SNAPSHOT_MODS}


def test_a_leftover_snapshot_mods_without_log_goes_and_changes_nothing(
    fs: FakeFilesystem,
) -> None:
    """Step 8 removes ``snapshot_mods.txt`` after ``sync.log``: a crash in between."""
    fresh(fs, DATA)
    state = Crashed(set(SYNCED), None, False, None, SHIPPED, SNAPSHOT_MODS)
    lay_out(state)
    check(state)
    assert read_identities(PATHS.shipped_mods) == SHIPPED


def test_no_state_folder_means_nothing_to_do(fs: FakeFilesystem) -> None:
    fresh(fs, DATA)
    recover(PATHS)
    recover_all([DATA, Path("/edge/missing")], PATHS.host, PATHS.port)
    assert os.listdir(DATA) == []


# --- a crash inside recovery, after any of its durable steps, then reruns ------------


class Crash(Exception):
    """The process died at a crash point."""


class CrashAt:
    """Replaces recovery's crash points: raises at the ``nth`` point reached."""

    def __init__(self) -> None:
        self.nth = 0
        self.reached: list[str] = []

    def __call__(self, point: str) -> None:
        self.reached.append(point)
        if len(self.reached) == self.nth:
            raise Crash(point)

    def run(self, nth: int, paths: SenderPaths = PATHS) -> bool:
        """One recovery that dies at its ``nth`` crash point (never if 0); True if it did."""
        self.nth, self.reached = nth, []
        try:
            recover(paths)
        except Crash:
            return True
        return False


def crash_and_rerun(
    fs: FakeFilesystem, crash: CrashAt, state: Crashed, second: list[int] | None = None
) -> set[str]:
    """Recovery of ``state`` dying at each of its crash points in turn, then a rerun
    dying at each of ``second`` (a clean one if None), then a clean run; the points."""
    fresh(fs, DATA)
    lay_out(state)
    crash.run(0)
    points = crash.reached
    for first in range(1, len(points) + 1):
        for nth in second or [0]:
            fresh(fs, DATA)
            lay_out(state)
            assert crash.run(first)
            crash.run(nth)
            crash.run(0)
            assert_recovered(state)
    return set(points)


def test_a_crash_after_any_step_of_the_clean_up(
    fs: FakeFilesystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clean-up of a round (its log empty, halfway or whole), dying after each durable
    step, reruns to the same result."""
    crash = CrashAt()
    monkeypatch.setattr(recovery, "crash_point", crash)
    seen = set()
    cuts = [b"", LOG[: LOG.index(NEW[1].encode())], LOG]  # empty, halfway, whole
    for cut in cuts:
        state = crashed_round(cut, last=True, current=False, snapshot=True)
        seen |= crash_and_rerun(fs, crash, state)
    assert seen == {
        "sender.cleanup.current_written",
        "sender.cleanup.last_removed",
        "sender.cleanup.renamed",
        "sender.cleanup.snapshot_removed",
        "sender.cleanup.synclog_removed",
    }


@pytest.mark.parametrize(("last", "current"), [(True, False), (True, True), (False, True)])
def test_a_crash_in_recovery_and_again_in_its_rerun(
    fs: FakeFilesystem, monkeypatch: pytest.MonkeyPatch, last: bool, current: bool
) -> None:
    crash = CrashAt()
    monkeypatch.setattr(recovery, "crash_point", crash)
    state = crashed_round(LOG, last=last, current=current, snapshot=True)
    seen = crash_and_rerun(fs, crash, state, second=[0, 1])
    first_step = {
        (True, True): "sender.recover.current_dropped",
        (False, True): "sender.recover.current_to_last",
    }.get((last, current), "sender.cleanup.current_written")
    assert first_step in seen


# --- random sets, logs and state files -------------------------------------------------

NAMES = st.lists(data_names(), max_size=4)
MODS_ID = st.tuples(st.integers(0, 99), st.integers(0, 10**12))
JUNK = st.sampled_from(["sequence/../x.tsfile", "unsequence/a/b.txt", "sync bogus", ""])


@st.composite
def crashed_states(draw: st.DrawFn) -> Crashed:
    """Any state a crash can leave: a round in flight (``last`` or a first round), a
    clean-up that wrote ``current`` (a stale one beside ``last``), or one that had
    removed ``last`` (``current`` then holds the folded log, as do the identities)."""
    last = draw(st.none() | st.sets(data_names(), max_size=5))
    deleted = draw(NAMES) + draw(st.lists(st.sampled_from(sorted(last or {"x"})), max_size=2))
    new = draw(NAMES)
    lines = sync_log_lines([n for n in deleted if data_name_problem(n) is None], new)
    for _ in range(draw(st.integers(0, 2))):  # damage recovery must shrug off
        lines.insert(draw(st.integers(0, len(lines))), draw(JUNK | data_names()))
    log = as_bytes(lines)
    cut = draw(st.none() | st.integers(0, len(log)))
    snap = draw(st.none() | st.dictionaries(st.sampled_from(new or ["sequence/x.tsfile"]), MODS_ID))
    state = Crashed(
        last,
        None,
        draw(st.booleans()),
        None if cut is None else log[:cut],
        draw(st.dictionaries(data_names(), MODS_ID, max_size=4)),
        snap,
    )
    phase = draw(st.sampled_from(["in flight", "current beside last", "last removed"]))
    if phase == "current beside last" and last is not None:
        return replace(state, current=draw(st.sets(data_names(), max_size=3)))
    if phase == "last removed":
        synced, shipped = expected(state)
        return replace(state, last=None, current=synced or set(), shipped=shipped)
    return state


@settings(FAKEFS_SETTINGS, max_examples=25)
@given(state=crashed_states())
def test_random_crashed_states_recover_to_the_model(fs: FakeFilesystem, state: Crashed) -> None:
    fresh(fs, DATA)
    lay_out(state)
    check(state)
