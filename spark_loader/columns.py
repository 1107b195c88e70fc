"""Which table column holds a series: IoTDB's data model in a table of columns.

In IoTDB a series is (device, measurement), and its type belongs to the series: two
devices may give one measurement name two types, a series deleted and created again
may come back with another type, names differ in case (``Val``, ``val``), and a
back-quoted name may hold characters no Delta column name may (`` a b=c;{x}``) or be
``sender``. A table of one column per measurement name can hold none of that without
turning a value into another type or refusing a file. So a column is keyed by the
measurement *and* the kind of its values (integers are ``long``, floating point
``double``, each exact; every other type its own), and named:

* the measurement itself, when no column of the table has that name in any case and
  it holds nothing Delta refuses in a name;
* otherwise the measurement with the refused characters (and ``%``) written ``%XX``,
  then, if that is taken or reserved, ``<name>__<kind>`` and ``<name>__<kind>_<n>``.

Each column records the measurement and kind it holds in its Delta field metadata
(``sealsync.measurement``, ``sealsync.kind``), so a reader finds every column of a
measurement by its metadata, and the assignment never changes once made: a column of
an earlier table without that metadata is taken as its own name and type. No column
mapping (Delta's table feature that changes the table's protocol) is ever needed.

What one sender adds is bounded (``max_new_columns`` a run, per sender, default
:data:`MAX_NEW_COLUMNS_PER_RUN`): a file that would add more waits for the next run,
with one line naming the bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from spark_loader.table_layout import KEY_COLUMN, PARTITION_COLUMNS

META_MEASUREMENT = "sealsync.measurement"
META_KIND = "sealsync.kind"
#: Characters Delta refuses in a column name without column mapping.
REFUSED = " ,;{}()\n\t="
RESERVED = frozenset(
    n.lower() for n in (TIME_COLUMN, DEVICE_COLUMN, KEY_COLUMN, *PARTITION_COLUMNS)
)
MAX_NEW_COLUMNS_PER_RUN = 1000
"""Columns one sender's files may add to the table in one run."""
_KINDS = {
    "byte": "long",
    "short": "long",
    "integer": "long",
    "long": "long",
    "float": "double",
    "double": "double",
}


def kind_of(type_json: str) -> str:
    """A Spark type (its JSON) as the kind of column that holds it exactly."""
    simple = json.loads(type_json)
    name = simple if isinstance(simple, str) else str(simple.get("type", "unknown"))
    return _KINDS.get(name, name)


def kind_of_arrow(t: Any) -> str:
    """The kind of column an Arrow type goes to: that of the Spark type PySpark makes
    of it, as the schema passes see a file (a reader that saw another kind would leave
    the column null rather than find its values)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type

    if pa.types.is_dictionary(t):
        t = t.value_type
    try:
        return kind_of(from_arrow_type(t).json())
    except Exception:  # a type Spark has none for: no column of the table is of it
        return str(t)


def arrow_source(field: Any) -> tuple[str, str | None]:
    """(measurement, kind) an Arrow field of a target schema takes its values from;
    a field without the loader's metadata (time, device) takes its own name."""
    meta = field.metadata or {}
    measurement = meta.get(META_MEASUREMENT.encode())
    kind = meta.get(META_KIND.encode())
    if measurement is None:
        return field.name, None
    return measurement.decode("utf-8"), None if kind is None else kind.decode("utf-8")


def escape(measurement: str) -> str:
    """``measurement`` with what Delta refuses in a column name (and ``%``) as ``%XX``;
    unchanged when it holds neither."""
    if not any(c in REFUSED for c in measurement):
        return measurement
    return "".join(f"%{ord(c):02X}" if c in REFUSED or c == "%" else c for c in measurement)


def field_metadata(measurement: str, kind: str) -> dict[str, str]:
    """What a column's Delta field (and Spark struct field) says it holds."""
    return {META_MEASUREMENT: measurement, META_KIND: kind}


def key_of(column: str, type_json: str, keys: Mapping[str, Sequence[str]]) -> tuple[str, str]:
    """(measurement, kind) a column holds: its recorded key, else its own name and type
    (a column of a table written before columns were keyed)."""
    found = keys.get(column)
    return (str(found[0]), str(found[1])) if found else (column, kind_of(type_json))


def keys_of_field(field: Mapping[str, Any]) -> tuple[str, str]:
    """(measurement, kind) of a Delta schema field."""
    meta = field.get("metadata") or {}
    name = str(field["name"])
    kind = str(meta.get(META_KIND) or kind_of(json.dumps(field["type"])))
    return str(meta.get(META_MEASUREMENT, name)), kind


class ColumnLimit(Exception):
    """A sender's files would add more columns than a run allows it."""


@dataclass
class Assigner:
    """One run's assignment of columns over the table's (``columns``: column -> type
    JSON, ``keys``: column -> [measurement, kind], both updated in place as columns are
    made), at most ``limit`` new ones per sender."""

    columns: dict[str, str]
    keys: dict[str, list[str]]
    limit: int = MAX_NEW_COLUMNS_PER_RUN
    by_key: dict[tuple[str, str], str] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    added_by: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for column, type_json in self.columns.items():
            self.taken.add(column.lower())
            self.by_key.setdefault(key_of(column, type_json, self.keys), column)

    def assign(
        self, series: Iterable[tuple[str, str]], sender: str = ""
    ) -> dict[tuple[str, str], str]:
        """The column of each of one file's series ((measurement, normalised type JSON)), as
        (measurement, kind) -> column, new ones made; ColumnLimit, and nothing made, if
        the file would take its sender past its bound for this run (a file waits whole:
        none of its columns reach the table before it does)."""
        typed = {(measurement, kind_of(t)): t for measurement, t in series}
        new = {key for key in typed if key not in self.by_key}
        if self.added_by.get(sender, 0) + len(new) > self.limit:
            raise ColumnLimit(
                f"it would add more than {self.limit} new columns to the table in one run "
                "(max_new_columns): its files wait; raise max_new_columns in [loader] if "
                "its devices really have that many measurements"
            )
        return {key: self._column(*key, t, sender) for key, t in typed.items()}

    def _column(self, measurement: str, kind: str, type_json: str, sender: str) -> str:
        found = self.by_key.get((measurement, kind))
        if found is not None:
            return found
        name = self._name_for(measurement, kind)
        self.by_key[(measurement, kind)] = name
        self.taken.add(name.lower())
        self.columns[name] = type_json
        self.keys[name] = [measurement, kind]
        self.added_by[sender] = self.added_by.get(sender, 0) + 1
        return name

    def _name_for(self, measurement: str, kind: str) -> str:
        base = escape(measurement) or "%00"
        if self._free(base):
            return base
        qualified = f"{base}__{kind}"
        n, candidate = 1, qualified
        while not self._free(candidate):
            n += 1
            candidate = f"{qualified}_{n}"
        return candidate

    def _free(self, name: str) -> bool:
        return name.lower() not in self.taken and name.lower() not in RESERVED


def measurements_of(fields: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Column -> the measurement it holds, for every measurement column of a table's
    schema (what a reader needs to put a table's row back as IoTDB's series)."""
    return {
        str(f["name"]): keys_of_field(f)[0]
        for f in fields
        if str(f["name"]).lower() not in RESERVED
    }
