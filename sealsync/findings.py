"""What ``sealsync check`` says of a config: one finding per line, sound or a problem.

Each role checks its own config (``sender.check``, ``receiver.check``,
``spark_loader.check``); the finding type and the checks they share (a folder this
end writes into, the data roots an instance folder holds) live here so that the
three say the same thing the same way.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from sealsync.names import DATA_ROOTS
from sealsync.printable import printable


@dataclass(frozen=True)
class Finding:
    """One line of the check: sound (``ok``) or a problem to fix."""

    ok: bool
    text: str

    def line(self) -> str:
        return printable(f"{'ok' if self.ok else 'problem'}: {self.text}")


def sound(text: str) -> Finding:
    return Finding(True, text)


def problem(text: str) -> Finding:
    return Finding(False, text)


def plural(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def data_roots(folder: Path) -> list[str]:
    """``sequence/`` and ``unsequence/``, those of them ``folder`` holds."""
    return [f"{root}/" for root in DATA_ROOTS if (folder / root).is_dir()]


def writable_dir(what: str, folder: Path, why: str) -> Finding:
    """A folder this end writes into: it must exist and be writable."""
    quoted = shlex.quote(str(folder))
    if not folder.exists():
        return problem(
            f"{what} {folder} does not exist (a typo, or a disk not mounted?): "
            f"create it with mkdir -p {quoted}"
        )
    if not folder.is_dir():
        return problem(f"{what} {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        return problem(f"{what} {folder} is not writable by this user: {why}")
    return sound(f"{what} {folder} exists and is writable")
