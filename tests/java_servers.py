"""What every Java server the tests start needs: its jars, resolved from Maven Central by
Maven and cached; a Java; free loopback ports; and a process group of its own, tied to
the test run, that a stop signals whole.

Why Maven and a cache: a server's release is named by its Maven coordinates, so the
project ships no jar and no download script, only a small pom. Maven downloads what
``~/.m2`` lacks; the class path it builds is kept beside the pom, so a later run whose
jars are all still in ``~/.m2`` starts without Maven and without the network.

Used by :mod:`iotdb_server` (IoTDB) and :mod:`lake_servers` (HDFS, an S3 server,
Spark's ``hadoop-aws``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESOLVE_TIMEOUT = 1200.0


class ServerUnavailable(RuntimeError):
    """The server cannot run here: not resolvable, no Java, or it did not start. The
    message names the cause (the Maven error, the server's log and its tail)."""


def cache_folder(env: str, name: str) -> Path:
    """Where a server's resolved class paths are kept between runs: ``$env`` if set,
    else ``~/.cache/sealsync/<name>``."""
    configured = os.environ.get(env)
    return Path(configured) if configured else Path.home() / ".cache" / "sealsync" / name


def find_java(*, named_by: str | None = None) -> str:
    """The ``java`` to start servers with: ``$named_by`` if set, else ``$JAVA_HOME``'s,
    else the PATH's."""
    for candidate in (
        os.environ.get(named_by) if named_by else None,
        os.path.join(os.environ["JAVA_HOME"], "bin", "java")
        if os.environ.get("JAVA_HOME")
        else None,
        shutil.which("java"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    hint = f" or set {named_by}" if named_by else ""
    raise ServerUnavailable(f"no java found; install Java 17{hint}")


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free right now (all held open while chosen, so
    none is picked twice)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def resolve_classpath(folder: Path, pom: str, what: str) -> list[str]:
    """The jars ``pom``'s dependencies resolve to: from ``folder``'s cache when the pom
    is unchanged and every jar is still in ``~/.m2``, else resolved by Maven (which
    downloads only what ``~/.m2`` lacks) and cached. ``what`` names the server in
    errors."""
    folder.mkdir(parents=True, exist_ok=True)
    cached = folder / "classpath.txt"
    if (
        (folder / "pom.xml").is_file()
        and (folder / "pom.xml").read_text() == pom
        and cached.is_file()
    ):
        jars = [j for j in cached.read_text().strip().split(os.pathsep) if j]
        if jars and all(os.path.isfile(j) for j in jars):
            return jars
    (folder / "pom.xml").write_text(pom)
    cached.unlink(missing_ok=True)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServerUnavailable(f"no mvn on PATH; install Maven to resolve {what}")
    try:
        done = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                "-Dstyle.color=never",
                "dependency:build-classpath",
                "-Dmdep.outputFile=classpath.txt",
            ],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=RESOLVE_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        raise ServerUnavailable(f"{what}: Maven took over {RESOLVE_TIMEOUT:.0f}s") from exc
    if done.returncode != 0 or not cached.is_file():
        plain = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)  # Maven colours some lines anyway
        errors = [line for line in plain.splitlines() if line.startswith("[ERROR] ")]
        raise ServerUnavailable(
            f"{what} does not resolve from Maven Central: "
            + (errors[0].removeprefix("[ERROR] ") if errors else done.stderr.strip()[-500:])
        )
    return [j for j in cached.read_text().strip().split(os.pathsep) if j]


def own_session_tied_to_parent() -> None:
    """In the child before exec: a session (and process group) of its own, which a stop
    signals whole; and SIGTERM from the kernel if the thread that started it dies first
    (a test run killed with -9), so no JVM outlives its test. Linux only."""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def group_alive(group: int) -> bool:
    """Whether any process of process group ``group`` is still running."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(process: subprocess.Popen[Any], timeout: float) -> bool:
    """SIGTERM ``process``'s group (its children too: a Spark worker's executors), and
    SIGKILL what is left of it after ``timeout``; whether the group was gone by then
    (if not, the caller reports the survivors it had to kill)."""
    group = process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    while group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(group) or process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        process.wait()
        return False
    return True


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` of a server's log, headed by its path (the whole log is there)."""
    if not path.is_file() or not path.stat().st_size:
        return f"--- {path} (empty)"
    tail = path.read_text(errors="replace").splitlines()[-lines:]
    return f"--- {path}\n" + "\n".join(tail)
