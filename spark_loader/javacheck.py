"""Is there a Java Spark can start with? Asked before Spark is, for a one-line answer.

PySpark starts the driver JVM through ``spark-submit``, which runs
``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set and else the ``java`` on the PATH.
When that fails, all PySpark says is "Java gateway process exited before sending its
port number"; the cause (``JAVA_HOME is not set``, ``.../bin/java: No such file``, an
``UnsupportedClassVersionError``) is only in a log. So the loader looks for the
same ``java`` itself, asks its version, and stops with :class:`JavaUnavailable`
(exit 69, sysexits' EX_UNAVAILABLE) and one line naming the cause and the fix.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from sealsync.errors import EXIT_UNAVAILABLE, SealsyncError

#: The oldest Java the bundled Spark (4.x) runs on.
MIN_JAVA = 17
_VERSION_RE = re.compile(r'version "([^"]+)"')


class JavaUnavailable(SealsyncError):
    """No Java that Spark can start with; the message says why and what to do."""

    exit_code = EXIT_UNAVAILABLE
    kind = "java"


def major_version(text: str) -> int | None:
    """The major version in ``java -version`` output: ``"1.8.0_392"`` -> 8,
    ``"17.0.15"`` -> 17, ``"21"`` -> 21; None if there is none."""
    found = _VERSION_RE.search(text)
    if found is None:
        return None
    parts = re.split(r"[._+-]", found.group(1))
    try:
        first = int(parts[0])
        return int(parts[1]) if first == 1 and len(parts) > 1 else first
    except ValueError:
        return None


def find_java(env: dict[str, str] | None = None) -> str:
    """The ``java`` spark-submit would run, or JavaUnavailable saying why there is none."""
    env = dict(os.environ if env is None else env)
    home = env.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not java.is_file() or not os.access(java, os.X_OK):
            raise JavaUnavailable(
                f"cannot start Spark: JAVA_HOME is {home}, but {java} does not exist or "
                f"is not executable; set JAVA_HOME to a Java {MIN_JAVA}+ installation "
                "(the folder that holds bin/java) or unset it to use the java on the PATH"
            )
        return str(java)
    found = shutil.which("java", path=env.get("PATH", os.defpath))
    if found is None:
        raise JavaUnavailable(
            f"cannot start Spark: no java on the PATH and JAVA_HOME is not set; install "
            f"Java {MIN_JAVA} or newer (e.g. apt-get install openjdk-{MIN_JAVA}-jre-headless) "
            "or set JAVA_HOME to one"
        )
    return found


def check_java(env: dict[str, str] | None = None, timeout: float = 60.0) -> int:
    """The major version of the Java Spark would start with; JavaUnavailable if there
    is none, it does not run, or it is older than ``MIN_JAVA``."""
    java = find_java(env)
    try:
        done = subprocess.run(
            [java, "-version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=dict(os.environ if env is None else env),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaUnavailable(f"cannot start Spark: {java} -version failed: {exc}") from None
    output = done.stderr + done.stdout
    major = major_version(output)
    if done.returncode != 0 or major is None:
        last = (output.strip().splitlines() or ["no output"])[-1][:200]
        raise JavaUnavailable(
            f"cannot start Spark: {java} -version failed (exit {done.returncode}): {last}; "
            f"install Java {MIN_JAVA} or newer"
        )
    if major < MIN_JAVA:
        raise JavaUnavailable(
            f"cannot start Spark: {java} is Java {major}, Spark needs Java {MIN_JAVA} or "
            f"newer; install it and point JAVA_HOME (or the PATH) at it"
        )
    return major
