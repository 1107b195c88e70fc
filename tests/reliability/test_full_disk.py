"""A full disk on the receiver (issue 7, item 3).

The receiver's data dir is a real 4 MiB tmpfs (we run as root), filled up with a
filler file; ``sealsync send`` then ships files that do not fit. Where ``mount`` is
not permitted (a container without CAP_SYS_ADMIN), the same test runs against an
in-process ``ReceiverService`` whose ``os.write`` fails with ENOSPC once the files
under the data dir would exceed the same capacity — the receiver's writers all go
through ``os.write`` — so the test runs and asserts everywhere, never skips.

Two ways to be full:

* some room left, but not enough for the files: each file gets the verdict
  *refused: receiver disk full*, its temporaries are removed, nothing partial is
  loaded, the round itself finishes cleanly and ``sealsync send`` exits 1 naming
  each file;
* no room at all: the receiver cannot even log the round start and ends the session
  with one clear error, ``sealsync send`` exits 1 with one line.

Either way, once space is back, the next run ships exactly what was missing.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deploy_helpers import Deployment, make_deployment, mark_storage, populate
from reliability.figures import record

from receiver.incoming import TEMP_PREFIX
from receiver.service import ReceiverService
from sealsync.config import load_receiver_config

pytestmark = pytest.mark.slow  # sealsync serve and send as processes

CAPACITY = 4 << 20
ROOM = 64 << 10
"""Left free in the "some room" case: far less than a big file (~650 KiB)."""
BIG_ROWS = 20000


def _used(top: Path) -> int:
    total = 0
    for here, _dirs, files in os.walk(top):
        for name in files:
            try:
                total += os.lstat(os.path.join(here, name)).st_size
            except FileNotFoundError:
                pass
    return total


class Disk:
    """The receiver's data dir, and a way to fill it and free it again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler.bin"

    def fill(self, leave: int) -> None:
        raise NotImplementedError

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


class Tmpfs(Disk):
    """A real file system of CAPACITY bytes mounted on the data dir."""

    mode = "tmpfs"

    def fill(self, leave: int) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            chunk = b"\0" * (64 << 10)
            while True:  # write until the file system says no, then give back `leave`
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
            size = os.fstat(fd).st_size
            os.ftruncate(fd, max(size - leave, 0))
        finally:
            os.close(fd)


class InjectedEnospc(Disk):
    """ENOSPC from ``os.write`` for files under the data dir once it holds CAPACITY bytes.

    Space is what the files under the data dir take now, so a deleted temporary gives
    its room back, as on a real file system.
    """

    mode = "injected"

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(path)
        self.capacity: int | None = None
        real_write = os.write
        top = str(path.resolve()) + os.sep

        def write(fd: int, data: bytes | memoryview) -> int:
            if self.capacity is not None:
                try:
                    target = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    target = ""
                if target.startswith(top):
                    room = self.capacity - _used(self.path)
                    if room <= 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    return real_write(fd, memoryview(data)[:room])
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)

    def fill(self, leave: int) -> None:
        self.capacity = _used(self.path) + leave

    def free(self) -> None:
        self.capacity = None


def try_mount_tmpfs(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={CAPACITY}", "tmpfs", str(path)],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def unmount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


class Site:
    def __init__(self, dep: Deployment, disk: Disk, stop: Callable[[], None]) -> None:
        self.dep = dep
        self.disk = disk
        self.stop = stop
        self.sender = dep.senders[0]

    def converged(self) -> bool:
        return (
            self.dep.loaded_hashes(self.sender) == self.sender.sealed_hashes()
            and self.dep.round_state_left() == []
        )

    def leftovers(self) -> list[str]:
        """Temporaries (incoming files, atomic writes) and staged files in the data dir."""
        found = []
        for here, _dirs, files in os.walk(self.dep.receiver_data):
            for name in files:
                path = Path(here) / name
                rel = path.relative_to(self.dep.receiver_data).parts
                staged = rel[0] == "sync-receiver" and len(rel) > 3 and rel[2] == "data"
                temporary = name.startswith(TEMP_PREFIX) or name.endswith(".tmp")
                if staged or temporary:
                    found.append(str(path))
        return found


@pytest.fixture(params=["tmpfs", "injected"])
def site(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Site]:
    dep = make_deployment(tmp_path / "site", senders=1)
    mounted = request.param == "tmpfs" and try_mount_tmpfs(dep.receiver_data)
    try:
        if mounted:
            disk: Disk = Tmpfs(dep.receiver_data)
            mark_storage(dep.receiver_config)  # a new disk: what `serve --init` does
            dep.start_receiver()
            stop: Callable[[], None] = dep.stop_receiver
        else:  # also where mounting is not permitted: the test still runs
            disk = InjectedEnospc(dep.receiver_data, monkeypatch)
            service = ReceiverService(load_receiver_config(dep.receiver_config)).start()
            stop = service.stop
        s = Site(dep, disk, stop)
        try:
            populate(s.sender.edge, groups=1, files=2, prefix="root.before")
            first = s.sender.send()
            assert first.returncode == 0, first.stderr
            assert s.converged()
            yield s
        finally:
            stop()
    finally:
        if mounted:
            unmount(dep.receiver_data)


def big_files(site: Site, n: int) -> list[str]:
    edge = site.sender.edge
    return [
        edge.write_file(
            "root.big",
            0,
            devices=["root.big.d0", "root.big.d1"],
            rows_per_device=BIG_ROWS,
            start_ms=(i + 1) * 10**9,
        )
        for i in range(n)
    ]


def test_files_that_do_not_fit_are_refused_then_shipped_once_space_is_back(site: Site) -> None:
    before = site.dep.loaded_hashes(site.sender)
    names = big_files(site, 2)
    site.disk.fill(leave=ROOM)

    result = site.sender.send()

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert sorted(result.stderr.splitlines()) == [
        f"sealsync: dc: refused {name}: refused: receiver disk full: No space left on device"
        for name in sorted(names)
    ]
    assert site.dep.loaded_hashes(site.sender) == before  # nothing partial loaded
    assert site.leftovers() == []  # temporaries removed, nothing staged
    assert site.dep.round_state_left() == []  # the round itself ended cleanly

    site.disk.free()
    result = site.sender.send()
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert site.converged()
    assert sorted(set(site.dep.loaded_hashes(site.sender)) - set(before)) == sorted(names)
    record("full disk", cases=1, clean=1, tmpfs=int(site.disk.mode == "tmpfs"))


def test_no_room_even_for_the_round_log_is_one_clear_error(site: Site) -> None:
    before = site.dep.loaded_hashes(site.sender)
    names = big_files(site, 1) + populate(site.sender.edge, groups=1, files=2, prefix="root.s")
    site.disk.fill(leave=0)

    result = site.sender.send()

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "sealsync: error: receiver: receiver disk full: No space left on device"
    ]
    assert site.dep.loaded_hashes(site.sender) == before
    assert site.leftovers() == []

    site.disk.free()
    result = site.sender.send()
    assert result.returncode == 0, result.stderr
    assert site.converged()
    assert sorted(set(site.dep.loaded_hashes(site.sender)) - set(before)) == sorted(names)
    record("full disk", cases=1, clean=1, tmpfs=int(site.disk.mode == "tmpfs"))
