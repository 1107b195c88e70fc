"""A two-sender deployment for crash tests: rounds with deletions and new files, a
bounded rerun until the crashed round converges, and the end-to-end equality check.

Sender ``a`` is the one crashed and changed; sender ``b`` holds files under the very
same relative names as ``a``'s first files (its own devices), so a delete from ``a``
that reached another sender's copy would show as a changed ``b``.
"""

from __future__ import annotations

import time
from pathlib import Path, PurePosixPath

from deploy_helpers import Deployment, Sender, env_with, make_deployment, populate

from sealsync.crashpoints import ENV_NAMES

RERUNS = 4
"""Runs of ``send`` allowed to converge after a crash (a sender killed a moment ago may
still hold its receiver-side round for a few milliseconds: that run is told *busy*)."""


def crash_env(point: str, trace: Path | None = None) -> dict[str, str]:
    extra = {"SEALSYNC_CRASH_AT": point}
    if trace is not None:
        extra["SEALSYNC_CRASH_TRACE"] = str(trace)
    return env_with(**extra)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in env_with().items() if k not in ENV_NAMES}


class Site:
    """One deployment shared by many crash cases; every case leaves it converged."""

    def __init__(self, root: Path, *, chunk_size: int | None = None, data_dirs: int = 1) -> None:
        self.dep: Deployment = make_deployment(root, senders=2, data_dirs=data_dirs)
        self.a, self.b = self.dep.senders
        # A receiver killed at a crash point stays down until the case restarts it after
        # the send has ended: a second of reconnects, not reconnect_time's default minute.
        for sender in self.dep.senders:
            keys = "reconnect_time = 1.0\n"
            if chunk_size is not None and sender is self.a:  # multi-chunk streams, small files
                keys += f"chunk_size = {chunk_size}\n"
            text = sender.config.read_text()
            sender.config.write_text(text.replace("max_retries = 3\n", f"max_retries = 3\n{keys}"))
        self.batch = 0
        self.healthy = False

    # ---------------------------------------------------------------- set-up

    def first_round(self) -> None:
        """``a``'s first files, ``b``'s namesakes, both shipped clean."""
        names = populate(self.a.edge, groups=2, files=3, devices=2, rows=20, unsequence=1)
        for rel in names:
            path = PurePosixPath(rel)
            self.b.edge.write_file(
                path.parts[1],
                int(path.parts[2]),
                path.name,
                devices=[f"root.b.{path.parts[1].replace('.', '_')}"],
                rows_per_device=7,
                unsequence=path.parts[0] == "unsequence",
            )
        self.dep.start_receiver(env=clean_env())
        for sender in (self.a, self.b):
            result = sender.send(env=clean_env())
            assert result.returncode == 0, result.stderr
        self.b_hashes = self.b.sealed_hashes()
        self.check()
        self.healthy = True

    def change(self, deletions: int = 2, new: int = 3) -> None:
        """A round's worth of change on ``a``: its oldest files deleted, new ones written."""
        self.batch += 1
        sealed = self.a.edge.sealed_files()
        namesakes = [rel for rel in sealed if rel in self.b_hashes]  # b holds these names too
        for rel in (namesakes[:1] + [r for r in sealed if r not in namesakes])[:deletions]:
            self.a.edge.delete(rel)
        populate(
            self.a.edge,
            groups=1,
            files=new - 1,
            devices=2,
            rows=20,
            unsequence=1,
            prefix=f"root.n{self.batch}_",
        )

    # ---------------------------------------------------------------- convergence

    def converge(self, sender: Sender | None = None) -> int:
        """Rerun ``send`` (bounded) until it exits 0; the number of runs it took."""
        sender = sender or self.a
        last = None
        for run in range(1, RERUNS + 1):
            last = sender.send(env=clean_env())
            if last.returncode == 0:
                return run
            assert last.returncode == 1, (last.returncode, last.stderr)
            time.sleep(0.3)
        raise AssertionError(f"no convergence after {RERUNS} runs: {last.stderr if last else ''}")

    def check(self) -> None:
        """The receiver holds exactly each sender's sealed set, and no round state is left."""
        loaded, sealed = self.dep.loaded_hashes(self.a), self.a.sealed_hashes()
        assert loaded == sealed, _difference(loaded, sealed)
        loaded, sealed = self.dep.loaded_hashes(self.b), self.b.sealed_hashes()
        assert loaded == sealed == self.b_hashes, _difference(loaded, self.b_hashes)
        left = self.dep.round_state_left()
        assert left == [], left

    def close(self) -> None:
        self.dep.stop_receiver()


def _difference(loaded: dict[str, str], sealed: dict[str, str]) -> str:
    missing = sorted(set(sealed) - set(loaded))
    extra = sorted(set(loaded) - set(sealed))
    changed = sorted(n for n in set(loaded) & set(sealed) if loaded[n] != sealed[n])
    return f"missing {missing}, extra {extra}, different {changed}"
