"""The Spark loader (``sealsync load``, docs/design.md §6): the receiver's files into a table.

Entry point :func:`run_load`; the table layout and how to read it are described
in :mod:`spark_loader.table` (readers merge schemas: Spark's
``mergeSchema`` option or :func:`read_arrow`).
"""

from __future__ import annotations

from spark_loader.ingest import run_load
from spark_loader.report import LoadReport
from spark_loader.table import read_arrow

__all__ = ["LoadReport", "read_arrow", "run_load"]
