"""Every named crash point, on both sides, with a real SIGKILL (issue 4 item 5).

For each point declared in :mod:`sealsync.crashpoints`: a round with deletions and
new files runs with ``SEALSYNC_CRASH_AT=<point>`` on the side that owns the point,
which dies there by SIGKILL (return code -9, checked); the crashed side is restarted,
``send`` is rerun (bounded) until it exits 0, and then the receiver holds exactly
each sender's sealed set by content hash, the other sender's files (same relative
names, other devices) are untouched, and no round state is left on either side.

Points only recovery reaches are crashed *during* that recovery: a first crash at a
point that leaves the state the recovery branch handles, then the recovery itself
dies at the point, then a clean rerun.

One deployment per module serves every case (each case leaves it converged; a
failed case makes the next one build a fresh deployment). Sender A uses 1 KiB
chunks so that its small files stream in several chunks (``sender.file.mid_chunk``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability.crash_site import Site, clean_env, crash_env
from reliability.figures import record

from sealsync.crashpoints import ENV_TRACE, RECEIVER_POINTS, RECOVERY_POINTS, SENDER_POINTS

pytestmark = pytest.mark.slow  # sealsync serve and send as processes

RECOVERY_SETUP = {
    # current written, last still there: recovery drops current and redoes 4-8
    "sender.recover.current_dropped": "sender.cleanup.current_written",
    # current written, last already gone: recovery renames current to last
    "sender.recover.current_to_last": "sender.cleanup.last_removed",
    # files logged in sync.log, never handed to the loader: recovery replays them
    "receiver.recover.replayed": "receiver.synclog.tsfile",
}
"""Recovery-only point -> the crash point that leaves the state leading to it."""
assert set(RECOVERY_SETUP) == RECOVERY_POINTS

SENDER_CASES = sorted(SENDER_POINTS)
RECEIVER_CASES = sorted(RECEIVER_POINTS)


class Sites:
    """The module's shared site, rebuilt when a case left it in an unknown state."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.site: Site | None = None

    def get(self) -> Site:
        if self.site is None or not self.site.healthy:
            if self.site is not None:
                self.site.close()
            self.site = Site(self.factory.mktemp("crash") / "site", chunk_size=1024)
            self.site.first_round()
        self.site.healthy = False  # until the case using it has converged
        return self.site

    def close(self) -> None:
        if self.site is not None:
            self.site.close()


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sites]:
    holder = Sites(tmp_path_factory)
    yield holder
    holder.close()


def _killed(result: subprocess.CompletedProcess[str], point: str) -> None:
    assert result.returncode == -9, (point, result.returncode, result.stderr[-2000:])


def _trace(path: Path) -> set[str]:
    return set(path.read_text().split()) if path.exists() else set()


def test_every_declared_point_is_reached_by_a_clean_round(sites: Sites, tmp_path: Path) -> None:
    """The registry is not aspirational: a clean round passes every point but the
    recovery-only ones (which the cases below reach by crashing first)."""
    site = sites.get()
    dep = site.dep
    dep.stop_receiver()
    receiver_trace, sender_trace = tmp_path / "receiver.trace", tmp_path / "sender.trace"
    dep.start_receiver(env=clean_env() | {ENV_TRACE: str(receiver_trace)})
    site.change()
    result = site.a.send(env=clean_env() | {ENV_TRACE: str(sender_trace)})
    assert result.returncode == 0, result.stderr
    dep.stop_receiver()
    dep.start_receiver(env=clean_env())
    site.check()
    assert _trace(sender_trace) == SENDER_POINTS - RECOVERY_POINTS
    assert _trace(receiver_trace) == RECEIVER_POINTS - RECOVERY_POINTS
    site.healthy = True


@pytest.mark.parametrize("point", SENDER_CASES)
def test_sender_dies_at(sites: Sites, point: str) -> None:
    site = sites.get()
    site.change()
    setup = RECOVERY_SETUP.get(point)
    if setup is not None:
        _killed(site.a.send(env=crash_env(setup)), setup)
    _killed(site.a.send(env=crash_env(point)), point)
    site.converge()
    site.check()
    record("crash points", exercised=1, survived=1, sender=1, side="sender", point=point)
    site.healthy = True


@pytest.mark.parametrize("point", RECEIVER_CASES)
def test_receiver_dies_at(sites: Sites, point: str) -> None:
    site = sites.get()
    dep = site.dep
    dep.stop_receiver()
    site.change()
    setup = RECOVERY_SETUP.get(point)
    dep.start_receiver(env=crash_env(setup or point))
    result = site.a.send(env=clean_env())
    assert dep.proc is not None
    assert dep.proc.wait(30) == -9, (point, dep.log())
    dep.proc = None
    assert result.returncode == 1, (point, result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    if setup is not None:  # the restarted receiver dies recovering, before it listens
        dep.start_receiver(env=crash_env(point), wait=False)
        assert dep.proc is not None
        assert dep.proc.wait(30) == -9, (point, dep.log())
        dep.proc = None
    dep.start_receiver(env=clean_env())
    site.converge()
    site.check()
    record("crash points", exercised=1, survived=1, receiver=1, side="receiver", point=point)
    site.healthy = True
