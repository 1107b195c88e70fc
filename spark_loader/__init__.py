"""The Spark loader (``sealsync load``, docs/design.md §6): the receiver's files into a table.

Entry point :func:`run_load`; the table is a Delta Lake table, its layout described in
:mod:`spark_loader.table` (read it as Delta: Spark's ``format("delta")``, the
``deltalake`` package, or :func:`read_arrow`, any version of it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_loader.delta_log import read_arrow
    from spark_loader.report import LoadReport
    from spark_loader.run import run_load

__all__ = ["LoadReport", "read_arrow", "run_load"]
_HOMES = {"LoadReport": "report", "read_arrow": "delta_log", "run_load": "run"}


def __getattr__(name: str) -> Any:
    """Imported on first use, so that running one module (``python -m
    spark_loader.jvm``) does not import the whole loader before it (runpy warns)."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"spark_loader.{_HOMES[name]}"), name)
