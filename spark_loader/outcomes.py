"""How a ``sealsync load`` run ended, in the words its last-run record and its metrics share.

Both :mod:`.lastrun` (which writes the record) and :mod:`.metrics` (which exports it)
read these names, so they sit below both.
"""

from __future__ import annotations

OK, FAILED, INTERRUPTED = "ok", "failed", "interrupted"
OUTCOMES = (OK, FAILED, INTERRUPTED)
#: Failure kinds counted from the start (at 0), so the first of each is an increase.
FAILURE_KINDS = (
    "skipped_files",  # the run ran, some files could not be ingested or waited (exit 1)
    "missing_folder",  # a data dir gone empty: nothing removed
    "java",  # no Java Spark can start with
    "local",  # this machine's files: permission, space
    "error",  # any other expected failure (Spark could not start...)
    "internal",  # a bug: a traceback
)
