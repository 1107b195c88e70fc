"""Figures the reliability tests record, for ``python -m tests.reliability.report``.

A test calls :func:`record` with a category and numbers; when the environment names a
figures file (``SEALSYNC_FIGURES``), one JSON line is appended to it. Under a plain
``pytest`` run nothing is written, so recording never changes what a test proves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ENV = "SEALSYNC_FIGURES"
ROOT = Path(__file__).resolve().parents[2]


def record(category: str, **numbers: Any) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"category": category, **numbers}, sort_keys=True) + "\n")


def run_suite(folder: str, args: list[str]) -> tuple[int, list[dict[str, Any]]]:
    """Run ``pytest tests/<folder>`` with a figures file: its exit code and the rows."""
    with tempfile.TemporaryDirectory() as tmp:
        figures = Path(tmp) / "figures.jsonl"
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            + [str(ROOT / "tests" / folder), *args],
            cwd=ROOT,
            env=dict(os.environ, **{ENV: str(figures)}),
        )
        lines = figures.read_text().splitlines() if figures.exists() else []
    return proc.returncode, [json.loads(line) for line in lines]
