"""InspectPool targets for the tests; they run in worker processes, so this module is light."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sealsync.formats.common import FileInfo


def crashing_inspect(path: str) -> FileInfo:
    """Dies on ``crash.*`` (after ``crash-late.*``'s second), hangs on ``hang.*``, takes
    two seconds on ``slow*``, else a fixed answer."""
    name = Path(path).stem
    if name == "crash":
        os._exit(3)
    if name == "crash-late":
        time.sleep(0.5)
        os._exit(3)
    if name.startswith("slow"):
        time.sleep(2)
    if name == "hang":
        time.sleep(60)
    return FileInfo(("root.fine",), 1)


def modules_loaded(path: str) -> FileInfo:
    """The modules this worker has imported, as its "devices" (imports nothing)."""
    return FileInfo(tuple(sorted(sys.modules)), 1)


def _note(path: str, what: str) -> None:
    """Append ``what`` to ``calls.log`` beside ``path``: what the workers did, in order."""
    with open(Path(path).parent / "calls.log", "a", encoding="utf-8") as f:
        f.write(f"{what} {Path(path).name} {time.monotonic():.3f}\n")


def bounded_inspect(path: str) -> FileInfo:
    """What the worker bounds must stop: ``spin*`` loops in Python for ever,
    ``native*`` in C without returning to Python (a key derivation of minutes, in one
    call into OpenSSL), ``hog*`` asks for 4 GiB, ``hang*`` sleeps a minute; ``sleep*`` takes
    0.15 s. Each call is noted in ``calls.log``."""
    import hashlib

    name = Path(path).name
    _note(path, "start")
    if name.startswith("spin"):
        while True:
            pass
    if name.startswith("native"):
        hashlib.pbkdf2_hmac("sha256", b"key", b"salt", 500_000_000)
    if name.startswith("hog"):
        block = bytearray(4 << 30)
        return FileInfo((str(len(block)),), 1)
    if name.startswith("hang"):
        time.sleep(60)
    if name.startswith("sleep"):
        time.sleep(0.15)
    _note(path, "end")
    return FileInfo(("root.fine",), 1)
