"""The loader's Java matcher (``io.sealsync.tsfile.PathPattern``, in the loader's jar)
answers the shared table of path-pattern cases as the Python one does
(``tests/test_formats_mods.py`` holds the Python side to the same table)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from spark_loader.jvm import JAR

CASES = json.loads((Path(__file__).parent / "path_pattern_cases.json").read_text())["cases"]


@pytest.mark.slow  # a JVM
def test_the_java_matcher_answers_every_shared_case() -> None:
    java = shutil.which("java")
    assert java is not None, "the loader's tests need a Java"
    lines = "".join(
        f"{c.get('rules', '1.2')}\t{c['pattern']}\t{c['device']}\t{c['measurement']}\n"
        for c in CASES
    )
    run = subprocess.run(
        [java, "-cp", str(JAR), "io.sealsync.tsfile.PathPattern"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    got = run.stdout.split("\n")[:-1]
    want = [str(c["expect"]).lower() for c in CASES]
    assert got == want
