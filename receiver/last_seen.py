"""What the receiver last saw of each sender, kept across its restarts for the metrics.

The per-sender series (receiver/metrics.py) are a data centre's view of each edge: its
name, when its last round ended, how old its newest stored file is. Counted in memory
only, a restarted receiver would show every edge as never seen (timestamp 0, no name)
until it sent again: a dashboard's "time since the last round" of decades, and an
alert on silent edges that fires for all of them at once. So the end of each round
records, per sender, ``<schema dir>/sync/senders/<uuid>/last_seen.json`` (beside its
schema log)::

    {"version": 1, "name": "edge-7", "last_round": 1767225600.5, "newest_file": 1767225599.1}

``name`` is what its last HELLO said, ``last_round`` when its last round ended and
``newest_file`` when its newest file was verified and stored (null: none yet), in
seconds since the epoch. One small file per sender, replaced atomically, so a round
costs one small write whatever the number of senders. The receiver reads it back when
a sender gets its series (at the first scrape, or its first HELLO, after a start).

A sender with no record (a storage last served by a release that kept none) gets its
last round from its round folders' modification time, as ``sealsync status`` reads it;
its name comes with its next HELLO. A record that does not read is ignored with one
warning: these are figures for a dashboard, never state a decision rests on.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from receiver.folders import refuse_links
from receiver.layout import check_sender_uuid, sender_folders
from sealsync import durable
from sealsync.errors import BadName

log = logging.getLogger(f"sealsync.{__name__}")

RECORD = "last_seen.json"
VERSION = 1
MAX_RECORD = 4096
"""Bytes read of a record at most: a valid one is a few hundred (a name is at most 256)."""


@dataclass(frozen=True)
class Seen:
    """One sender as last seen (times in seconds since the epoch)."""

    name: str = ""
    last_round: float = 0.0
    """0: no round known."""
    newest_file: float | None = None

    def to_json(self) -> str:
        doc = {
            "version": VERSION,
            "name": self.name,
            "last_round": self.last_round,
            "newest_file": self.newest_file,
        }
        return json.dumps(doc, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Seen:
        """ValueError for anything but a record of this version with sound fields."""
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError("not a last_seen record of version 1")
        name, last, newest = doc.get("name"), doc.get("last_round"), doc.get("newest_file")
        if not isinstance(name, str) or len(name) > 1024:
            raise ValueError("name is not a short string")
        return cls(name, _seconds(last), None if newest is None else _seconds(newest))


def _seconds(value: object) -> float:
    """A recorded time; ValueError for anything but a finite number of seconds >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("a time is not a number of seconds")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a time out of range: {value}")
    return float(value)


class LastSeen:
    """The records of one receiver's senders; thread-safe (one writer at a time)."""

    def __init__(self, schema_dir: Path, data_dirs: Iterable[Path] = ()) -> None:
        self.schema_dir = Path(schema_dir)
        self.root = self.schema_dir / "sync" / "senders"
        self.data_dirs = [Path(d) for d in data_dirs]
        self._lock = threading.Lock()
        self._folder_times: dict[str, float] | None = None
        self._warned: set[str] = set()

    def path(self, uuid: str) -> Path:
        return self.root / check_sender_uuid(uuid) / RECORD

    def read(self, uuid: str) -> Seen:
        """What was last recorded of ``uuid``; without a record, its last round as its
        round folders date it (0 without those either)."""
        try:
            path = self.path(uuid)
        except BadName:  # not a UUID a sender could have: nothing was recorded for it
            return Seen()
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_RECORD + 1)
        except FileNotFoundError:
            return Seen(last_round=self._folder_time(uuid))
        except OSError as exc:
            self._warn(path, f"cannot read it ({exc.strerror or exc})")
            return Seen(last_round=self._folder_time(uuid))
        try:
            if len(data) > MAX_RECORD:
                raise ValueError(f"larger than {MAX_RECORD} bytes")
            return Seen.from_json(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            self._warn(path, f"ignored ({exc})")
            return Seen(last_round=self._folder_time(uuid))

    def write(self, uuid: str, seen: Seen) -> None:
        """Record ``seen``; a failure is logged (the round it ends is not failed for it)."""
        with self._lock:
            try:
                path = self.path(uuid)  # an accepted sender's UUID: checked at its HELLO
                refuse_links(self.schema_dir, path.parent)
                path.parent.mkdir(parents=True, exist_ok=True)
                durable.atomic_write(path, seen.to_json())
            except BadName as exc:
                log.warning("no metrics record: %s", exc)
                return
            except OSError as exc:
                self._warn(path, f"cannot write it ({exc.strerror or exc})")
                return
            self._warned.discard(str(path))

    def _warn(self, path: Path, why: str) -> None:
        if str(path) not in self._warned:
            self._warned.add(str(path))
            log.warning("%s: %s; the sender's metrics start from its next round", path, why)

    def _folder_time(self, uuid: str) -> float:
        """The newest modification time of ``uuid``'s round folders (0: none), listed
        once: only senders without a record ask, after an upgrade."""
        with self._lock:
            if self._folder_times is None:
                times: dict[str, float] = {}
                try:
                    folders = sender_folders(self.data_dirs)
                except OSError as exc:
                    log.warning("cannot list the senders' round folders: %s", exc)
                    folders = []
                for folder in folders:
                    try:
                        mtime = os.stat(folder.root).st_mtime
                    except OSError:
                        continue
                    times[folder.uuid] = max(times.get(folder.uuid, 0.0), mtime)
                self._folder_times = times
            return self._folder_times.get(uuid, 0.0)
