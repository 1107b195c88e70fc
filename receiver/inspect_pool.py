"""Reading untrusted data files in worker processes (docs/design.md §4.4).

A received file is parsed by native code (the TsFile reader, Arrow's Parquet
reader); a malformed file that crashes or hangs it must cost a worker, never the
host server the receiver runs in. So ``formats.inspect`` (the service uses
``formats.verify``) runs in a process pool.

Workers are started by :mod:`.worker_context` (a fork server, importing the readers
once). As with any such pool, the host's main module must be importable without side
effects (the ``if __name__ == "__main__":`` idiom): workers import it.

Every check is bounded, whatever the file: a worker's address space may grow by
:data:`MEMORY_BUDGET` past what it holds when it starts (``RLIMIT_AS``; over it a
check gets MemoryError and its file is refused), and each file's check gets a CPU
budget that grows with the file's size (:func:`cpu_budget`): past it the check is
interrupted and the file refused, and a reader stuck in native code past it and a
grace is ended by the kernel (``ITIMER_PROF``, whose signal ends the process). Workers
are handed out to the senders waiting, one sender at a time in rotation, and a task
holds at most :data:`TASK_BUDGET` seconds of budgets: one sender's files never queue
another's behind all of theirs. A check that does not finish in ``timeout`` (a
worker stuck without using CPU) refuses its files without checking them again.

A worker that cannot start at all (a broken installation, a native library that
fails to load) is the receiver's fault, never the file's: before a crash is blamed on
a file, a worker is started on an empty input; if that one dies too, the check is
:class:`InspectUnavailable` (the file is answered "retry later", the cause is logged
once as an error, and the check is not tried again for ``RECHECK_AFTER`` seconds).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import multiprocessing
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from receiver import worker_context
from sealsync.errors import FormatError
from sealsync.printable import single_line

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")

_R = TypeVar("_R")

DEFAULT_TIMEOUT = 300.0
"""Seconds a task may take, wall clock: the bound for a worker stuck without using CPU
(the CPU budgets bound the rest)."""
MEMORY_BUDGET = 1 << 30
"""Bytes of address space a worker may add to what it holds when it starts: far more
than any accepted file's check needs (the format readers bound what they hold; a
TsFile's metadata walk stays under a few hundred MiB at its caps)."""
CPU_BASE = 1.0
CPU_RATE = 4 << 20
CPU_MAX = 120.0
"""A file's check may use ``CPU_BASE`` seconds of CPU plus one per ``CPU_RATE`` bytes of
the file, up to ``CPU_MAX``: several times what the densest files the formats allow
take, and past what their caps let a walk cost."""
CPU_GRACE = 2.0
"""Seconds of CPU past its budget after which a check that cannot be interrupted (a
native reader's loop) ends its worker."""
TASK_BUDGET = 16.0
"""The most CPU budget one task (the files one worker checks in one go) may hold: how
long another sender's files can wait for a worker, at most, once it is their turn."""
RECHECK_AFTER = 30.0
"""Seconds after a failed worker start before workers are tried again."""

_NO_START = (BrokenProcessPool, OSError, EOFError)
"""What starting a worker raises when it cannot be started: a dead pool, a failed
fork, a fork server that died at its imports (EOF on its socket)."""


class InspectUnavailable(FormatError):
    """The format check cannot run: the receiver's worker processes do not start.

    The receiver's own fault, never the file's. It travels where a FormatError does
    (a batch's per-file results), so that the session can tell it apart and answer
    the file "retry later" instead of refusing it as invalid.
    """


def _inspect_in_worker(path: str) -> FileInfo:
    """Runs in the worker: any reader failure becomes a picklable FormatError."""
    from sealsync import formats

    inspect = formats.inspect  # outside the try: a missing reader is our bug, not the file's
    return _guarded(inspect, path)


DELETION_SUFFIXES = (".mods", ".mods2")


def verify_in_worker(path: str) -> FileInfo:
    """``formats.verify`` in the worker: what the receiver checks of a received file.

    The metadata check of docs/design.md §1.3, not ``inspect``'s decode of every page,
    which is orders of magnitude slower (docs/performance.md). A path ending in
    ``.mods`` or ``.mods2`` is a file's deletions: read whole with their parser (its
    bounds included), so the loader never meets one that does not read.
    """
    from sealsync import formats

    if path.endswith(DELETION_SUFFIXES):
        return _guarded(_deletions, path)
    verify = formats.verify  # outside the try: a missing reader is our bug, not the file's
    return _guarded(verify, path)


def _deletions(path: Path) -> FileInfo:
    """A deletion file read as the loader reads it: no devices, its entries as rows."""
    from sealsync.formats import FileInfo, mods, mods2

    read = mods2.read if path.name.endswith(".mods2") else mods.read
    return FileInfo((), len(read(path)))


def _guarded(read: Callable[[Path], FileInfo], path: str) -> FileInfo:
    """Any reader failure becomes a picklable FormatError."""
    try:
        return read(Path(path))
    except FormatError:
        raise
    except MemoryError:
        raise FormatError(
            f"{Path(path).name}: its check needed more memory than a check may use "
            f"({_memory >> 20} MiB)"
        ) from None
    except Exception as exc:  # a reader bug on hostile input is still "not a valid file"
        raise FormatError(f"{Path(path).name}: unreadable: {type(exc).__name__}: {exc}") from None


def cpu_budget(size: int, base: float = CPU_BASE) -> float:
    """Seconds of CPU the check of a file of ``size`` bytes may use (see :data:`CPU_MAX`);
    ``base`` in place of :data:`CPU_BASE`."""
    return min(base + max(size, 0) / CPU_RATE, CPU_MAX)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class OverBudget(FormatError):
    """A check used its file's CPU budget (raised in the worker by SIGXCPU)."""


_in_worker = False
"""Set in worker processes: only there are the CPU budgets armed (their signals would
end any other process)."""
_memory = MEMORY_BUDGET
_cpu_base = CPU_BASE
_cpu_limits = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
"""This worker's RLIMIT_CPU as it started: what each check's budget is set within."""
_mark = -1
"""A file this worker writes the path it is checking to (its pid's, in its pool's
folder): a worker the kernel ends past a budget cannot say which file it was at."""
"""This worker's memory budget (its pool's), for what its errors say."""
_checking: tuple[str, float] = ("", 0.0)
"""The file being checked in this worker, and its budget: what SIGXCPU's error names."""


def _over_budget(signum: int, frame: object) -> None:
    name, budget = _checking
    raise OverBudget(
        f"{name}: its check used more than {budget:g} s of CPU, the most a file of its "
        f"size may take ({_cpu_base:g} s and one more per {CPU_RATE >> 20} MiB, at most "
        f"{CPU_MAX:g} s)"
    )


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _budgeted(target: Callable[[str], _R], path: str) -> _R:
    """``target(path)`` within the file's CPU budget, in a worker: RLIMIT_CPU's soft
    limit raises SIGXCPU at the budget (:class:`OverBudget`, the file refused), and
    ``ITIMER_PROF`` ends the worker :data:`CPU_GRACE` seconds later if the check could
    not be interrupted. Elsewhere ``target(path)`` as it is."""
    global _checking
    if not _in_worker:
        return target(path)
    budget = cpu_budget(_size(path), _cpu_base)
    soft, hard = _cpu_limits
    limit = math.ceil(_cpu_used() + budget)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    _checking = (os.path.basename(path), budget)
    _set_mark(os.fsencode(path))
    resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
    signal.setitimer(signal.ITIMER_PROF, budget + CPU_GRACE)
    try:
        return target(path)
    except MemoryError:  # over the worker's RLIMIT_AS
        raise FormatError(
            f"{Path(path).name}: its check needed more memory than a check may use "
            f"({_memory >> 20} MiB)"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        _set_mark(b"")


def _set_mark(path: bytes) -> None:
    """The path being checked, ended by a NUL (an empty one: none)."""
    if _mark >= 0:
        os.pwrite(_mark, path + b"\0", 0)


def _inspect_one(target: Callable[[str], FileInfo], path: str) -> FileInfo:
    """Runs in the worker: ``target`` for one path, within its budget."""
    return _budgeted(target, path)


def _inspect_each(target: Callable[[str], FileInfo], paths: list[str]) -> list[Any]:
    """Runs in the worker: ``target`` for each path within its budget, a FormatError
    kept as its result."""
    out: list[Any] = []
    for path in paths:
        try:
            out.append(_budgeted(target, path))
        except FormatError as exc:
            out.append(exc)
    return out


def _warm_up() -> None:
    """Runs in a new worker: pay the format readers' import before the first file."""
    import importlib

    from sealsync import formats

    for module in formats.MODULES:
        importlib.import_module(module)


HOST_CHECK_INTERVAL = 1.0
"""Seconds between a worker's checks that the host process is still alive."""


def _host_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else: not our host, but be safe
        return True
    try:  # a killed host not yet reaped by its parent is a zombie: gone all the same
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def _vm_size() -> int:
    """Bytes of address space this process holds now (0 where /proc cannot tell)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def _worker_start(host: int, memory_budget: int, cpu_base: float, marks: str) -> None:
    """Runs in each new worker: follow the host (:func:`_exit_with_host`), then bound
    what a check may take: address space (``RLIMIT_AS``, ``memory_budget`` past what
    the worker holds now; 0: no bound), one thread for pyarrow, and the CPU budgets
    (``cpu_base``: :data:`CPU_BASE` or a pool's own) and their signals; the file in
    ``marks`` named by this worker's pid says which file it checks."""
    global _in_worker, _memory, _cpu_base, _mark, _cpu_limits
    _memory, _cpu_base = memory_budget, cpu_base
    _cpu_limits = resource.getrlimit(resource.RLIMIT_CPU)
    if marks:
        try:
            _mark = os.open(os.path.join(marks, str(os.getpid())), os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # the pool is closing (its folder gone): no check comes
            _mark = -1
    _exit_with_host(host)
    try:
        import pyarrow

        pyarrow.set_cpu_count(1)  # its thread pools reserve address space per thread
        pyarrow.set_io_thread_count(1)
    except ImportError:  # a worker of a test target that needs none
        pass
    held = _vm_size()
    if memory_budget > 0 and held > 0:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = held + memory_budget
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.signal(signal.SIGXCPU, _over_budget)
    signal.signal(signal.SIGPROF, signal.SIG_DFL)  # the kernel ends the worker
    _in_worker = True


def _exit_with_host(host: int) -> None:
    """Runs in each new worker: exit once the host process is gone.

    Pool workers never notice a host killed by SIGKILL (they wait on a queue whose
    write end they hold themselves), and they keep the fork server and the resource
    tracker alive: a receiver killed -9 would leave four processes behind for good.

    Ctrl-C at a terminal and systemd's stop signal reach every process of the group,
    workers included; a worker would die with a KeyboardInterrupt traceback, or
    mid-check. Stopping is the host's to do (it shuts the pool down), so workers
    ignore both.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def watch() -> None:
        while _host_alive(host):
            time.sleep(HOST_CHECK_INTERVAL)
        os._exit(0)

    threading.Thread(target=watch, name="sealsync-host-watch", daemon=True).start()


def _start_failure(target: Callable[[str], Any]) -> str:
    """Why a worker dies as it starts, in one line: what a worker imports, done in a
    process of its own started the same way (same interpreter, environment, working
    directory and ``sys.path``), whose error is captured rather than lost on stderr."""
    modules = ["receiver.inspect_pool", "sealsync.formats", target.__module__]
    code = "\n".join(
        [
            "import sys",
            f"for name in {list(worker_context.PRELOAD)!r}:",
            "    try:",
            "        __import__(name)",
            "    except ImportError:",
            "        pass",
            f"sys.path[:] = {sys.path!r}",
            f"import {', '.join(dict.fromkeys(modules))}",
        ]
    )
    try:
        probe = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=DEFAULT_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot start a Python process: {exc}"
    lines = [line for line in probe.stderr.splitlines() if line.strip()]
    if probe.returncode != 0 and lines:
        return single_line(lines[-1])[:300]
    return "a worker process exited as it started (its error is on the receiver's stderr)"


def _new_pool(
    workers: int, memory_budget: int = MEMORY_BUDGET, cpu_base: float = CPU_BASE, marks: str = ""
) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=worker_context.context(),
        initializer=_worker_start,
        initargs=(os.getpid(), memory_budget, cpu_base, marks),
    )


KILL_GRACE = 0.5
"""Seconds an idle worker has to exit on its own when its pool is ended at once."""


def _end(pool: ProcessPoolExecutor, kill: bool) -> None:
    """Shut ``pool`` down without waiting; ``kill``: its workers too, those idle given
    :data:`KILL_GRACE` to take the shutdown and exit (a worker killed while it waits
    for a task dies holding the task queue's lock, and the process's exit then warns
    of leaked semaphores), the others killed."""
    # ``_processes`` is private but the only handle on the workers.
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    if not kill:
        return
    deadline = time.monotonic() + KILL_GRACE
    for proc in procs:
        try:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():  # a hung reader never returns: shutdown alone leaves it
                proc.kill()
        except Exception:  # already gone
            pass


def run_bounded(
    fn: Callable[[str], _R], paths: Sequence[str], timeout: float = DEFAULT_TIMEOUT
) -> list[_R | FormatError]:
    """``fn(path)`` for each path, one at a time, in a worker process bounded as the
    receiver's are (memory, a CPU budget per file, ``timeout``): what ``sealsync
    inspect`` runs. Per path its result, or the FormatError that says why there is none
    (``fn``'s own, or: over a bound, crashed its worker). ``fn`` must be importable by
    the worker (a module-level function)."""
    marks = tempfile.mkdtemp(prefix="sealsync-checks-")
    pool: ProcessPoolExecutor | None = None
    out: list[_R | FormatError] = []
    try:
        for path in paths:
            name = Path(path).name
            if pool is None:
                pool = _new_pool(1, marks=marks)
            try:
                out.append(pool.submit(_budgeted, fn, path).result(timeout=timeout))
            except FormatError as exc:
                out.append(exc)
            except BrokenProcessPool:
                ended = _ended_past_budget(pool, marks)
                _end(pool, kill=False)
                pool = None
                if path in ended:
                    out.append(FormatError(f"{name}: its check was ended past its CPU budget"))
                else:
                    out.append(FormatError(f"{name}: the file crashed the format reader"))
            except FutureTimeout:
                _end(pool, kill=True)
                pool = None
                out.append(
                    FormatError(f"{name}: the format reader did not finish in {timeout:g} s")
                )
            except _NO_START:
                pool = None
                out.append(InspectUnavailable(_unavailable_text(_start_failure(fn))))
    finally:
        if pool is not None:
            _end(pool, kill=len(out) < len(paths))  # interrupted: do not wait for its check
        shutil.rmtree(marks, ignore_errors=True)
    return out


REAP_WAIT = 1.0
"""Seconds to wait for a pool's dead worker's exit status: a spawned worker's pool
learns of a death when the worker's pipes close, which the kernel does a moment
before the status can be collected (a fork-server worker's comes with the news,
:mod:`.worker_context`), and without the status the file whose check the kernel ended
would be checked a second time."""


def _reap(procs: Iterable[multiprocessing.process.BaseProcess]) -> None:
    """Wait up to :data:`REAP_WAIT` for each of ``procs`` that has no exit status yet
    (a live one costs the wait; this runs only after a worker died)."""
    deadline = time.monotonic() + REAP_WAIT
    for proc in procs:
        while proc.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.01)


def _ended_past_budget(pool: ProcessPoolExecutor, marks: str) -> set[str]:
    """The files ``pool``'s workers were checking when the kernel ended them past their
    CPU budget (SIGPROF): those are refused without a second check."""
    found: set[str] = set()
    # ``_processes`` is private but the only handle on the workers (see _discard).
    procs = list((getattr(pool, "_processes", None) or {}).items())
    _reap(proc for _pid, proc in procs)
    for pid, proc in procs:
        if proc.exitcode != -signal.SIGPROF or not marks:
            continue
        try:
            with open(os.path.join(marks, str(pid)), "rb") as f:
                path = os.fsdecode(f.read().split(b"\0", 1)[0])
        except OSError:
            continue
        if path:
            found.add(path)
    return found


_sender = threading.local()


@contextlib.contextmanager
def checking_for(sender: str) -> Iterator[None]:
    """The checks this thread asks for in the body are ``sender``'s: workers are
    handed out to senders in rotation (:class:`_Turns`)."""
    before = getattr(_sender, "name", "")
    _sender.name = sender
    try:
        yield
    finally:
        _sender.name = before


def _current_sender() -> str:
    return str(getattr(_sender, "name", ""))


class _Turns:
    """Worker slots, handed to the senders waiting one sender at a time in rotation:
    the slot that frees goes to the waiting sender served longest ago, so a sender with
    many files queued gets one, then each other sender waiting does, before its next.
    At most ``slots`` tasks are in the workers at once, so nothing queues inside the
    process pool, where it would be first come first served."""

    def __init__(self, slots: int) -> None:
        self._cond = threading.Condition()
        self._free = max(slots, 1)
        self._waiting: dict[str, collections.deque[int]] = {}
        self._granted: set[int] = set()
        self._tickets = 0
        self._grants = 0
        self._served: dict[str, int] = {}
        """When each sender last got a slot (its grant's number): who goes next."""
        self._closed = False

    def take(self, sender: str) -> None:
        """Wait for a slot for ``sender``; FormatError once the pool is closing."""
        with self._cond:
            ticket = self._tickets
            self._tickets += 1
            self._waiting.setdefault(sender, collections.deque()).append(ticket)
            self._grant()
            while ticket not in self._granted:
                if self._closed:
                    queue = self._waiting.get(sender)
                    if queue is not None and ticket in queue:
                        queue.remove(ticket)
                        if not queue:
                            del self._waiting[sender]
                    raise _stopping()
                self._cond.wait()
            self._granted.discard(ticket)

    def give_back(self) -> None:
        with self._cond:
            self._free += 1
            self._grant()

    def _grant(self) -> None:
        granted = False
        while self._free > 0 and self._waiting:
            # the sender served longest ago (or never) first
            sender = min(self._waiting, key=lambda name: self._served.get(name, -1))
            queue = self._waiting[sender]
            self._granted.add(queue.popleft())
            if not queue:
                del self._waiting[sender]
            self._grants += 1
            self._served[sender] = self._grants
            self._free -= 1
            granted = True
        if granted:
            self._cond.notify_all()

    def waiting(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._waiting.values())

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _tasks(paths: Sequence[Path], per_task: int, cpu_base: float) -> list[list[Path]]:
    """``paths`` in tasks of at most ``per_task`` files and :data:`TASK_BUDGET` seconds
    of CPU budgets each (a file over it alone), in order."""
    tasks: list[list[Path]] = []
    budget = 0.0
    for path in paths:
        cost = cpu_budget(_size(str(path)), cpu_base)
        if tasks and len(tasks[-1]) < per_task and budget + cost <= TASK_BUDGET:
            tasks[-1].append(path)
            budget += cost
        else:
            tasks.append([path])
            budget = cost
    return tasks


class InspectPool:
    """``formats.inspect`` in worker processes; a dead or hung worker is a FormatError.

    The pool starts on first use (a receiver that never gets a file never pays for
    the workers) and is replaced when a worker dies, so one hostile file does not
    break the files after it. Whose checks they are is what :func:`checking_for` set
    on the calling thread.
    """

    def __init__(
        self,
        workers: int = 2,
        timeout: float = DEFAULT_TIMEOUT,
        target: Callable[[str], FileInfo] = _inspect_in_worker,
        memory_budget: int = MEMORY_BUDGET,
        cpu_base: float = CPU_BASE,
    ) -> None:
        """``target`` runs in the workers (a module-level function, for tests);
        ``memory_budget``: see :data:`MEMORY_BUDGET` (0: unbounded); ``cpu_base``: see
        :data:`CPU_BASE` (the tests' budgets are shorter)."""
        self.workers = workers
        self.timeout = timeout
        self.memory_budget = memory_budget
        self.cpu_base = cpu_base
        self._target = target
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False
        self._turns = _Turns(workers)
        self._alone_slots = threading.BoundedSemaphore(max(workers, 1))
        """Bounds the workers of :meth:`_alone` re-checks running at once."""
        self._down: tuple[float, str] | None = None
        """(monotonic time to try again, cause) while workers do not start."""
        self._marks = tempfile.mkdtemp(prefix="sealsync-checks-")
        """Where each worker says which file it checks (``_worker_start``); removed at
        close, or when the pool is collected or the process exits."""
        weakref.finalize(self, shutil.rmtree, self._marks, True)

    def _new(self, workers: int) -> ProcessPoolExecutor:
        return _new_pool(workers, self.memory_budget, self.cpu_base, self._marks)

    def _get_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise _stopping()
            if self._down is not None:
                retry_at, cause = self._down
                if time.monotonic() < retry_at:
                    raise InspectUnavailable(_unavailable_text(cause))
            if self._pool is None:
                self._pool = self._new(self.workers)
            return self._pool

    @property
    def unavailable(self) -> str | None:
        """Why workers do not start, while they do not (the receiver's metrics)."""
        with self._lock:
            return None if self._down is None else self._down[1]

    def _workers_start(self) -> str | None:
        """None if a new worker starts and runs the check (on an empty input: no file's
        content is involved); else why not, in one line."""
        pool = self._new(1)  # creates no process yet: submit() starts them
        kill = False
        try:
            pool.submit(_inspect_one, self._target, os.devnull).result(timeout=self.timeout)
        except _NO_START:
            return _start_failure(self._target)
        except FutureTimeout:
            kill = True
            return f"a new worker did not answer in {self.timeout:g} s"
        except Exception:  # the check ran and refused the empty input: workers start
            pass
        finally:
            self._discard(pool, kill=kill)
        return None

    def _down_for(self, cause: str) -> InspectUnavailable:
        """Record that workers do not start; logged once per outage, with its cause."""
        with self._lock:
            first = self._down is None
            self._down = (time.monotonic() + RECHECK_AFTER, cause)
        if first:
            log.error(
                "the format check cannot run: its worker processes do not start: %s; "
                "received files are answered 'retry later' until they do (this is the "
                "receiver's fault, not the files')",
                cause,
            )
        return InspectUnavailable(_unavailable_text(cause))

    def _up(self) -> None:
        with self._lock:
            was, self._down = self._down, None
        if was is not None:
            log.info("the format check's worker processes start again")

    def warm(self) -> None:
        """Start the workers now, in the background, so the first round does not wait
        seconds for processes and imports while its sender holds verdicts open."""
        try:
            pool = self._get_pool()
            futures = [pool.submit(_warm_up) for _ in range(self.workers)]
        except (RuntimeError, FormatError, *_NO_START):
            self._check_start_later()
            return

        def done(future: Future[None]) -> None:
            if not future.cancelled() and isinstance(future.exception(), BrokenProcessPool):
                self._check_start_later()

        futures[0].add_done_callback(done)

    def _check_start_later(self) -> None:
        """A worker died while warming up: find out now, on a thread of its own, whether
        workers start at all, so that a receiver whose check cannot run says so (and
        why) when it starts rather than at its first file."""

        def check() -> None:
            cause = self._workers_start()
            if cause is not None:
                self._down_for(cause)

        threading.Thread(target=check, name="sealsync-inspect-check", daemon=True).start()

    def _discard(self, pool: ProcessPoolExecutor, kill: bool) -> None:
        """Drop ``pool`` if it is still the current one; the next call starts a fresh one."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        _end(pool, kill)

    def _submit(
        self, fn: Callable[..., Any], *args: Any
    ) -> tuple[ProcessPoolExecutor, Future[Any]]:
        """``fn(*args)`` in a worker, once it is the calling sender's turn; the slot is
        given back when the task ends, whatever its end."""
        self._turns.take(_current_sender())
        try:
            pool = self._get_pool()
            try:
                future = pool.submit(fn, *args)
            except (BrokenProcessPool, RuntimeError):  # broken by another file, or shut down
                self._discard(pool, kill=False)
                pool = self._get_pool()
                future = pool.submit(fn, *args)
        except BaseException:
            self._turns.give_back()
            raise
        future.add_done_callback(lambda _: self._turns.give_back())
        return pool, future

    def inspect(self, path: Path) -> FileInfo:
        """The devices and rows of ``path``; FormatError if it is not a valid data file,
        InspectUnavailable (a FormatError) if the check cannot run at all."""
        try:
            pool, future = self._submit(_inspect_one, self._target, str(path))
        except _NO_START:  # no worker process could be started
            return self._alone(path)
        try:
            info: FileInfo = future.result(timeout=self.timeout)
            self._up()
            return info
        except FormatError:
            raise
        except BrokenProcessPool:
            # A worker died: this file's or another's, in flight in the same pool (every
            # session shares it). Only a check of this file alone can say which, unless
            # the kernel ended the worker at this file's budget.
            ended = _ended_past_budget(pool, self._marks)
            self._discard(pool, kill=False)
            if str(path) in ended:
                raise self._past_budget(path) from None
            if self._closed:
                raise _stopping() from None
            log.warning("%s: a format reader's worker died; checking it alone", path)
            return self._alone(path)
        except CancelledError:
            raise _stopping() from None
        except FutureTimeout:
            log.warning("%s: the format reader hung; restarting the pool", path)
            self._discard(pool, kill=True)
            raise self._hung(path) from None

    def _past_budget(self, path: Path) -> FormatError:
        log.warning("%s: its check was ended past its CPU budget: refused", path)
        return FormatError(
            f"{Path(path).name}: its check was ended past its CPU budget (a file's check may "
            f"use {self.cpu_base:g} s of CPU and one more per {CPU_RATE >> 20} MiB, at most "
            f"{CPU_MAX:g} s)"
        )

    def _hung(self, path: Path) -> FormatError:
        return FormatError(
            f"{Path(path).name}: the format reader did not finish in {self.timeout:g} s"
        )

    def _alone(self, path: Path) -> FileInfo:
        """The verdict on ``path`` from a worker of its own, started for it: a crash
        there is this file's doing and nobody else's."""
        with self._alone_slots:
            if self._closed:
                raise _stopping()
            pool = self._new(1)
            kill = False
            try:
                info: FileInfo = pool.submit(_inspect_one, self._target, str(path)).result(
                    timeout=self.timeout
                )
                self._up()
                return info
            except _NO_START:
                if self._closed:
                    raise _stopping() from None
                if str(path) in _ended_past_budget(pool, self._marks):
                    raise self._past_budget(path) from None  # the file's doing, for certain
                cause = self._workers_start()  # the file's doing, or no worker starts?
                if cause is not None:
                    raise self._down_for(cause) from None
                self._up()
                log.warning("%s: crashed the format reader alone: refused", path)
                raise FormatError(
                    f"{Path(path).name}: the file crashed the format reader"
                ) from None
            except FutureTimeout:
                kill = True
                raise self._hung(path) from None
            finally:
                self._discard(pool, kill=kill)

    def inspect_many(self, paths: Sequence[Path]) -> list[FileInfo | FormatError]:
        """``inspect`` for several files: per path, its FileInfo or its FormatError.

        Several files per task (:func:`_tasks`) instead of one: with small files the
        pool's messaging cost more than the reading. A task whose worker dies is redone
        one file at a time, so that only the bad file is refused, exactly as
        ``inspect`` would have; one that does not finish in ``timeout`` refuses its
        files, none of them checked again.
        """
        if len(paths) < 2:
            return [self._inspect_or_error(p) for p in paths]
        tasks = _tasks(paths, -(-len(paths) // self.workers), self.cpu_base)
        submitted: list[tuple[ProcessPoolExecutor, Future[Any], float]] = []
        results: list[FileInfo | FormatError] = []
        try:
            for task in tasks:
                pool, future = self._submit(_inspect_each, self._target, [str(p) for p in task])
                submitted.append((pool, future, time.monotonic() + self.timeout))
        except FormatError as exc:  # stopping, or workers do not start: the same for all
            if not submitted:
                return [exc for _ in paths]
        except (RuntimeError, *_NO_START):  # broken, shut down, or no worker starts
            pass
        for n, task in enumerate(tasks):
            if n >= len(submitted):
                results.extend(self._inspect_or_error(p) for p in task)
                continue
            pool, future, deadline = submitted[n]
            try:
                results.extend(future.result(timeout=max(deadline - time.monotonic(), 0.0)))
                continue
            except FutureTimeout:
                log.warning("%s: the format reader hung; restarting the pool", task[0])
                self._discard(pool, kill=True)
                results.extend(self._hung(p) for p in task)  # never checked twice
                continue
            except CancelledError:
                results.extend(_stopping() for _ in task)
                continue
            except BrokenProcessPool:
                ended = _ended_past_budget(pool, self._marks)
                self._discard(pool, kill=False)
                results.extend(
                    self._past_budget(p) if str(p) in ended else self._alone_or_error(p)
                    for p in task
                )
                continue
            except Exception:  # not the pool's failure: ``inspect`` reports it per file
                pass
            results.extend(self._alone_or_error(p) for p in task)
        return results

    def _inspect_or_error(self, path: Path) -> FileInfo | FormatError:
        try:
            return self.inspect(path)
        except FormatError as exc:
            return exc

    def _alone_or_error(self, path: Path) -> FileInfo | FormatError:
        try:
            return self._alone(path)
        except FormatError as exc:
            return exc

    def alive(self) -> int:
        """Worker processes alive now (the receiver's metrics)."""
        with self._lock:
            pool = self._pool
        # ``_processes`` is private but the only handle on the workers (see _discard).
        procs = list((getattr(pool, "_processes", None) or {}).values())
        return sum(1 for proc in procs if proc.is_alive())

    def waiting(self) -> int:
        """Tasks waiting for a worker (all senders')."""
        return self._turns.waiting()

    def close(self) -> None:
        """Stop at once: checks in progress end (their files answered "stopping"), and
        their workers are ended rather than waited for (a check may take minutes)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        self._turns.close()
        if pool is not None:
            self._discard(pool, kill=True)
        shutil.rmtree(self._marks, ignore_errors=True)

    def __enter__(self) -> InspectPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, path: Path) -> FileInfo:
        return self.inspect(path)


def _stopping() -> InspectUnavailable:
    """The check of a file asked for while the receiver stops: the receiver's doing,
    so the file is answered "retry later"."""
    return InspectUnavailable("the receiver is stopping: file not inspected")


def _unavailable_text(cause: str) -> str:
    return f"the receiver cannot check files now (its format check does not start: {cause})"
