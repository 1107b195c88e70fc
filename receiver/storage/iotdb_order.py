"""Which of a sender's files a 1.x/2.x data centre must load again after another.

For a point held by several files, the edge's IoTDB answers from the file of highest
priority (:mod:`sealsync.formats.tsfile_names`: unsequence over sequence, then the
higher version in the name). A 1.x/2.x data centre gives every file it loads a
version of its own, newer than every file before it, so it answers from the file it
loaded *last*. The two agree as long as files arrive in priority order, and a
compaction breaks that: the edge merges sequence files into a target that keeps the
first source's version, below an unsequence file that overwrote some of their points,
and the target arrives after that file (``root.w6.d1`` at 5: edge 104, data centre 5,
seen on 2.0.1-beta). A file IoTDB refused and loads later does the same.

So after a file is loaded, every loaded file of the same sender and time partition
that outranks it at the edge and shares a device and a time range with it is loaded
again, and so on for the files that outrank those and overlap them, lowest priority
first: each pair of overlapping files then stands in the data centre in the edge's
order, and the last one loaded of any overlap is the edge's winner. (0.12 and 0.13
take a loaded file's version from its name, the edge's own, and need none of this.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from sealsync.formats.tsfile_names import priority

Ranges = dict[str, tuple[int, int]]  # device -> (first, last) time of the file's points
SPACES = ("sequence", "unsequence")


def partition_of(name: str) -> tuple[str, ...] | None:
    """``(database, region, time partition)`` of ``<space>/<database>/<region>/
    <partition>/<file>``, the files among which IoTDB numbers versions; None for a name
    of another shape."""
    parts = PurePosixPath(name).parts
    if len(parts) != 5 or parts[0] not in SPACES:
        return None
    return parts[1:4]


def database_of(name: str) -> str | None:
    """The database folder a file's relative name holds (``<space>/<database>/...``)."""
    parts = PurePosixPath(name).parts
    return parts[1] if len(parts) >= 3 and parts[0] in SPACES else None


def overlap(a: Ranges | None, b: Ranges | None) -> bool:
    """Whether two files may hold a point of one series at one time (unknown: yes)."""
    if a is None or b is None:
        return True
    for device, (first, last) in a.items():
        other = b.get(device)
        if other is not None and first <= other[1] and other[0] <= last:
            return True
    return False


def load_again(
    name: str, loaded: Iterable[str], ranges: Callable[[str], Ranges | None]
) -> list[str]:
    """The files of ``loaded`` (the same sender and partition) to load again after
    ``name``, in the order to load them (see the module doc)."""
    base = priority(name)
    higher = sorted((other for other in loaded if priority(other) > base), key=priority)
    chosen: set[str] = set()
    frontier = [name]
    while frontier:
        below = frontier.pop()
        rank, held = priority(below), ranges(below)
        for other in higher:
            if other not in chosen and priority(other) > rank and overlap(held, ranges(other)):
                chosen.add(other)
                frontier.append(other)
    return [other for other in higher if other in chosen]
