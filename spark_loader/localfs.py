"""Hadoop's local file system without a forked ``chmod`` per file and folder.

PySpark ships no Hadoop native library, so Hadoop's ``RawLocalFileSystem`` sets
the permission of every file and folder it creates by forking ``chmod``. The
loader writes one partition per source file, so that is a fork for each of them
and for their folders (449 forks for 200 files), a large part of the loader's
write time. ``PosixLocalFileSystem`` (one small Java class of the loader's jar,
:mod:`.jvm`) sets the same bits through ``java.nio`` instead, where the jar is
sure to load; elsewhere the writes use Hadoop's ``RawLocalFileSystem`` as before.
"""

from __future__ import annotations

from typing import Any

from spark_loader import jvm

CLASS = "io.sealsync.hadoop.PosixLocalFileSystem"
FALLBACK = "org.apache.hadoop.fs.RawLocalFileSystem"


def implementation(spark: Any) -> str:
    """The ``fs.file.impl`` class the loader's writes use in this session."""
    return CLASS if jvm.loadable(spark, CLASS) else FALLBACK
