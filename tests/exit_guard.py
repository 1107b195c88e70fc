"""A pytest plugin that keeps a finished run from holding its caller after the summary.

CI reads pytest's output until the pipe closes, then waits for the process. Two things
can keep either open after the last test has passed, and turn a green run into a
timeout whose log ends at the summary line and names no cause:

- a process a test started that kept pytest's own stdout or stderr: one started while
  the output was not captured (from a background thread between two tests, say) and
  never ended by its test. At session finish the guard names each such process
  started since pytest began and kills it.
- a thread that never ends or an ``atexit`` handler that never returns, both of which
  the interpreter waits for on its way out. After the last hook, the guard gives the
  exit ``SEALSYNC_TEST_EXIT_GRACE`` seconds; still there then, it writes every
  thread's stack and the child processes to stderr and ends the process with the
  run's own exit status.

Both write what they found, so the log of such a run says which test to fix.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from proc_helpers import clip, command_line, stat_fields

GRACE_ENV = "SEALSYNC_TEST_EXIT_GRACE"
DEFAULT_GRACE = 120.0

_status: list[int] = [0]


def _started(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of its stat)."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        fields = stat_fields(pid)
        if fields is None:
            break
        pid = int(fields[1])
    return pids


def _output_ids() -> set[tuple[int, int]]:
    """Pipes and sockets pytest writes to: only those keep a reader waiting."""
    ids = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            ids.add((st.st_dev, st.st_ino))
    return ids


def output_holders() -> list[int]:
    """Processes started after this one that hold its stdout or stderr pipe, its own
    ancestors (the shell and CI that started it) aside."""
    ours, mine = _output_ids(), _started(os.getpid())
    if not ours or mine is None or not Path("/proc").is_dir():
        return []
    skip = _ancestors()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        pid = int(entry.name)
        began = _started(pid)
        if began is None or began < mine:
            continue
        for fd in (1, 2):
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in ours:
                found.append(pid)
                break
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _status[0] = int(exitstatus)
    for pid in output_holders():
        command = clip(command_line(pid), 120)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        sys.stderr.write(
            f"\nexit guard: process {pid} (`{command}`) was started during the tests and "
            "still holds pytest's output; killed it. The test that started it must end it.\n"
        )
    sys.stderr.flush()


def _children() -> list[str]:
    me = str(os.getpid())
    rows = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat_fields(int(entry.name))
            if fields is not None and fields[1] == me:
                rows.append(f"  {entry.name}: {clip(command_line(int(entry.name)), 120)}")
    return rows


def _watch(grace: float) -> None:
    time.sleep(grace)
    err = sys.__stderr__
    if err is None:
        os._exit(_status[0])
    err.write(
        f"\nexit guard: pytest's process has not exited {grace:.0f}s after the run ended; "
        "what holds it (a thread that never ends, or an atexit handler) is in the stacks "
        f"below. Ending it with the run's own status {_status[0]}.\n"
    )
    err.flush()
    faulthandler.dump_traceback(file=err, all_threads=True)
    children = _children()
    err.write("child processes:\n" + ("\n".join(children) if children else "  none") + "\n")
    err.flush()
    os._exit(_status[0])


_grace: list[float] = [DEFAULT_GRACE]


def pytest_configure(config: pytest.Config) -> None:
    """Read the grace at the start, so a mistyped value stops the run before any test
    with one line instead of a traceback at its end."""
    value = os.environ.get(GRACE_ENV)
    if value is None:
        return
    try:
        grace = float(value)
    except ValueError:
        grace = -1.0
    if not grace >= 0:
        raise pytest.UsageError(
            f"{GRACE_ENV}={value!r} is not a number of seconds: set it to one (e.g. 120), "
            "or unset it"
        )
    _grace[0] = grace


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    threading.Thread(target=_watch, args=(_grace[0],), name="exit-guard", daemon=True).start()
