"""Reading untrusted data files in worker processes (docs/design.md §4.4).

A received file is parsed by native code (the TsFile reader, Arrow's Parquet
reader); a malformed file that crashes or hangs it must cost a worker, never the
host server the receiver runs in. So ``formats.inspect`` (the service uses
``formats.verify``) runs in a process pool.

Workers are started with ``forkserver`` (``spawn`` where that is unavailable):
forking a multi-threaded server process (paramiko threads, loader threads) can
copy a lock held by another thread into the child and deadlock it. As with any
such pool, the host's main module must be importable without side effects (the
``if __name__ == "__main__":`` idiom): workers import it.

Those start methods run ``python -c``, which puts the working directory first on
``sys.path``: a receiver started from a folder holding a checkout of the project (or
anything named like one of its packages) had workers import that instead of the
installed code, and die. Workers therefore start with ``PYTHONSAFEPATH`` set, so they
import exactly what the receiver itself imports, wherever it was started.

A worker that cannot start at all (a broken installation, a native library that
fails to load) is the receiver's fault, never the file's: before a crash is blamed on
a file, a worker is started on an empty input; if that one dies too, the check is
:class:`InspectUnavailable` (the file is answered "retry later", the cause is logged
once as an error, and the check is not tried again for ``RECHECK_AFTER`` seconds).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import forkserver
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sealsync.errors import FormatError
from sealsync.printable import single_line

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")

DEFAULT_TIMEOUT = 300.0
RECHECK_AFTER = 30.0
"""Seconds after a failed worker start before workers are tried again."""
PRELOAD = ("sealsync.formats", "tsfile")
"""What the fork server imports once, for every worker (see ``_context``)."""


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


def verify_in_worker(path: str) -> FileInfo:
    """``formats.verify`` in the worker: what the receiver checks of a received file.

    The metadata check of docs/design.md §1.3, not ``inspect``'s decode of every page,
    which is orders of magnitude slower (docs/performance.md).
    """
    from sealsync import formats

    verify = formats.verify  # outside the try: a missing reader is our bug, not the file's
    return _guarded(verify, path)


def _guarded(read: Callable[[Path], FileInfo], path: str) -> FileInfo:
    """Any reader failure becomes a picklable FormatError."""
    try:
        return read(Path(path))
    except FormatError:
        raise
    except Exception as exc:  # a reader bug on hostile input is still "not a valid file"
        raise FormatError(f"{Path(path).name}: unreadable: {type(exc).__name__}: {exc}") from None


def _inspect_each(target: Callable[[str], FileInfo], paths: list[str]) -> list[Any]:
    """Runs in the worker: ``target`` for each path, a FormatError kept as its result."""
    out: list[Any] = []
    for path in paths:
        try:
            out.append(target(path))
        except FormatError as exc:
            out.append(exc)
    return out


def _warm_up() -> None:
    """Runs in a new worker: pay the format readers' import before the first file."""
    import sealsync.formats  # noqa: F401


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


_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _safe_path() -> Iterator[None]:
    """``PYTHONSAFEPATH`` set while a worker process (or the fork server) starts, and
    put back after: no working directory on its ``sys.path`` (see the module's
    docstring), while the host's own environment, which its other children inherit,
    stays as the host set it."""
    with _ENV_LOCK:
        before = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"
        try:
            yield
        finally:
            if before is None:
                del os.environ["PYTHONSAFEPATH"]
            else:
                os.environ["PYTHONSAFEPATH"] = before


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        # Import the readers once in the fork server, so each worker forks ready; with
        # them the TsFile package, which the reader imports only on first use (pandas
        # and a C++ library: a worker's first file would pay for them). A module that
        # cannot be imported is skipped by the fork server.
        ctx.set_forkserver_preload(list(PRELOAD))
        with _safe_path():  # workers fork from it, its sys.path theirs
            forkserver.ensure_running()
        return ctx
    return multiprocessing.get_context("spawn")


def _start_failure(target: Callable[[str], FileInfo]) -> str:
    """Why a worker dies as it starts, in one line: what a worker imports, done in a
    process of its own started the same way (same interpreter, environment, working
    directory and ``sys.path``), whose error is captured rather than lost on stderr."""
    modules = ["receiver.inspect_pool", "sealsync.formats", target.__module__]
    code = "\n".join(
        [
            "import sys",
            f"for name in {list(PRELOAD)!r}:",
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


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=_context(),
        initializer=_exit_with_host,
        initargs=(os.getpid(),),
    )


class InspectPool:
    """``formats.inspect`` in worker processes; a dead or hung worker is a FormatError.

    The pool starts on first use (a receiver that never gets a file never pays for
    the workers) and is replaced when a worker dies, so one hostile file does not
    break the files after it.
    """

    def __init__(
        self,
        workers: int = 2,
        timeout: float = DEFAULT_TIMEOUT,
        target: Callable[[str], FileInfo] = _inspect_in_worker,
    ) -> None:
        """``target`` runs in the workers (a module-level function, for tests)."""
        self.workers = workers
        self.timeout = timeout
        self._target = target
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False
        self._alone_slots = threading.BoundedSemaphore(max(workers, 1))
        """Bounds the workers of :meth:`_alone` re-checks running at once."""
        self._down: tuple[float, str] | None = None
        """(monotonic time to try again, cause) while workers do not start."""

    def _get_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise FormatError("the receiver is stopping: file not inspected")
            if self._down is not None:
                retry_at, cause = self._down
                if time.monotonic() < retry_at:
                    raise InspectUnavailable(_unavailable_text(cause))
            if self._pool is None:
                self._pool = _new_pool(self.workers)
            return self._pool

    @property
    def unavailable(self) -> str | None:
        """Why workers do not start, while they do not (the receiver's metrics)."""
        with self._lock:
            return None if self._down is None else self._down[1]

    def _workers_start(self) -> str | None:
        """None if a new worker starts and runs the check (on an empty input: no file's
        content is involved); else why not, in one line."""
        pool = _new_pool(1)  # creates no process yet: submit() starts them
        kill = False
        try:
            pool.submit(self._target, os.devnull).result(timeout=self.timeout)
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
        if kill:
            # A hung reader never returns; shutdown() alone would leave it running.
            # ``_processes`` is private but the only handle on the workers.
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                try:
                    proc.kill()
                except Exception:  # already gone
                    pass
        pool.shutdown(wait=False, cancel_futures=True)

    def inspect(self, path: Path) -> FileInfo:
        """The devices and rows of ``path``; FormatError if it is not a valid data file,
        InspectUnavailable (a FormatError) if the check cannot run at all."""
        pool = self._get_pool()
        try:
            try:
                future = pool.submit(self._target, str(path))
            except (BrokenProcessPool, RuntimeError):  # broken by another file, or shut down
                self._discard(pool, kill=False)
                pool = self._get_pool()
                future = pool.submit(self._target, str(path))
        except _NO_START:  # no worker process could be started
            self._discard(pool, kill=False)
            return self._alone(path)
        try:
            info = future.result(timeout=self.timeout)
            self._up()
            return info
        except FormatError:
            raise
        except BrokenProcessPool:
            # A worker died: this file's or another's, in flight in the same pool (every
            # session shares it). Only a check of this file alone can say which.
            log.warning("%s: a format reader's worker died; checking it alone", path)
            self._discard(pool, kill=False)
            return self._alone(path)
        except FutureTimeout:
            log.warning("%s: the format reader hung; restarting the pool", path)
            self._discard(pool, kill=True)
            raise FormatError(
                f"{Path(path).name}: the format reader did not finish in {self.timeout:g} s"
            ) from None

    def _alone(self, path: Path) -> FileInfo:
        """The verdict on ``path`` from a worker of its own, started for it: a crash
        there is this file's doing and nobody else's."""
        with self._alone_slots:
            if self._closed:
                raise FormatError("the receiver is stopping: file not inspected")
            pool = _new_pool(1)
            kill = False
            try:
                info = pool.submit(self._target, str(path)).result(timeout=self.timeout)
                self._up()
                return info
            except _NO_START:
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
                raise FormatError(
                    f"{Path(path).name}: the format reader did not finish in {self.timeout:g} s"
                ) from None
            finally:
                self._discard(pool, kill=kill)

    def inspect_many(self, paths: Sequence[Path]) -> list[FileInfo | FormatError]:
        """``inspect`` for several files: per path, its FileInfo or its FormatError.

        One task per worker instead of one per file: with small files the pool's
        messaging (pickling, pipes, its threads waking up) cost more than the reading.
        A task whose worker dies or hangs is redone one file at a time, so that only
        the bad file is refused, exactly as ``inspect`` would have.
        """
        if len(paths) < 2:
            return [self._inspect_or_error(p) for p in paths]
        size = -(-len(paths) // self.workers)
        chunks = [list(paths[i : i + size]) for i in range(0, len(paths), size)]
        try:
            pool = self._get_pool()
        except FormatError as exc:  # stopping, or workers do not start: the same for all
            return [exc for _ in paths]
        try:
            futures = [
                pool.submit(_inspect_each, self._target, [str(p) for p in chunk])
                for chunk in chunks
            ]
        except (RuntimeError, *_NO_START):  # broken, shut down, or no worker starts
            self._discard(pool, kill=False)
            return [self._inspect_or_error(p) for p in paths]
        deadline = time.monotonic() + self.timeout
        results: list[FileInfo | FormatError] = []
        for chunk, future in zip(chunks, futures, strict=True):
            try:
                results.extend(future.result(timeout=max(deadline - time.monotonic(), 0.0)))
                continue
            except FutureTimeout:
                self._discard(pool, kill=True)
            except BrokenProcessPool:
                self._discard(pool, kill=False)
            except Exception:  # not the pool's failure: ``inspect`` reports it per file
                pass
            results.extend(self._inspect_or_error(p) for p in chunk)
        return results

    def _inspect_or_error(self, path: Path) -> FileInfo | FormatError:
        try:
            return self.inspect(path)
        except FormatError as exc:
            return exc

    def alive(self) -> int:
        """Worker processes alive now (the receiver's metrics)."""
        with self._lock:
            pool = self._pool
        # ``_processes`` is private but the only handle on the workers (see _discard).
        procs = list((getattr(pool, "_processes", None) or {}).values())
        return sum(1 for proc in procs if proc.is_alive())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> InspectPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, path: Path) -> FileInfo:
        return self.inspect(path)


def _unavailable_text(cause: str) -> str:
    return f"the receiver cannot check files now (its format check does not start: {cause})"
