"""The table's layout: its partition columns, how a value becomes a folder, and the
names of the loader's working folders and tags.

Imported by the executors (the Arrow copy, the TsFile reader, the schema pass), which
need these names and nothing of the table itself, and by the driver's table modules.
"""

from __future__ import annotations

import os
import re
import string
from dataclasses import dataclass
from pathlib import Path

SENDER_COLUMN = "sender"
SOURCE_COLUMN = "source_file"
FILE_ID_COLUMN = "file_id"
PARTITION_COLUMNS = (SENDER_COLUMN, SOURCE_COLUMN, FILE_ID_COLUMN)  # folder order

LINKS = ".sealsync-links"
STAGING = ".sealsync-staging"
#: The files a run moved into the table and has not committed yet (spark_loader/table.py).
UNCOMMITTED = ".sealsync-uncommitted.json"
#: The tags a resolved partition's files carry (:mod:`.resolve`).
GROUP_TAG = "sealsync.group"
BOUNDS_TAG = "sealsync.bounds"
#: The group sidecar of a plain Parquet table's resolved partition, read when converting.
OLD_SIDECAR = "_sealsync_group.json"
#: The one column a load's Spark job partitions its staging output by: a file's
#: number in the batch. Short, so that Spark's per-row work on it is small; its
#: folders' files are moved to the real partitions afterwards.
KEY_COLUMN = "__sealsync_key"
MAX_FOLDER_BYTES = 255
_KEPT = frozenset(string.ascii_letters + string.digits + "._-")


@dataclass(frozen=True)
class WriterNames:
    """The names one loader uses in a table several loaders may write: its hidden
    working folders, its list of uncommitted files and its Delta application id. A
    loader removes only what carries its own names, never another's work in progress.
    A loader without an id (a state dir bound before loaders had one) uses the plain
    names."""

    staging: str
    links: str
    uncommitted: str
    suffix: str  # "" or "-<id>": appended to the application id

    @classmethod
    def of(cls, writer: str | None) -> WriterNames:
        if writer is None:
            return cls(STAGING, LINKS, UNCOMMITTED, "")
        if not _WRITER_RE.match(writer):
            raise ValueError(f"not a loader id: {writer!r}")
        stem = UNCOMMITTED.removesuffix(".json")
        return cls(
            f"{STAGING}-{writer}", f"{LINKS}-{writer}", f"{stem}-{writer}.json", f"-{writer}"
        )


_WRITER_RE = re.compile(r"^[0-9a-f]{32}$")


def folder_value(value: str) -> str | None:
    """``value`` as a partition folder value, or None if the folder name would be too
    long. Only ASCII is escaped (``%XX``), as Spark's partition writer does."""
    text = "".join(c if c in _KEPT or not c.isascii() else f"%{ord(c):02X}" for c in value)
    if len(f"{SOURCE_COLUMN}={text}".encode()) > MAX_FOLDER_BYTES:
        return None
    return text


def unescape(value: str) -> str:
    """A partition folder value as Spark and pyarrow read it (``%XX`` -> character)."""
    out, i = [], 0
    while i < len(value):
        if value[i] == "%" and _is_hex(value[i + 1 : i + 3]):
            out.append(chr(int(value[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _is_hex(text: str) -> bool:
    return len(text) == 2 and all(c in "0123456789abcdefABCDEF" for c in text)


def partition_folder(sender: str, source_file: str, file_id: str) -> str | None:
    """A partition's folder relative to the table (a UUID and a hex id need no
    escaping); None for a name that cannot be a folder (:func:`folder_value`)."""
    value = folder_value(source_file)
    if value is None:
        return None
    return f"{SENDER_COLUMN}={sender}/{SOURCE_COLUMN}={value}/{FILE_ID_COLUMN}={file_id}"


def part_files(folder: Path) -> list[Path]:
    """The data files of one folder (a plain Parquet partition or a staging one)."""
    return sorted(
        Path(e.path)
        for e in os.scandir(folder)
        if e.is_file() and not e.name.startswith((".", "_"))
    )
