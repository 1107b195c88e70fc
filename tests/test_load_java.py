"""`sealsync load` without a usable Java: one line naming the cause and the fix, exit 69.

Real processes: the loader runs as `python -m sealsync` with a PATH and JAVA_HOME that
lack java (or hold an old one); it must stop before PySpark's "Java gateway process
exited before sending its port number".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from config_helpers import loader_config_file
from spark_loader_helpers import two_senders

from sealsync.errors import EXIT_UNAVAILABLE
from spark_loader import lastrun
from spark_loader.javacheck import MIN_JAVA, JavaUnavailable, check_java, major_version


def _loader_toml(tmp_path: Path) -> Path:
    _, recv = two_senders(tmp_path)  # files to ingest: the run must start Spark
    config = recv.config(tmp_path)
    return loader_config_file(tmp_path / "loader.toml", config)


def _load(toml: Path, path: str, java_home: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PATH")}
    env["PATH"] = path
    if java_home is not None:
        env["JAVA_HOME"] = java_home
    return subprocess.run(
        [sys.executable, "-m", "sealsync", "load", "--config", str(toml)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == EXIT_UNAVAILABLE, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if not ln.startswith("load: ")]
    assert len(lines) == 1, result.stderr  # progress lines aside: the one error line
    assert "Java gateway" not in result.stderr and "Traceback" not in result.stderr
    return lines[0]


def _fake_java(folder: Path, version: str) -> Path:
    """A ``java`` that answers ``-version`` like an old JDK does (on stderr)."""
    folder.mkdir(parents=True)
    java = folder / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2021-01-19' >&2\n")
    java.chmod(0o755)
    return java


@pytest.mark.slow  # a real `sealsync load` process
def test_no_java_on_the_path_and_no_java_home(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()

    line = _one_line(_load(_loader_toml(tmp_path), str(empty), None))

    assert "no java on the PATH and JAVA_HOME is not set" in line
    assert f"install Java {MIN_JAVA} or newer" in line
    last = lastrun.read(tmp_path / "main-state")  # recorded for status and metrics
    assert last is not None and (last["outcome"], last["kind"]) == ("failed", "java")


@pytest.mark.slow  # a real `sealsync load` process
def test_java_home_without_bin_java(tmp_path: Path) -> None:
    home = tmp_path / "jdk"
    home.mkdir()

    line = _one_line(_load(_loader_toml(tmp_path), "/usr/bin:/bin", str(home)))

    assert f"JAVA_HOME is {home}, but {home}/bin/java does not exist" in line
    assert "set JAVA_HOME to a Java" in line


@pytest.mark.slow  # a real `sealsync load` process
def test_a_java_too_old_for_spark(tmp_path: Path) -> None:
    java = _fake_java(tmp_path / "old" / "bin", "11.0.2")

    line = _one_line(_load(_loader_toml(tmp_path), f"{java.parent}:/usr/bin:/bin", None))

    assert f"{java} is Java 11, Spark needs Java {MIN_JAVA} or newer" in line
    # JAVA_HOME wins over the PATH, as in spark-submit.
    line = _one_line(_load(_loader_toml(tmp_path / "b"), "/usr/bin:/bin", str(java.parent.parent)))
    assert f"{java} is Java 11" in line


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('java version "1.8.0_392"', 8),
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "22-ea"', 22),
        ("no version here", None),
    ],
)
def test_java_version_strings(text: str, major: int | None) -> None:
    assert major_version(text) == major


@pytest.mark.slow  # runs java -version
def test_the_java_here_passes_or_names_its_problem() -> None:
    try:
        assert check_java() >= MIN_JAVA
    except JavaUnavailable as exc:  # a machine without Java: still one line
        assert "\n" not in str(exc) and str(exc).startswith("cannot start Spark")
