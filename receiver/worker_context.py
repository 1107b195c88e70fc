"""How the receiver's check workers are started (:mod:`.inspect_pool`).

Workers are started with ``forkserver`` (``spawn`` where that is unavailable):
forking a multi-threaded server process (paramiko threads, loader threads) can copy
a lock held by another thread into the child and deadlock it.

Those start methods run ``python -c``, which puts the working directory first on
``sys.path``: a receiver started from a folder holding a checkout of the project (or
anything named like one of its packages) had workers import that instead of the
installed code, and die. The fork server therefore starts with ``PYTHONSAFEPATH``
set, so workers import exactly what the receiver itself imports, wherever it was
started.

How a worker ended decides whether its file is refused (the kernel ended it at the
file's CPU budget) or checked again alone, so its exit status must be read right. A
fork-server worker's status is a number the fork server writes once on a pipe, and
the standard library's ``poll`` reads it without a lock: when two threads ask at
once (the pool's manager thread joining the dead worker, the thread whose check it
was asking how it ended), one reads the number and the other finds the pipe at its
end and records 255, "the fork server itself died", for good. The context given
here reads it under a lock, once.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import multiprocessing.context
import os
import threading
from collections.abc import Iterator
from multiprocessing import forkserver, popen_forkserver
from typing import Any

from sealsync import formats

PRELOAD = (*formats.MODULES, "tsfile")
"""What the fork server imports once, for every worker: the readers, and with them the
TsFile package, which the reader imports only on first use (pandas and a C++ library:
a worker's first file would pay for them). A module that cannot be imported is skipped
by the fork server."""

_WORKER_ENV = {"PYTHONSAFEPATH": "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}
"""What a worker (and the fork server) starts with: no working directory on its
``sys.path`` (see the module's docstring), and pyarrow allocating with the C library
rather than its own allocator, which reserves a gigabyte of address space at a time
and so fails under a worker's ``RLIMIT_AS`` on files that need little."""

_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _safe_path() -> Iterator[None]:
    """:data:`_WORKER_ENV` set while the fork server starts, and put back after, while
    the host's own environment, which its other children inherit, stays as the host
    set it."""
    with _ENV_LOCK:
        before = {name: os.environ.get(name) for name in _WORKER_ENV}
        os.environ.update(_WORKER_ENV)
        try:
            yield
        finally:
            for name, value in before.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value


class _Popen(popen_forkserver.Popen):
    """A fork-server child whose exit status is read once, under a lock (module
    docstring)."""

    def __init__(self, process_obj: Any) -> None:
        self._status_lock = threading.Lock()
        super().__init__(process_obj)

    def poll(self, flag: int = os.WNOHANG) -> int | None:
        if self.returncode is None:
            timeout = 0 if flag == os.WNOHANG else None
            ready = multiprocessing.connection.wait([self.sentinel], timeout)
            # Not ready may also mean another thread has just taken the number off the
            # pipe: its answer is what this one returns, once it is recorded.
            with self._status_lock:
                if self.returncode is None and ready:
                    try:
                        self.returncode = forkserver.read_signed(self.sentinel)
                    except (OSError, EOFError):  # the fork server itself died
                        self.returncode = 255
        status: int | None = self.returncode
        return status


class _Process(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:  # noqa: N802  # the standard library's name
        return _Popen(process_obj)


class _Context(multiprocessing.context.ForkServerContext):
    Process = _Process


def context() -> multiprocessing.context.BaseContext:
    """The context a check pool starts its workers with: the fork server's (started
    here, with :data:`PRELOAD` imported once), else ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = _Context()
    ctx.set_forkserver_preload(list(PRELOAD))
    with _safe_path():  # workers fork from it, its sys.path theirs
        forkserver.ensure_running()
    return ctx
