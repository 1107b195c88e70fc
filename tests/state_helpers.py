"""Builders the sender and receiver state tests share: data files with their sidecars,
the lines of a ``sync.log`` round, and crashes injected before durable steps.

Not a test module; imported by name (pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from sealsync import durable


def write_data_file(
    root: Path,
    name: str,
    data: bytes | None = None,
    resource: bytes | None = None,
    mods: bytes | None = None,
    *,
    sealed: bool = True,
    merge: bool = False,
) -> str:
    """``name`` under ``root`` (a data dir or a snapshot) as the database leaves it.

    Contents default to bytes that name the file (``data of <name>``, ``resource of
    <name>``), so a copy that mixed two files up cannot pass for a faithful one.
    ``sealed=False`` leaves the ``.resource`` out, ``merge`` adds a ``.merge``, ``mods``
    (if given) is the ``.mods``. Returns ``name``.
    """
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"data of " + name.encode() if data is None else data)
    if sealed:
        content = b"resource of " + name.encode() if resource is None else resource
        Path(f"{path}.resource").write_bytes(content)
    if mods is not None:
        Path(f"{path}.mods").write_bytes(mods)
    if merge:
        Path(f"{path}.merge").write_bytes(b"")
    return name


def sync_log_lines(deleted: Iterable[str], new: Iterable[str]) -> list[str]:
    """The lines of one whole round in ``sync.log``: its deletions, then its files."""
    return [
        "sync start",
        "sync deleted file names start",
        *deleted,
        "sync deleted file names end",
        "sync tsfile start",
        *new,
        "sync tsfile end",
        "sync end",
    ]


class Crash(Exception):
    """The process died here."""


class DurableStepCrash:
    """Dies (raises :class:`Crash`) before the ``crash_at``-th durable step.

    The steps are the ones recovery takes: ``durable.atomic_write``, ``durable.remove``,
    ``durable.rename`` and ``shutil.rmtree``. A crash in an atomic write leaves part of
    its temporary behind, as a real one would. ``steps`` lists each step taken since
    :meth:`arm`, as ``"<function> <file name>"``.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.crash_at = -1
        self.count = 0
        self.steps: list[str] = []
        for module, name in (
            (durable, "atomic_write"),
            (durable, "remove"),
            (durable, "rename"),
            (shutil, "rmtree"),
        ):
            monkeypatch.setattr(module, name, self._wrap(name, getattr(module, name)))

    def arm(self, crash_at: int) -> None:
        """Crash before step ``crash_at`` (counted from 1) from now on; 0 never crashes."""
        self.crash_at, self.count, self.steps = crash_at, 0, []

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step(path: str | Path, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            self.steps.append(f"{name} {Path(path).name}")
            if self.count == self.crash_at:
                if name == "atomic_write":  # died with part of the temporary written
                    Path(path).with_name(f".{Path(path).name}.tmp").write_bytes(b"sequence/x")
                raise Crash(name)
            return real(path, *args, **kwargs)

        return step
