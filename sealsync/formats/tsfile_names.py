"""Where a data file ranks among its instance's files, by the name IoTDB gave it.

IoTDB keeps one value per (series, time). When several files hold a point, a query
returns the value of the file of highest priority; its merge readers compare
(``MergeReaderPriority`` in IoTDB 1.x/2.x): an unsequence file over a sequence one,
then the higher file version, then the higher time in the file name; inside one file
a later chunk wins. IoTDB 0.12/0.13 compare the version alone, and every file of a
time partition, sequence or unsequence, draws its version from one counter, so a
later write has the higher version there too: the rule here gives the same answer on
both. The version and time come from the name IoTDB gives a file,
``<time>-<version>-<inner>-<cross>.tsfile`` (``TsFileNameGenerator``); the compaction
counts and then the name break what is left of a tie, so the order is total. A name of
another shape ranks below every IoTDB name of its folder kind.

The Spark loader resolves a sender's overlapping files by it; the IoTDB storage loads
them into a data centre in its order.
"""

from __future__ import annotations

from pathlib import PurePosixPath

Priority = tuple[int, int, int, tuple[int, ...], str]


def priority(name: str) -> Priority:
    """Where the file at the relative name ``name`` (``sequence/...`` or
    ``unsequence/...``) ranks among its instance's files: higher wins."""
    path = PurePosixPath(name)
    unsequence = 1 if path.parts and path.parts[0] == "unsequence" else 0
    fields = path.name.split(".", 1)[0].split("-")
    try:
        numbers = [int(f) for f in fields]
    except ValueError:
        numbers = []
    if len(numbers) < 2:
        return (unsequence, -1, -1, (), name)
    return (unsequence, numbers[1], numbers[0], tuple(numbers[2:]), name)
