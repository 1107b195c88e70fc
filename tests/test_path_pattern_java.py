"""The loader's Java matcher (``io.sealsync.tsfile.PathPattern``, in the loader's jar)
answers the shared table of path-pattern cases as the Python one does
(``tests/test_formats_mods.py`` holds the Python side to the same table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tsfile_read_helpers import java_main

CASES = json.loads((Path(__file__).parent / "path_pattern_cases.json").read_text())["cases"]


@pytest.mark.slow  # a JVM
def test_the_java_matcher_answers_every_shared_case() -> None:
    lines = [
        f"{c.get('rules', '1.2')}\t{c['pattern']}\t{c['device']}\t{c['measurement']}" for c in CASES
    ]
    got = java_main("io.sealsync.tsfile.PathPattern", lines)
    want = [str(c["expect"]).lower() for c in CASES]
    assert got == want
