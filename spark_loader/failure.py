"""Why a Spark job failed, and which file to blame: the one reading of Spark's errors.

PySpark raises typed errors: a Python worker's failure arrives as ``PythonException``
whose message parameters carry the worker's traceback; a JVM failure PySpark does not
convert arrives as ``Py4JJavaError`` whose ``java_exception`` is the JVM throwable,
with a cause chain and, for ``SparkThrowable``, an error condition and parameters
(``FAILED_READ_FILE`` names the file it could not read). :func:`describe` reads
those; text is parsed only where nothing typed carries the answer: our TsFile
reader's marker inside a Python error line (:func:`.tsfile_read.file_error`), the
last line of a Python traceback, and log4j lines (:func:`last_error_line`).

:class:`SplitRetry` is the one policy for a batch whose job failed: retry without
the file the failure names, else in halves, until each bad file is alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sealsync.formats.common import one_line
from spark_loader.tsfile_read import file_error

MAX_FAILED_JOBS = 32
_PY_ERROR_RE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:?.*$")
_PY4J_PREFIX = "An error occurred while calling"
_MAX_CAUSES = 16  # a cause chain is short; a cycle must not hang the driver

T = TypeVar("T")


@dataclass(frozen=True)
class Failure:
    """What one exception says went wrong."""

    reason: str  # one line for the report
    file_id: str | None = None  # the source file our TsFile reader named
    path: str | None = None  # the file Spark's own reader failed on (a URI)
    text: str = ""  # the whole text, for a caller's last-resort search
    from_jvm: bool = False  # a Py4J error: the driver's log may say more


def describe(exc: BaseException) -> Failure:
    """The :class:`Failure` ``exc`` describes; never raises (a dead JVM reads as text)."""
    text = str(exc)
    traceback: str | None = None
    path: str | None = None
    reason: str | None = None
    from_jvm = False
    try:
        from py4j.protocol import Py4JError, Py4JJavaError
        from pyspark.errors import PythonException
    except ImportError:  # no PySpark here: not a Spark failure
        pass
    else:
        from_jvm = isinstance(exc, Py4JError)
        try:
            if isinstance(exc, PythonException):
                traceback = (exc.getMessageParameters() or {}).get("traceback")
            elif isinstance(exc, Py4JJavaError):
                traceback, path, reason = _from_jvm(exc.java_exception)
        except Py4JError:  # the JVM went away meanwhile: the text is all there is
            pass
    python_error = _python_error_line(traceback or text)
    marked = file_error(python_error or text)
    if marked is not None:
        return Failure(_short(marked[1]), marked[0], path, text, from_jvm)
    reason = python_error or reason or _first_line(text) or one_line(exc)
    return Failure(_short(reason), None, path, text, from_jvm)


def _from_jvm(throwable: Any) -> tuple[str | None, str | None, str | None]:
    """(Python traceback, unreadable file, reason) from a JVM throwable's cause chain.

    Spark wraps a task's failure in a ``SparkException`` without a condition ("Job
    aborted due to stage failure"): the reason is the first throwable below such
    wrappers, and for a file Spark could not read, what its reader said.
    """
    from py4j.java_gateway import is_instance_of
    from pyspark import SparkContext

    gateway, jvm = SparkContext._gateway, SparkContext._jvm
    if gateway is None or jvm is None:
        return None, None, None
    utils = jvm.PythonErrorUtils
    reason: str | None = None
    seen = 0
    while throwable is not None and seen < _MAX_CAUSES:
        seen += 1
        condition: str | None = None
        params: dict[str, str] = {}
        if is_instance_of(gateway, throwable, "org.apache.spark.SparkThrowable"):
            condition = utils.getCondition(throwable)
            params = dict(utils.getMessageParameters(throwable) or {})
        cause = throwable.getCause()
        if condition == "PYTHON_EXCEPTION" and params.get("traceback"):
            return params["traceback"], None, None
        if condition is not None and condition.startswith("FAILED_READ_FILE"):
            said = cause.toString() if cause is not None else throwable.toString()
            return None, params.get("path"), said
        wrapper = condition is None and throwable.getClass().getName() == (
            "org.apache.spark.SparkException"
        )
        if reason is None and not wrapper:
            reason = throwable.toString()
        throwable = cause
    return None, None, reason


def _python_error_line(text: str) -> str | None:
    """The last ``SomeError: ...`` line of a Python traceback in ``text``, if any."""
    if "Traceback (most recent call last)" not in text:
        return None
    found = [m for m in (_PY_ERROR_RE.match(ln.strip()) for ln in text.splitlines()) if m]
    return found[-1].group(0) if found else None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().removeprefix(": ")
        if line and not line.startswith(_PY4J_PREFIX):
            return line
    return ""


def _short(text: str) -> str:
    """The first line of ``text``, whitespace collapsed, at most 200 characters."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return one_line(RuntimeError(line)).removeprefix("RuntimeError: ")


def last_error_line(text: str) -> str:
    """The message of the last log4j ERROR line, or the last ``...Error:`` line.

    For what Spark only logs: a session that could not start says why in the
    driver's log, not in the exception Py4J raises.
    """
    found = ""
    for line in text.splitlines():
        if " ERROR " in line:
            found = line.split(": ", 1)[-1].strip()
        elif not found and ("Error:" in line or "Exception:" in line):
            found = line.strip()
    return found


class SplitRetry(Generic[T]):
    """The groups to run a failed batch in, until every bad item is alone.

    Iterate for the next group to try; report a failed try with :meth:`failed`. The
    item a failure names (``culprit``) is dropped and the rest retried. Otherwise a
    group holding several owners' items (senders) is split by owner first, so that
    a file that kills its job is only ever retried beside files of its own sender,
    and one sender's bad files cannot cost another sender's files anything; a
    group of one owner is split in halves. An item alone goes to ``give_up`` with
    the reason, and so does the rest of an owner's group once ``max_failures`` jobs
    of that owner's items failed (a sender whose files keep failing, or a cluster
    failing every job). ``blamed`` collects the owners of what was given up.
    """

    def __init__(
        self,
        items: list[T],
        give_up: Callable[[T, str], None],
        culprit: Callable[[Failure, list[T]], T | None] = lambda failure, group: None,
        on_split: Callable[[], None] = lambda: None,
        max_failures: int = MAX_FAILED_JOBS,
        owner: Callable[[T], str] = lambda item: "",
    ) -> None:
        self._pending = [items] if items else []
        self._give_up = give_up
        self._culprit = culprit
        self._on_split = on_split
        self._max_failures = max_failures
        self._owner = owner
        self.failures = 0
        self._by_owner: dict[str, int] = {}
        self.blamed: set[str] = set()

    def __iter__(self) -> Iterator[list[T]]:
        while self._pending:
            yield self._pending.pop(0)

    def _drop(self, item: T, reason: str) -> None:
        self.blamed.add(self._owner(item))
        self._give_up(item, reason)

    def failed(self, group: list[T], exc: BaseException) -> None:
        self.failures += 1
        failure = describe(exc)
        bad = self._culprit(failure, group)
        owners: dict[str, list[T]] = {}
        for item in group:
            owners.setdefault(self._owner(item), []).append(item)
        if bad is not None:
            self._drop(bad, failure.reason)
            rest = [item for item in group if item != bad]
            if rest:
                self._pending.insert(0, rest)
        elif len(group) == 1:
            self._drop(group[0], failure.reason)
        elif len(owners) > 1:
            self._pending[0:0] = list(owners.values())
            self._on_split()
        else:
            owner = next(iter(owners))
            self._by_owner[owner] = failed = self._by_owner.get(owner, 0) + 1
            if failed > self._max_failures:
                for item in group:
                    reason = f"not retried after {failed} failed Spark jobs: {failure.reason}"
                    self._drop(item, reason)
            else:
                half = len(group) // 2
                self._pending[0:0] = [group[:half], group[half:]]
                self._on_split()
