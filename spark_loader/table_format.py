"""What the loader asks of a table format: the seam between the run and Delta Lake.

A run reads the table's latest version without Spark (to decide whether there is
anything to do), keeps its own view of the files added and removed, and commits all
of it as one version. :mod:`.delta_format` is the one implementation; a module with
these methods is another format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from sealsync.config.location import TableLocation
from spark_loader.delta_log import DataFile, Snapshot
from spark_loader.store import Store

Plan = tuple[list[dict[str, Any]], dict[str, Any] | None]
"""A commit's actions, and the metadata it sets (None: the schema stays)."""
Keys = Mapping[str, Sequence[str]]
"""Column -> the measurement and kind it holds (spark_loader/columns.py)."""


class TableFormat(Protocol):
    name: str
    app_id: str
    """The application id under which a version records the run that wrote it (a
    loader with an id appends ``-<id>``: :class:`.table_layout.WriterNames`)."""

    def read(self, table: str, store: Store) -> Snapshot:
        """The latest version: its files, the runs it records, its metadata."""
        ...

    def is_table(self, table: str, store: Store) -> bool: ...

    def read_arrow(self, table: str, store: Store, version: int | None = None) -> pa.Table:
        """A version's rows, without Spark (for tests, examples and small readers)."""
        ...

    def file_stats(self, meta: Any) -> str:
        """The statistics a data file's entry carries, from its Parquet footer."""
        ...

    def schema_fields(self, snapshot: Snapshot) -> list[dict[str, Any]]: ...

    def metadata(
        self, snapshot: Snapshot, columns: dict[str, str], keys: Keys
    ) -> dict[str, Any] | None:
        """The table metadata a commit must set to have ``columns`` (None: unchanged)."""
        ...

    def plan(
        self,
        snapshot: Snapshot,
        added: Iterable[DataFile],
        removed: Iterable[DataFile],
        columns: dict[str, str],
        keys: Keys,
    ) -> Plan | None: ...

    def commit(
        self,
        spark: Any,
        table: TableLocation,
        plan: Plan,
        read_version: int,
        run_version: int,
        app_id: str,
    ) -> int:
        """Commit ``plan`` as one version planned against ``read_version``, recording
        run ``run_version`` of ``app_id``; its number."""
        ...
