"""The previous release's sender against this receiver (docs/protocol.md, "Versions
and upgrades"): a receiver serves a sender one protocol version older, so a fleet's
edges are upgraded after its receiver, one by one.

The previous release is this repository's last commit before the one that made
``PROTOCOL_VERSION`` what it is now, taken from the git history with ``git archive``
(its Python packages only) into pytest's cache, once per commit; its ``sealsync
send`` runs with ``PYTHONPATH`` pointing there, so that it imports that code and not
the installed one, against a real ``sealsync serve`` of this tree.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from deploy_helpers import make_deployment, populate

from sealsync.protocol import PROTOCOL_VERSION

pytestmark = pytest.mark.slow  # real receivers and senders, two releases

REPO = Path(__file__).resolve().parent.parent
SPEC = "sealsync/protocol/spec.py"
PACKAGES = ("sealsync", "sender", "receiver")
WHICH = "import sealsync.protocol as p; print(p.PROTOCOL_VERSION, p.__file__)"


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()


def previous_release() -> str:
    """The commit before the one that set this protocol version."""
    changed = git("log", "--format=%H", "-S", f"PROTOCOL_VERSION = {PROTOCOL_VERSION}", "--", SPEC)
    assert changed, f"no commit in the history sets PROTOCOL_VERSION = {PROTOCOL_VERSION}"
    return git("rev-parse", f"{changed.split()[-1]}^")


@pytest.fixture(scope="module")
def old_tree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's packages, extracted once per commit into the cache."""
    commit = previous_release()
    cache = getattr(request.config, "cache", None)
    base = cache.mkdir("previous-release") if cache is not None else tmp_path_factory.mktemp("old")
    tree = base / commit
    if not (tree / ".complete").exists():
        shutil.rmtree(tree, ignore_errors=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit, *PACKAGES],
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        (tree / ".complete").write_text(commit + "\n")
    return tree


def test_the_previous_releases_sender_ships_to_this_receiver(
    tmp_path: Path, old_tree: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(old_tree)}
    env.pop("PYTHONSAFEPATH", None)
    which = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sealsync.protocol as p; print(p.PROTOCOL_VERSION, p.__file__)",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=old_tree,
        timeout=60,
        check=True,
    ).stdout.split()
    assert which == [
        str(PROTOCOL_VERSION - 1),
        str(old_tree / "sealsync" / "protocol" / "__init__.py"),
    ]

    dep = make_deployment(tmp_path / "site")
    sender = dep.senders[0]
    populate(sender.edge, groups=2, files=2)
    dep.start_receiver()
    try:
        old = subprocess.run(
            [sys.executable, "-m", "sealsync", "send", "--json", "--config", str(sender.config)],
            capture_output=True,
            text=True,
            env=env,
            cwd=old_tree,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert old.returncode == 0, old.stderr
        assert json.loads(old.stdout)["ok"] is True
        assert dep.loaded_hashes(sender) == sender.sealed_hashes()  # every file verified

        # this release's sender takes over the state the old one left: in step, quiet
        populate(sender.edge, groups=1, files=1, prefix="root.new")
        new = sender.send()
        assert new.returncode == 0 and new.stderr == "", new.stderr
        assert dep.loaded_hashes(sender) == sender.sealed_hashes()
    finally:
        assert dep.stop_receiver() == 0
