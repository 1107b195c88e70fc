"""InspectPool targets for the tests; they run in worker processes, so this module is light."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sealsync.formats.common import FileInfo


def crashing_inspect(path: str) -> FileInfo:
    """Dies on ``crash.*``, hangs on ``hang.*``, else a fixed answer."""
    name = Path(path).stem
    if name == "crash":
        os._exit(3)
    if name == "hang":
        time.sleep(60)
    return FileInfo(("root.fine",), 1)
