"""The receiver's umask (receiver/umask.py): added while it runs, the host's given back;
a real ``serve`` under umask 000: tests/security/test_startup.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from receiver import umask


def _current() -> int:
    found = os.umask(0o077)
    os.umask(found)
    return found


@pytest.fixture
def host_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_the_receivers_umask_is_added_while_held_and_the_hosts_given_back(host_umask: None) -> None:
    umask.tighten()
    assert _current() == 0o027
    umask.tighten()  # a second receiver in the same host
    umask.release()
    assert _current() == 0o027  # the first still runs
    umask.release()
    assert _current() == 0
    umask.release()  # one more than held: nothing to give back
    assert _current() == 0


def test_a_stricter_host_umask_is_kept(host_umask: None) -> None:
    os.umask(0o077)
    umask.tighten()
    assert _current() == 0o077
    umask.release()
    assert _current() == 0o077
