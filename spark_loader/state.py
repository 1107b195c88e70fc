"""The loader's own state in ``state_dir``: what it ingested, and who may run.

``ingested.json`` records, per ``file_id``, the source file and its row count (and
what proves a restored copy of it the same, :mod:`.restored`), and the type of every
measurement column the table has. It is a *record*, not the
truth: the table's partitions are (see :mod:`.table`). Every run reconciles the
two, so a crash between a Spark commit and the state write, a lost state file or
a partition deleted by hand is repaired, never trusted. The file is replaced
atomically (``durable.atomic_write``); an unreadable one is rebuilt from the table.

Two locks keep runs apart:

* ``load.lock`` (flock): one ``sealsync load`` per state dir; a second one stops at
  once with exit code 75 instead of queueing behind cron.
* ``spark-driver.lock`` (a POSIX record lock taken *by the Spark driver JVM*): when
  a loader is killed, its JVM notices only a moment later and may still be
  committing partitions. The next run waits until that JVM has exited, so it never
  sweeps or lists the table while a dead run's commit is still renaming folders.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from sealsync import durable
from sealsync.errors import LockHeld, SealsyncError

STATE_FILE = "ingested.json"
LOCK_FILE = "load.lock"
DRIVER_LOCK_FILE = "spark-driver.lock"
STATE_VERSION = 1


@dataclass(frozen=True)
class FileRecord:
    sender: str
    name: str
    size: int
    mtime_ns: int
    rows: int
    #: The receiver data dir it was found in ("" in states written before it was
    #: recorded): where the loader looks before it believes the file deleted.
    data_dir: str = ""
    #: What proves a later copy of the file holds this content when its times changed
    #: (a restore: :mod:`.restored`). ``md5``: the MD5 the receiver recorded for the
    #: data file ("" if it recorded none). ``mods``/``mods2``: its ``X.mods``/``X.mods2``
    #: as :func:`sidecar_text` writes it. All "" until the loader has read them (states
    #: written before they were recorded, a file ingested this run), and then ``size``
    #: and ``mtime_ns`` (and the sidecars' times) are those of the copy last seen.
    md5: str = ""
    mods: str = ""
    mods2: str = ""

    @property
    def proved(self) -> bool:
        """Whether the record holds what a restored copy is matched by."""
        return bool(self.mods and self.mods2)


NO_SIDECAR = "-"
Sidecar = tuple[int, int, str]
"""``(size, mtime_ns, sha256)`` of a sidecar version."""


def sidecar_text(sidecar: Sidecar | None) -> str:
    """A sidecar's record: ``size:mtime_ns:sha256``, or ``-`` for a file without one."""
    return NO_SIDECAR if sidecar is None else f"{sidecar[0]}:{sidecar[1]}:{sidecar[2]}"


def sidecar_of(text: str) -> Sidecar | None:
    """The sidecar a record's :func:`sidecar_text` names (None: none); ValueError if it
    names none (unrecorded, or not a record)."""
    if text == NO_SIDECAR:
        return None
    size, mtime, digest = text.split(":")
    if len(digest) != 64:
        raise ValueError(f"not a sidecar record: {text!r}")
    return int(size), int(mtime), digest


@dataclass
class IngestState:
    files: dict[str, FileRecord] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # column -> Spark type JSON
    #: column -> [measurement, kind] it holds (spark_loader/columns.py); a column
    #: without an entry holds the measurement of its own name.
    keys: dict[str, list[str]] = field(default_factory=dict)
    rebuilt: str = ""  # why the file on disk was not used, if it was not

    def to_json(self) -> str:
        doc = {
            "version": STATE_VERSION,
            "files": {fid: asdict(rec) for fid, rec in sorted(self.files.items())},
            "columns": dict(sorted(self.columns.items())),
            "keys": dict(sorted(self.keys.items())),
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str) -> IngestState:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
            raise ValueError(f"unknown state version {doc.get('version')!r}")
        files = {fid: FileRecord(**rec) for fid, rec in doc["files"].items()}
        columns = {str(k): str(v) for k, v in doc["columns"].items()}
        keys = {str(k): [str(v[0]), str(v[1])] for k, v in (doc.get("keys") or {}).items()}
        return cls(files=files, columns=columns, keys=keys)


def state_path(state_dir: Path) -> Path:
    return Path(state_dir) / STATE_FILE


def load_state(state_dir: Path) -> IngestState:
    """The recorded state; an unreadable file yields an empty one marked ``rebuilt``."""
    path = state_path(state_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return IngestState()
    except OSError as exc:
        raise SealsyncError(f"cannot read the loader state {path}: {exc.strerror}") from None
    try:
        return IngestState.from_json(text)
    except (ValueError, TypeError, KeyError) as exc:
        return IngestState(rebuilt=f"{path} unreadable ({exc}); rebuilding it from the table")


def save_state(state_dir: Path, state: IngestState) -> None:
    durable.atomic_write(state_path(state_dir), state.to_json())


@contextmanager
def loader_lock(state_dir: Path) -> Iterator[None]:
    """Hold ``load.lock`` for the body, or raise LockHeld right away."""
    path = Path(state_dir) / LOCK_FILE
    lock = FileLock(path, timeout=0, is_singleton=True)
    try:
        lock.acquire()
    except Timeout:
        raise LockHeld(f"another sealsync load is running with the state dir {state_dir}") from None
    except OSError as exc:
        raise SealsyncError(f"cannot take the lock {path}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        lock.release()


def wait_for_previous_driver(state_dir: Path, timeout: float = 120.0) -> None:
    """Return once no process holds ``spark-driver.lock`` (a killed run's JVM exiting)."""
    path = Path(state_dir) / DRIVER_LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise SealsyncError(f"cannot test the lock {path}: {exc.strerror}") from None
                if time.monotonic() > deadline:
                    raise LockHeld(
                        f"the Spark driver of an earlier sealsync load still holds {path}; "
                        "wait for it to exit"
                    ) from None
                time.sleep(0.2)
                continue
            fcntl.lockf(fd, fcntl.LOCK_UN)
            return
    finally:
        os.close(fd)
