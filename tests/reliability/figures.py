"""Figures the reliability tests record, for ``python -m tests.reliability.report``.

A test calls :func:`record` with a category and numbers; when the environment names a
figures file (``SEALSYNC_FIGURES``), one JSON line is appended to it. Under a plain
``pytest`` run nothing is written, so recording never changes what a test proves.
"""

from __future__ import annotations

import json
import os
from typing import Any

ENV = "SEALSYNC_FIGURES"


def record(category: str, **numbers: Any) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"category": category, **numbers}, sort_keys=True) + "\n")
