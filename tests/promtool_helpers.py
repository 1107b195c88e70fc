"""promtool for the tests of the shipped alert rules and dashboard, installed once per
machine from Debian's ``prometheus`` package.

``apt-get download prometheus`` and ``dpkg-deb -x`` take a few seconds and need no
root (only a missing or stale package list does: then, as root, ``apt-get update``
first); ``go install`` of promtool from the Go module proxy would download and build
close to two gigabytes of modules, minutes on a CI machine. The binary is cached under
``~/.cache/sealsync/promtool/`` (``$XDG_CACHE_HOME`` if set), installed under a lock
and published by a rename, so concurrent runs neither race nor see half a file; a
cached one that no longer runs is replaced. ``SEALSYNC_PROMTOOL`` names another
promtool to use instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from filelock import FileLock

TIMEOUT = 600.0


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sealsync" / "promtool"


def _runs(tool: Path) -> bool:
    try:
        out = subprocess.run(
            [str(tool), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError:
        return False
    return out.returncode == 0 and "promtool" in out.stdout + out.stderr


def promtool() -> Path:
    """A promtool that runs: ``SEALSYNC_PROMTOOL``, else the cached one, installed now
    if there is none. RuntimeError with the commands' own words if it cannot be had."""
    named = os.environ.get("SEALSYNC_PROMTOOL")
    if named:
        if not _runs(Path(named)):
            raise RuntimeError(f"SEALSYNC_PROMTOOL={named} does not run")
        return Path(named)
    folder = cache_dir()
    tool = folder / "promtool"
    if _runs(tool):
        return tool
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / "install.lock", timeout=TIMEOUT):
        if not _runs(tool):  # not installed by another run meanwhile
            _install(folder, tool)
    if not _runs(tool):
        raise RuntimeError(f"{tool} was installed and does not run")
    return tool


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _install(folder: Path, tool: Path) -> None:
    with tempfile.TemporaryDirectory(dir=folder, prefix=".install-") as work:
        tmp = Path(work)
        got = _run(["apt-get", "download", "prometheus"], tmp)
        if got.returncode != 0 and os.geteuid() == 0:  # no package list, or a stale one
            update = _run(["apt-get", "update"], tmp)
            if update.returncode != 0:
                raise RuntimeError(f"apt-get update failed: {update.stderr.strip()[-500:]}")
            got = _run(["apt-get", "download", "prometheus"], tmp)
        debs = sorted(tmp.glob("prometheus_*.deb"))
        if got.returncode != 0 or not debs:
            raise RuntimeError(
                "cannot download Debian's prometheus package for promtool "
                f"(apt-get download prometheus: {got.stderr.strip()[-500:]}); "
                "or set SEALSYNC_PROMTOOL to a promtool"
            )
        unpacked = tmp / "root"
        out = _run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], tmp)
        binary = unpacked / "usr" / "bin" / "promtool"
        if out.returncode != 0 or not binary.is_file():
            raise RuntimeError(f"{debs[0].name} holds no usr/bin/promtool: {out.stderr.strip()}")
        staged = tmp / "promtool"
        shutil.copy2(binary, staged)
        os.chmod(staged, 0o755)
        os.replace(staged, tool)
