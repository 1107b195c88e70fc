"""The receiver's counters, and ``/metrics`` for Prometheus when ``metrics_listen`` is set.

The service, its sessions and rounds count what happens through one
:class:`ReceiverMetrics` object: plain integers under a lock, so that a receiver
nobody scrapes pays an increment per file and nothing else. What is a state rather
than an event (sessions open, inspect workers alive, checks in flight, disk free of
each folder) is read when Prometheus asks, by :meth:`ReceiverMetrics.collect`; disk
space in particular is the file system's answer at scrape time (``statvfs``), never
a stale copy.

Disk space is labelled with each folder's place in the config (``schema_dir``,
``data_dirs[0]``...), not its path, unless ``metrics_paths`` is set: whoever may read
the endpoint learns nothing of the receiver's file system by default.

Per sender (the ``sender`` label, its UUID) the receiver counts what a data centre
needs to see each edge: its last round's end, files and bytes received, refusals by
kind, and how long ago its newest file was stored for the loader. A sender has
series once its HELLO was accepted (its UUID bound to its key) and, in a service,
from the start for every UUID ``sender_keys.txt`` binds, until it is retired: the
series are bounded by the number of known senders, never by what a client claims.
The sender's self-chosen name is one ``sealsync_receiver_sender_info`` sample, not
a label on every series. Ages are measured on the monotonic clock, so a wall-clock
step does not make an edge look stale or fresh.

What a restart would otherwise forget of a sender, its name, its last round's end and
its newest file's time, is recorded at the end of each of its rounds and read back
when it gets its series (receiver/last_seen.py), so the dashboard keeps every edge's
name and real times across restarts; the counters start again from zero, as
Prometheus expects of a restarted process.

``MetricsServer`` (receiver/metrics_http.py) serves them over HTTP, on its own
registry (nothing else in the host process leaks into it), on a thread the service
starts and stops with itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from receiver.last_seen import LastSeen, Seen
from sealsync.buildinfo import build_info_family
from sealsync.errors import SealsyncError
from sealsync.printable import printable
from sealsync.protocol import Verdict

log = logging.getLogger(f"sealsync.{__name__}")

PREFIX = "sealsync_receiver"
VERDICTS = (Verdict.VERIFIED, Verdict.MISMATCH, Verdict.CONFLICT, Verdict.REFUSED)
REFUSALS = {
    "allow_list": "the peer address is not in the allow list",
    "connections": "too many connections open",
    "key": "the public key is not in authorized_keys",
    "sender_key": "the sender UUID is bound to another public key",
    "identity": "another host holds the sender's identity lease (a copy of that sender)",
    "sessions": "max_sessions open: the sender was told busy",
    "round_busy": "the sender folder was busy (a round or loads in progress)",
    "metrics": "a /metrics connection outside metrics_allow or over metrics_max_connections",
}
"""Why the receiver turned a connection, session or round away (the ``reason`` label)."""
ROUND_OUTCOMES = ("done", "abandoned")
SENDER_REFUSALS = (Verdict.MISMATCH, Verdict.CONFLICT, Verdict.REFUSED, "round_busy")
"""What a known sender was refused, per file (its verdicts) or per round (busy)."""


class _SenderCounts:
    """What one known sender did since the service started."""

    __slots__ = ("name", "last_round", "files", "bytes", "refusals", "newest_file", "newest_wall")

    def __init__(self, seen: Seen) -> None:
        self.name = seen.name
        self.last_round = seen.last_round
        """Wall-clock time its last round ended (0: none known)."""
        self.files = 0
        self.bytes = 0
        self.refusals: dict[str, int] = dict.fromkeys(SENDER_REFUSALS, 0)
        self.newest_wall = seen.newest_file
        """Wall-clock time its newest file was stored (None: none known), for the record."""
        self.newest_file: float | None = None
        """Monotonic time its newest file was verified and stored (None: none known)."""
        if seen.newest_file is not None:  # its age at the start, then the monotonic clock's
            age = max(time.time() - seen.newest_file, 0.0)
            self.newest_file = time.monotonic() - age

    def seen(self) -> Seen:
        return Seen(self.name, self.last_round, self.newest_wall)


_F = TypeVar("_F", bound=Callable[..., Any])


class ReceiverMetrics:
    """What one receiver service counts; every method is cheap and thread-safe."""

    def __init__(self, folders: Sequence[tuple[str, Path]] = (), *, paths: bool = False) -> None:
        """``folders``: ``(role, path)`` whose free space is reported at scrape time,
        labelled with the path itself if ``paths`` (``metrics_paths``), else with the
        folder's key in the config (``schema_dir``, ``data_dirs[N]``)."""
        self.folders = list(folders)
        self.paths = paths
        self.workers_alive: Callable[[], int] | None = None
        """The inspect pool's live worker count, if the service has a pool."""
        self.workers_unavailable: Callable[[], bool] | None = None
        """Whether the pool's workers do not start (the format check cannot run)."""
        self.known_senders: Callable[[], Iterable[str]] | None = None
        """The UUIDs the receiver knows now (bound to a key, not retired): each has
        series from the start, and a sender no longer among them (retired, its line
        deleted) loses its series."""
        self.storage_ok: Callable[[], bool] | None = None
        """Whether the storage is still the one the receiver started with
        (receiver/liveness.py; None: not watched, reported as 1)."""
        self.last_seen: LastSeen | None = None
        """Where each sender's name and times are kept across restarts (None: nowhere)."""
        self._lock = threading.Lock()
        self._sessions_open = 0
        self._sessions = 0
        self._bytes = 0
        self._deleted = 0
        self._in_flight = 0
        self._verdicts = dict.fromkeys(VERDICTS, 0)
        self._refusals = dict.fromkeys(REFUSALS, 0)
        self._rounds = dict.fromkeys(ROUND_OUTCOMES, 0)
        self._senders: dict[str, _SenderCounts] = {}

    # --- events -------------------------------------------------------------------

    def session_opened(self) -> None:
        with self._lock:
            self._sessions += 1
            self._sessions_open += 1

    def session_closed(self) -> None:
        with self._lock:
            self._sessions_open -= 1

    def sender_accepted(self, uuid: str, name: str) -> None:
        """A sender's HELLO was accepted: from now on it has series of its own."""
        with self._lock:
            known = uuid in self._senders
        seen = Seen() if known else self._recorded(uuid)
        with self._lock:
            counts = self._senders.setdefault(uuid, _SenderCounts(seen))
            counts.name = name

    def remember_senders(self, schema_dir: Path, data_dirs: Sequence[Path]) -> None:
        """Keep each sender's name and times across restarts in ``schema_dir`` (and,
        for a sender never recorded, date its last round by its folders in ``data_dirs``)."""
        self.last_seen = LastSeen(schema_dir, data_dirs)

    def _recorded(self, uuid: str) -> Seen:
        """What was recorded of ``uuid`` before (read outside the lock: a file)."""
        return self.last_seen.read(uuid) if self.last_seen is not None else Seen()

    def refused(self, reason: str, sender: str | None = None) -> None:
        """A connection, session or round turned away; ``reason`` is a key of REFUSALS,
        ``sender`` the accepted sender it was refused to, if any."""
        with self._lock:
            self._refusals[reason] += 1
            counts = self._senders.get(sender) if sender is not None else None
            if counts is not None and reason in counts.refusals:
                counts.refusals[reason] += 1

    def received(self, nbytes: int, sender: str | None = None) -> None:
        """A file stream received whole (its data file and sidecars), whatever its verdict."""
        with self._lock:
            self._bytes += nbytes
            counts = self._senders.get(sender) if sender is not None else None
            if counts is not None:
                counts.bytes += nbytes

    def verdict(self, kind: str, sender: str | None = None) -> None:
        with self._lock:
            self._verdicts[kind] = self._verdicts.get(kind, 0) + 1
            counts = self._senders.get(sender) if sender is not None else None
            if counts is None:
                return
            if kind == Verdict.VERIFIED:
                counts.files += 1
                counts.newest_file = time.monotonic()
                counts.newest_wall = time.time()
            elif kind in counts.refusals:
                counts.refusals[kind] += 1

    def deleted(self) -> None:
        with self._lock:
            self._deleted += 1

    def round_ended(self, outcome: str, sender: str | None = None) -> None:
        """``done`` at ROUND_END, ``abandoned`` when the session ended inside a round;
        a round done is recorded for the next start."""
        with self._lock:
            self._rounds[outcome] += 1
            counts = self._senders.get(sender) if sender is not None else None
            if counts is None or outcome != "done":
                return
            counts.last_round = time.time()
            seen = counts.seen()
        if self.last_seen is not None and sender is not None:
            self.last_seen.write(sender, seen)

    def tracked(self, inspect: _F, count: Callable[..., int] = lambda *_: 1) -> _F:
        """``inspect`` counting its checks in flight (``count``: how many a call makes)."""

        def call(*args: Any) -> Any:
            n = count(*args)
            with self._lock:
                self._in_flight += n
            try:
                return inspect(*args)
            finally:
                with self._lock:
                    self._in_flight -= n

        return call  # type: ignore[return-value]

    # --- reading ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The event counts as plain values (tests, and one consistent read per scrape)."""
        known: set[str] | None = None
        if self.known_senders is not None:
            try:
                known = set(self.known_senders())
            except (OSError, SealsyncError) as exc:  # keep the series the receiver has
                log.warning("metrics: cannot read the known senders: %s", exc)
        if known is not None:
            with self._lock:
                new = known - self._senders.keys()
            restored = {uuid: self._recorded(uuid) for uuid in sorted(new)}
        now = time.monotonic()
        with self._lock:
            if known is not None:
                for gone in self._senders.keys() - known:
                    del self._senders[gone]
                for uuid, seen in restored.items():
                    self._senders.setdefault(uuid, _SenderCounts(seen))
            return {
                "sessions_open": self._sessions_open,
                "sessions": self._sessions,
                "bytes_received": self._bytes,
                "files_received": self._verdicts[Verdict.VERIFIED],
                "files_deleted": self._deleted,
                "checks_in_flight": self._in_flight,
                "verdicts": dict(self._verdicts),
                "refusals": dict(self._refusals),
                "rounds": dict(self._rounds),
                "senders": {
                    uuid: {
                        "name": c.name,
                        "last_round": c.last_round,
                        "files": c.files,
                        "bytes": c.bytes,
                        "refusals": dict(c.refusals),
                        "newest_file_age": (None if c.newest_file is None else now - c.newest_file),
                    }
                    for uuid, c in sorted(self._senders.items())
                },
            }

    def describe(self) -> list[Metric]:
        """Nothing up front: the registry must not scrape the disks at registration."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The Prometheus families, read now (prometheus_client's Collector protocol)."""
        s = self.snapshot()

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)

        yield gauge("sessions_open", "Sender sessions in progress.", s["sessions_open"])
        yield counter("sessions", "Sender sessions opened (after HELLO).", s["sessions"])
        yield counter(
            "bytes_received",
            "Bytes of file streams received whole (data file and sidecars).",
            s["bytes_received"],
        )
        yield counter(
            "files_received",
            "Files verified, stored and handed to the loader.",
            s["files_received"],
        )
        yield counter("files_deleted", "Deletions acknowledged to senders.", s["files_deleted"])
        verdicts = CounterMetricFamily(
            f"{PREFIX}_verdicts", "File verdicts sent, by kind.", labels=["verdict"]
        )
        for kind, n in s["verdicts"].items():
            verdicts.add_metric([kind], n)
        yield verdicts
        refusals = CounterMetricFamily(
            f"{PREFIX}_refusals",
            "Connections, sessions and rounds turned away, by reason.",
            labels=["reason"],
        )
        for reason, n in s["refusals"].items():
            refusals.add_metric([reason], n)
        yield refusals
        rounds = CounterMetricFamily(
            f"{PREFIX}_rounds", "Rounds ended, by outcome.", labels=["outcome"]
        )
        for outcome, n in s["rounds"].items():
            rounds.add_metric([outcome], n)
        yield rounds
        yield from _sender_families(s["senders"])
        yield build_info_family("receiver")
        yield gauge(
            "inspect_checks_in_flight",
            "Format checks of received files submitted and not yet answered.",
            s["checks_in_flight"],
        )
        if self.workers_alive is not None:
            yield gauge(
                "inspect_workers_alive", "Live inspect worker processes.", self.workers_alive()
            )
        yield gauge(
            "storage_ok",
            "1 while the receiver's storage is the one it started with, 0 once it is gone "
            "or replaced (every round is then refused).",
            int(self.storage_ok()) if self.storage_ok is not None else 1,
        )
        if self.workers_unavailable is not None:
            yield gauge(
                "inspect_unavailable",
                "1 while the format check's worker processes do not start (the receiver's "
                "fault: files are answered 'retry later'), else 0.",
                int(self.workers_unavailable()),
            )
        free = GaugeMetricFamily(
            f"{PREFIX}_disk_free_bytes",
            "Space available to the receiver in the file system of each folder.",
            labels=["role", "path"],
        )
        size = GaugeMetricFamily(
            f"{PREFIX}_disk_size_bytes",
            "Size of the file system of each folder.",
            labels=["role", "path"],
        )
        for role, path, place in folder_places(self.folders):
            try:
                st = os.statvfs(path)
            except OSError:  # gone or unmounted: no sample, rather than a wrong one
                continue
            label = printable(path) if self.paths else place
            free.add_metric([role, label], st.f_bavail * st.f_frsize)
            size.add_metric([role, label], st.f_blocks * st.f_frsize)
        yield free
        yield size


def folder_places(folders: Sequence[tuple[str, Path]]) -> list[tuple[str, Path, str]]:
    """``(role, path, place)``: each folder's key in the receiver's config, the ``path``
    label of its disk series unless paths are shown (``data_dirs[1]``, ``schema_dir``)."""
    out: list[tuple[str, Path, str]] = []
    seen: dict[str, int] = {}
    for role, path in folders:
        n = seen.get(role, 0)
        seen[role] = n + 1
        place = "schema_dir" if role == "schema" else f"{role}_dirs[{n}]"
        out.append((role, path, place))
    return out


def _sender_families(senders: dict[str, dict[str, Any]]) -> Iterator[Metric]:
    """The per-sender families (label ``sender``: the UUID), one sample per known sender."""
    label = ["sender"]
    info = GaugeMetricFamily(
        f"{PREFIX}_sender_info",
        "1 per known sender; 'name' is the name it gave in its last HELLO.",
        labels=["sender", "name"],
    )
    last_round = GaugeMetricFamily(
        f"{PREFIX}_sender_last_round_timestamp_seconds",
        "When the sender's last round ended (0: none known).",
        labels=label,
    )
    files = CounterMetricFamily(
        f"{PREFIX}_sender_files_received", "Files of the sender verified and stored.", labels=label
    )
    nbytes = CounterMetricFamily(
        f"{PREFIX}_sender_bytes_received",
        "Bytes of the sender's file streams received whole.",
        labels=label,
    )
    refusals = CounterMetricFamily(
        f"{PREFIX}_sender_refusals",
        "The sender's files refused (verdict mismatch, conflict, refused) and rounds turned "
        "away busy (round_busy).",
        labels=["sender", "kind"],
    )
    age = GaugeMetricFamily(
        f"{PREFIX}_sender_newest_file_age_seconds",
        "Seconds since the sender's newest file was verified and stored for the loader "
        "(no sample: none known).",
        labels=label,
    )
    for uuid, s in senders.items():
        info.add_metric([uuid, printable(s["name"])], 1)
        last_round.add_metric([uuid], s["last_round"])
        files.add_metric([uuid], s["files"])
        nbytes.add_metric([uuid], s["bytes"])
        for kind, n in s["refusals"].items():
            refusals.add_metric([uuid, kind], n)
        if s["newest_file_age"] is not None:
            age.add_metric([uuid], s["newest_file_age"])
    yield from (info, last_round, files, nbytes, refusals, age)
