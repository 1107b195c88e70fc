"""The table's format, Delta Lake: a version read without Spark, the run's changes as
one Delta commit's actions, and that commit through Delta's own transaction.

This module is the :class:`~spark_loader.table_format.TableFormat` the loader uses;
:mod:`.delta_log` (the log read without Spark) and :mod:`.delta_commit` (Delta's
``OptimisticTransaction`` through the session's JVM) are its two halves. Everything
Delta-specific the run does goes through here: another table format is another module
with the same methods.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from sealsync.config.location import TableLocation
from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN
from spark_loader import delta_commit, delta_log
from spark_loader.columns import field_metadata, key_of
from spark_loader.delta_log import APP_ID, DataFile, Snapshot
from spark_loader.store import Store
from spark_loader.table_format import Keys, Plan
from spark_loader.table_layout import PARTITION_COLUMNS

#: Column mapping (Delta): the table property and the field metadata it uses.
MAPPING_MODE = "delta.columnMapping.mode"
MAPPING_MAX_ID = "delta.columnMapping.maxColumnId"
MAPPING_ID = "delta.columnMapping.id"
MAPPING_PHYSICAL = "delta.columnMapping.physicalName"


class DeltaFormat:
    """Delta Lake, read and committed as the module text says."""

    name = "delta"
    app_id = APP_ID

    def read(self, table: str, store: Store) -> Snapshot:
        """The latest version (an empty snapshot, version -1, if there is none)."""
        return delta_log.read(table, store=store)

    def is_table(self, table: str, store: Store) -> bool:
        return delta_log.is_delta(table, store)

    def read_arrow(self, table: str, store: Store, version: int | None = None) -> pa.Table:
        return delta_log.read_arrow(table, version, store)

    def file_stats(self, meta: Any) -> str:
        """A data file's statistics, from its Parquet footer."""
        return _stats(meta)

    def schema_fields(self, snapshot: Snapshot) -> list[dict[str, Any]]:
        """The table's columns as the Delta schema has them (empty for a new table)."""
        meta = snapshot.metadata
        if not meta or not meta.get("schemaString"):
            return []
        fields: list[dict[str, Any]] = json.loads(meta["schemaString"])["fields"]
        return fields

    def plan(
        self,
        snapshot: Snapshot,
        added: Iterable[DataFile],
        removed: Iterable[DataFile],
        columns: dict[str, str],
        keys: Keys,
    ) -> Plan | None:
        """The run's changes as the actions of one Delta commit, and the metadata it
        must set (None if the schema stays); None if there is nothing to commit.

        ``columns``: the measurement columns (name -> Spark type JSON) the table must
        have, ``keys`` what each holds; new ones are added to its schema in the same
        commit, each field's metadata naming its measurement and kind.
        """
        added, removed = list(added), list(removed)
        metadata = self.metadata(snapshot, columns, keys)
        if not added and not removed and metadata is None:
            return None
        now = int(time.time() * 1000)
        actions: list[dict[str, Any]] = []
        for f in removed:
            actions.append(
                {
                    "remove": {
                        "path": f.log_path,
                        "deletionTimestamp": now,
                        "dataChange": True,
                        "extendedFileMetadata": True,
                        "partitionValues": f.partition,
                        "size": f.size,
                    }
                }
            )
        for f in added:
            add: dict[str, Any] = {
                "path": f.log_path,
                "partitionValues": f.partition,
                "size": f.size,
                "modificationTime": f.modification_time,
                "dataChange": True,
            }
            if f.stats:
                add["stats"] = f.stats
            if f.tags:
                add["tags"] = f.tags
            actions.append({"add": add})
        return actions, metadata

    def commit(
        self,
        spark: Any,
        table: TableLocation,
        plan: Plan,
        read_version: int,
        run_version: int,
        app_id: str = APP_ID,
    ) -> int:
        """Commit ``plan`` as one version (Delta's transaction; :mod:`.delta_commit`)."""
        actions, metadata = plan
        return delta_commit.commit(
            spark, table, actions, metadata, read_version, run_version, app_id
        )

    def metadata(
        self, snapshot: Snapshot, columns: dict[str, str], keys: Keys
    ) -> dict[str, Any] | None:
        """The Delta metadata the commit must set: a new table's, or the current one's
        with the new measurement columns; None if the schema stays as it is.

        Column names never need Delta's column mapping (:mod:`.columns` escapes what
        Delta refuses), so the table's protocol stays as Delta writes it; a table an
        operator switched to column mapping by name keeps it, each new column's physical
        name its own name.
        """
        fields = self.schema_fields(snapshot)
        have = {f["name"] for f in fields}
        new = []
        for n, t in sorted(columns.items()):
            if n not in have:
                measurement, kind = key_of(n, t, keys)
                metadata = field_metadata(measurement, kind)
                new.append(
                    {"name": n, "type": json.loads(t), "nullable": True, "metadata": metadata}
                )
        if fields and not new:
            return None
        if not fields:
            base = [
                {"name": TIME_COLUMN, "type": "long", "nullable": True, "metadata": {}},
                {"name": DEVICE_COLUMN, "type": "string", "nullable": True, "metadata": {}},
            ]
            tail = [
                {"name": c, "type": "string", "nullable": True, "metadata": {}}
                for c in PARTITION_COLUMNS
            ]
            meta: dict[str, Any] = {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "partitionColumns": list(PARTITION_COLUMNS),
                "configuration": {},
                "createdTime": int(time.time() * 1000),
            }
            merged = [*base, *new, *tail]
        else:
            meta = dict(snapshot.metadata or {})
            cut = next(
                (i for i, f in enumerate(fields) if f["name"] in PARTITION_COLUMNS), len(fields)
            )
            merged = [*fields[:cut], *new, *fields[cut:]]
        config = dict(meta.get("configuration") or {})
        if config.get(MAPPING_MODE) == "name":
            merged, config = _map_by_name(merged, config)
        meta["configuration"] = config
        schema = {"type": "struct", "fields": merged}
        meta["schemaString"] = json.dumps(schema, separators=(",", ":"))
        return meta


FORMAT = DeltaFormat()
"""The format of every table the loader writes."""


def _map_by_name(
    fields: list[dict[str, Any]], config: dict[str, str]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``fields`` and ``config`` with column mapping by name: every field an id and its
    own name as physical name (those it has stay), and the largest id recorded."""
    top = int(config.get(MAPPING_MAX_ID, "0"))
    top = max([top, *(int(f.get("metadata", {}).get(MAPPING_ID, 0)) for f in fields)])
    out = []
    for f in fields:
        meta = dict(f.get("metadata") or {})
        if MAPPING_ID not in meta:
            top += 1
            meta[MAPPING_ID] = top
        meta.setdefault(MAPPING_PHYSICAL, f["name"])
        out.append({**f, "metadata": meta})
    return out, {**config, MAPPING_MODE: "name", MAPPING_MAX_ID: str(top)}


def _stats(meta: Any) -> str:
    """Delta statistics of a Parquet file from its footer: rows, and the bounds of
    time and device where the footer has them (readers skip files by them)."""
    stats: dict[str, Any] = {"numRecords": meta.num_rows}
    if meta.num_rows == 0:
        return json.dumps(stats)
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    for column in (TIME_COLUMN, DEVICE_COLUMN):
        if column not in names:
            continue
        i = names.index(column)
        lo = hi = None
        for r in range(meta.num_row_groups):
            s = meta.row_group(r).column(i).statistics
            if s is None or not s.has_min_max:
                lo = hi = None
                break
            a, b = _value(s.min), _value(s.max)
            lo = a if lo is None or a < lo else lo
            hi = b if hi is None or b > hi else hi
        if lo is not None and hi is not None:
            low[column], high[column] = lo, hi
    if low:
        stats["minValues"], stats["maxValues"] = low, high
    return json.dumps(stats)


def _value(value: Any) -> Any:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
