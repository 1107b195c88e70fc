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
