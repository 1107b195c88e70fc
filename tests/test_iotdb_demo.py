"""``examples/iotdb_demo.py``: the demo's pipeline with a real IoTDB on both ends, and its
one line and exit 69 when there is nothing to run IoTDB with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from iotdb_server import V3_RELEASE

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "iotdb_demo.py"

pytestmark = pytest.mark.slow  # each runs the example as a process


def test_without_java_one_line_names_it_and_exit_69(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SEALSYNC_IOTDB_JAVA")}
    env["PATH"] = str(tmp_path / "empty")  # no java, no mvn
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--workdir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 69, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("iotdb_demo: error: cannot run IoTDB 0.12.0: no java"), lines
    assert "Java 17" in lines[0] and "sealsync demo" in lines[0]
    assert not (tmp_path / "demo").exists()  # nothing written before the check


def test_the_iotdb_demo_agrees_on_real_servers(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--release", V3_RELEASE, "--workdir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("edge, data centre and table agree: "), last
    # two devices, two batches of points, minus the 100 times of d2 deleted
    assert int(last.split(": ")[1].split()[0]) == 2 * 2 * 600 - 100
