"""The Spark loader (``sealsync load``, DESIGN §6): the receiver's files into a table.

Entry point :func:`run_load`; the table layout and how to read it are described
in :mod:`sealsync.spark_loader.table` (readers merge schemas: Spark's
``mergeSchema`` option or :func:`read_arrow`).
"""

from __future__ import annotations

from .ingest import run_load
from .report import LoadReport
from .table import read_arrow

__all__ = ["LoadReport", "read_arrow", "run_load"]
