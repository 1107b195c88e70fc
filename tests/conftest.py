"""Puts ``tests/`` on ``sys.path`` for every test, including those in sub-folders, so
shared helpers (``deploy_helpers``, ``config_helpers``...) import the same way; and
holds the fixtures more than one test module needs."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

if TYPE_CHECKING:
    from deploy_helpers import Deployment


@pytest.fixture
def trusting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust folder listings and identities at once.

    Everything a test writes is milliseconds old, so the scan cache and the idle mark
    would otherwise never rely on it and their short ways would go untested.
    """
    from sender.manage import scan_cache

    monkeypatch.setattr(scan_cache, "RACY_NS", -(10**18))


@pytest.fixture
def start_deployment(tmp_path: Path) -> Iterator[Callable[..., Deployment]]:
    """Builds a deployment under ``tmp_path/site`` with its ``sealsync serve`` running;
    the receiver is stopped after the test, whatever it did."""
    from deploy_helpers import make_deployment

    started: list[Deployment] = []

    def start(senders: int = 1, data_dirs: int = 1) -> Deployment:
        dep = make_deployment(tmp_path / "site", senders=senders, data_dirs=data_dirs)
        started.append(dep)
        dep.start_receiver()
        return dep

    yield start
    for dep in reversed(started):
        dep.stop_receiver()
