"""The receiver's own umask: nothing it makes is writable by group or others, or
readable by others, whatever umask it was started with.

The receiver creates folders and files for every sender (staging, storage, logs,
state) with the default modes, which the process umask trims. Started under umask 000
(a service manager, a container's default, a careless shell), every one of them was
writable by every local user, who could then swap a staged file or a sender's log.
So the receiver adds :data:`RECEIVER_UMASK` to whatever umask it finds while it runs:
group may still read (a Spark loader or an IoTDB run in the receiver's group), others
nothing; a stricter umask (077) is kept as it is.

The umask belongs to the process, and a host may embed more than one receiver or
start and stop them in turn: the first :func:`tighten` saves the host's umask, the
last :func:`release` gives it back.
"""

from __future__ import annotations

import os
import threading

RECEIVER_UMASK = 0o027

_lock = threading.Lock()
_holders = 0
_saved: int | None = None


def tighten() -> None:
    """Add :data:`RECEIVER_UMASK` to the process umask until the matching :func:`release`."""
    global _holders, _saved
    with _lock:
        found = os.umask(RECEIVER_UMASK)  # reading it means setting it
        os.umask(found | RECEIVER_UMASK)
        if _holders == 0:
            _saved = found
        _holders += 1


def release() -> None:
    """Undo one :func:`tighten`; the last gives the process its umask from before."""
    global _holders, _saved
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0 and _saved is not None:
            os.umask(_saved)
            _saved = None
