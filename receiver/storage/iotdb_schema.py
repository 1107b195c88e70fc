"""A data centre's series types held against a file's before IoTDB loads the file.

At the edge a series may be deleted (``DELETE TIMESERIES``) and created again with
another type; its old points go (the deletion reaches every file holding them) and
later files hold the new type. The data centre holds the series with the old type,
from the files loaded before, and neither release loads the new file right:

* 0.12 loads it without a look at the schema (the series keeps its old type in the
  schema, the new chunks go in as they are): every query of the device then fails with
  ``ClassCastException`` (``Double cannot be cast to Long``) and ``SELECT s3`` answers
  a double's bits as a long (seen on 0.12.0);
* 2.x converts the file's values to the schema's type by default
  (``convert-on-type-mismatch``): a DOUBLE 1.5 became INT64 1 (seen on 2.0.1-beta); the
  storage turns that off, and IoTDB then refuses the file.

So before a file is loaded each of its series is looked up in the data centre (``SHOW
TIMESERIES`` per device, cached) and a series the data centre holds with another
type is settled as the edge settled it: when IoTDB holds no point of it (the edge's
deletion of every point arrived and was applied), the series is dropped there
(``DELETE TIMESERIES``: it holds nothing, and it belongs to the sender loading the
file, its devices' one owner), and the load creates it with the file's type; when
IoTDB still holds points of it, the file is not loaded and :meth:`SchemaGuard.check`
says why (the caller holds it aside, and tries it again once more of the sender's
files or deletions are in: the deletion that empties the series may come next).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from receiver.storage.iotdb_delete import Unwritable, device_path, series_path
from sealsync.formats.deletion import node_name, split_path
from sealsync.formats.tsfile_support import TYPE_NAMES
from sealsync.printable import printable

log = logging.getLogger(f"sealsync.{__name__}")


class Client(Protocol):
    def sql(self, statement: str) -> None: ...

    def query(self, statement: str) -> tuple[list[str], list[list[Any]]]: ...


def type_name(code: int) -> str:
    return TYPE_NAMES.get(code, f"type {code}")


def _column(columns: Sequence[str], name: str) -> int:
    """The index of the column named ``name`` whatever its case (0.12 and 2.x differ)."""
    for i, column in enumerate(columns):
        if column.replace(" ", "").lower() == name:
            return i
    raise KeyError(name)


def _names(path: str) -> tuple[str, ...]:
    return tuple(node_name(n) for n in split_path(path))


class SchemaGuard:
    """The series types a data centre holds, asked for per device and kept."""

    def __init__(self, client: Client, dialect: str) -> None:
        self.client = client
        self.dialect = dialect
        self._types: dict[str, dict[str, str]] = {}  # device -> measurement -> type name

    def _device_types(self, device: str) -> dict[str, str]:
        known = self._types.get(device)
        if known is not None:
            return known
        columns, rows = self.client.query(f"SHOW TIMESERIES {device_path(device, self.dialect)}.*")
        path_at, type_at = _column(columns, "timeseries"), _column(columns, "datatype")
        own = _names(device)
        found: dict[str, str] = {}
        for row in rows:  # 0.12 reads the pattern as a prefix: devices below answer too
            try:
                names = _names(str(row[path_at]))
            except ValueError:
                continue
            if names[:-1] == own:
                found[names[-1]] = str(row[type_at]).upper()
        self._types[device] = found
        return found

    def _points(self, device: str, measurement: str) -> int:
        path = series_path(device, measurement, self.dialect)
        head, _, last = path.rpartition(".")
        _, rows = self.client.query(f"SELECT count({last}) FROM {head}")
        return sum(int(v) for row in rows for v in row if isinstance(v, int))

    def check(self, series: Iterable[tuple[str, str, int]]) -> str | None:
        """Settle each series of a file whose type the data centre holds otherwise (see
        the module doc); the reason the file cannot be loaded, or None. Raises what the
        client raises (IoTDB unreachable, a refused statement)."""
        for device, measurement, code in series:
            if not device.startswith("root."):
                continue  # a table-model device: the table's own schema decides
            try:
                held = self._device_types(device).get(node_name(measurement))
            except (Unwritable, ValueError):
                continue  # no statement can name it; the load says what IoTDB thinks
            wanted = type_name(code)
            if held is None or held == wanted:
                continue
            where = f"{printable(device)}.{printable(measurement)}"
            points = self._points(device, measurement)
            if points:
                return (
                    f"series {where} is {wanted} in the file and {held} in IoTDB, which holds "
                    f"{points} points of it (delete them in IoTDB, or the series with DELETE "
                    "TIMESERIES, to load it)"
                )
            self.client.sql(f"DELETE TIMESERIES {series_path(device, measurement, self.dialect)}")
            log.warning(
                "series %s was %s in IoTDB with no point left, and is %s in the file: "
                "deleted in IoTDB, to be created again by the load (as at the edge)",
                where,
                held,
                wanted,
            )
            self._types.pop(device, None)
        return None

    def loaded(self, series: Iterable[tuple[str, str, int]]) -> None:
        """A file with ``series`` is in: IoTDB created those it lacked, with their types."""
        for device, measurement, code in series:
            known = self._types.get(device)
            if known is not None:
                known.setdefault(node_name(measurement), type_name(code))

    def forget(self) -> None:
        """Schema changed outside this storage's sight (a session opened again)."""
        self._types.clear()
