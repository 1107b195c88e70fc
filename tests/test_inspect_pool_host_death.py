"""A host killed by SIGKILL takes its inspect workers with it (found by the kill -9 tests).

Pool workers wait on a queue whose write end they hold themselves, so they never see
the host die; they kept the fork server and the resource tracker alive too, and each
``kill -9`` of ``sealsync serve`` left four processes (~200 MB) behind for good.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_helpers import state

pytestmark = pytest.mark.slow  # a host process killed with its pool workers

HOST = """
import json, multiprocessing, os, signal, sys
from pathlib import Path
from multiprocessing import forkserver, resource_tracker
from sealsync.errors import FormatError
from receiver.inspect_pool import InspectPool

if __name__ == "__main__":
    pool = InspectPool(workers=2)
    try:
        pool.inspect(Path(sys.argv[1]))
    except FormatError:
        pass
    pids = list(pool._pool._processes)
    pids.append(forkserver._forkserver._forkserver_pid)
    pids.append(resource_tracker._resource_tracker._pid)
    print(json.dumps([p for p in pids if p]), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return state(pid) in (None, "Z")  # a zombie has exited, not yet reaped


def test_workers_fork_server_and_tracker_exit_when_the_host_is_killed(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.tsfile"
    garbage.write_bytes(b"not a tsfile")
    script = tmp_path / "host.py"
    script.write_text(HOST)
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:  # not pipes: the children
        result = subprocess.run(  # inherit them, and a pipe would wait for them to exit
            [sys.executable, str(script), str(garbage)],
            stdout=stdout,
            stderr=stderr,
            timeout=60,
            cwd=tmp_path,
        )
    assert result.returncode == -9, err.read_text()
    pids = json.loads(out.read_text())
    assert len(pids) >= 3  # at least one worker, the fork server, the resource tracker
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if not _gone(p)]
    for pid in left:  # do not leak them into the rest of the run
        os.kill(pid, 9)
    assert left == []
