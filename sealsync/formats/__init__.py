"""Data-file formats behind one interface (docs/design.md §1.3).

Each format module (``tsfile``, ``parquet``) provides the same functions;
callers pick one by file name with :func:`format_for` and never branch on the
format:

* ``is_complete(path) -> bool``: cheap magic checks first, then the footer.
* ``inspect(path) -> FileInfo``: devices and rows, or FormatError (one line,
  naming the file). Any native-reader failure becomes FormatError.
* ``verify(path) -> FileInfo``: what the receiver checks of an untrusted file
  (complete, metadata readable, devices from the file itself); like ``inspect``
  but ``rows`` may be -1 (not counted) where counting means decoding every page.
* ``devices(path) -> list[str]`` and ``row_count(path) -> int``.
* ``to_arrow(path) -> pyarrow.Table``: ``time`` (int64 epoch ms), ``device``
  (string), then one column per measurement: what the Spark loader reads.
* ``write_arrow(path, table)``: the inverse, for the simulator and tests.

A *row* is one (time, device) pair with one column per measurement, the unit
Spark sees. TsFile readers are native code: run ``inspect`` on untrusted files
in a worker process (see :mod:`sealsync.formats.tsfile`).

The format modules are imported on first use, not with this package: a process that
only unpickles a :class:`FileInfo` (the receiver, from its inspection workers) or reads
a sidecar (``mods``, ``resource``) never loads pyarrow, numpy or a native reader. The
receiver's first result after a start otherwise paid that import on the CPU it was
receiving on, and kept the libraries in memory for good.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Protocol

from sealsync.errors import FormatError
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN, FileInfo

__all__ = [
    "DEVICE_COLUMN",
    "TIME_COLUMN",
    "DataFormat",
    "FileInfo",
    "MODULES",
    "format_for",
    "inspect",
    "is_complete",
    "verify",
]


class DataFormat(Protocol):
    """What a format module provides (the module docstring above); ``tsfile`` and
    ``parquet`` are checked against it below."""

    SUFFIX: str

    def is_complete(self, path: str | os.PathLike[str]) -> bool: ...

    def inspect(self, path: str | os.PathLike[str]) -> FileInfo: ...

    def verify(self, path: str | os.PathLike[str]) -> FileInfo: ...

    def devices(self, path: str | os.PathLike[str]) -> list[str]: ...

    def row_count(self, path: str | os.PathLike[str]) -> int: ...

    def to_arrow(self, path: str | os.PathLike[str]) -> Any: ...

    def write_arrow(self, path: str | os.PathLike[str], table: Any) -> None: ...


if TYPE_CHECKING:
    from sealsync.formats import parquet, tsfile

    _CHECKED: tuple[DataFormat, ...] = (tsfile, parquet)

_BY_SUFFIX = {".tsfile": "tsfile", ".parquet": "parquet"}
"""Each data-file suffix's format module (its ``SUFFIX``), by name."""
MODULES = tuple(f"{__name__}.{module}" for module in _BY_SUFFIX.values())
"""The format modules' full names: what a process that reads data files imports
ahead (the check workers' fork server)."""


def format_for(name: str | os.PathLike[str]) -> DataFormat:
    """The format module for a data file name, by suffix; FormatError otherwise."""
    text = os.fspath(name)
    for suffix, module in _BY_SUFFIX.items():
        if text.endswith(suffix) and len(os.path.basename(text)) > len(suffix):
            return importlib.import_module(f"{__name__}.{module}")
    raise FormatError(f"{text}: not a data file (expected a .tsfile or .parquet name)")


def inspect(path: str | os.PathLike[str]) -> FileInfo:
    """Devices and rows of a data file, read from the file itself."""
    return format_for(path).inspect(path)


def verify(path: str | os.PathLike[str]) -> FileInfo:
    """Complete, readable metadata, and the devices it holds (``rows`` may be -1)."""
    return format_for(path).verify(path)


def is_complete(path: str | os.PathLike[str]) -> bool:
    """Whether a data file is whole; an unknown suffix raises FormatError."""
    return format_for(path).is_complete(path)
