"""Device ownership on a receiver: first come, first served (docs/design.md §1.2, §2.3, §4.7).

``<schema dir>/sync/device_owner.log`` is an append-only log, UTF-8, one event a line,
fields separated by one TAB:

    claim<TAB><sender uuid><TAB><device>     the sender now owns the device
    release<TAB><device>                     the device has no owner any more
    scope<TAB><receiver|sender>              ``device_scope`` from here on

The state is the replay of the lines in order: a ``claim`` of an owned device is
ignored (the first claim wins), a ``release`` makes the device unowned.

**Scopes** (``device_scope``). By default a device has one owner on the receiver.
Fleets reuse device ids across sites (every plant has ``root.plant.line1``), so with
``device_scope = "sender"`` each sender's device ids are its own: a claim never
conflicts, and each sender's claims are logged for it (the first claimant stays the
device's owner for the default scope). Only a storage that keeps senders' files apart
may do that (``Storage.keeps_senders_apart``: the default storage, one folder per
sender, which the Spark table keeps apart by its ``sender`` column); one that merges
them (IoTDB would merge two senders' points of one device) keeps one owner per
device, and ``serve`` refuses the other scope for it (:func:`scope_for`). The service
logs the scope it runs with whenever it changes; back to ``receiver``, a device
several senders claimed meanwhile is its first claimant's, and the others' files of
it are conflicts again (the start says how many such devices there are).

A conflict names the owner by the name its last HELLO gave (``names``: the
receiver's sender records, receiver/leases.py), never by its UUID: no sender learns
another's. A device id
may hold any character but TAB, CR and LF (rejected with a clear error, since they
would forge fields or lines); the uuid is a canonical lowercase uuid. Every append is
fsynced before the call returns; a torn last line (crash mid-append) is not an event
and is cut before the next append.

Two kinds of writers share the file: the receiver's loader threads and, in another
process, ``sealsync owners release``. Every operation therefore takes a thread lock
and then a file lock (``device_owner.log.lock``), reads whatever the log gained since
it last looked, decides, and appends while still holding both; so a claim is atomic
against every other claim and release, here or elsewhere.

What one sender makes the log keep is bounded: it claims at most ``max_devices``
devices (a claim past that is refused, whole, with one line), its claim lines count
against its quota (:meth:`DeviceOwners.owned_bytes`), and a log that holds more
superseded lines (a claim later released, and its release, a scope line replaced)
than live ones, past ``COMPACT_MIN``, is rewritten as the scope and one claim per
claimant and device, each device's owner first, in claim order, through
:func:`sealsync.durable.atomic_write` under the file lock: the replay gives the same
state, and a reader in another process sees the file replaced and reads it again.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from receiver.folders import make_dirs
from receiver.layout import check_sender_uuid
from receiver.storage import Storage
from sealsync import durable
from sealsync.config import ReceiverConfig
from sealsync.errors import ConfigError, SealsyncError
from sealsync.printable import printable

log = logging.getLogger(f"sealsync.{__name__}")

OWNER_LOG = "device_owner.log"
CLAIM = "claim"
RELEASE = "release"
SCOPE = "scope"
RECEIVER_SCOPE, SENDER_SCOPE = "receiver", "sender"
LOCK_TIMEOUT = 60.0
COMPACT_MIN = 10_000
"""Superseded lines a log holds before it may be compacted: rewriting a small log
would cost more than reading its few dead lines."""
MAX_TOLD = 4096
"""Devices remembered per sender as named in its conflict verdicts (the oldest go)."""


class DeviceIdError(SealsyncError):
    """A device id that cannot be recorded in ``device_owner.log``."""


class DeviceLimit(SealsyncError):
    """A file's new devices would take its sender past ``max_devices_per_sender``;
    nothing of it was claimed."""


def scope_for(config: ReceiverConfig, storage: Storage) -> str:
    """The configured ``device_scope``, or ConfigError (exit 2, one line) when the
    storage merges senders' points of one device."""
    if config.device_scope == SENDER_SCOPE and not storage.keeps_senders_apart:
        raise ConfigError(
            f'{config.source}: [receiver] device_scope = "sender": the {config.storage.kind} '
            "storage keeps one set of points per device (IoTDB would merge two senders' "
            "points of one device), so a device keeps one owner there: leave device_scope "
            'out (or "receiver"), and give each site device ids of its own'
        )
    return config.device_scope


class DeviceConflict(SealsyncError):
    """A file holds devices that another sender owns; nothing of it was claimed."""

    def __init__(
        self, name: str, conflicts: dict[str, str], describe: Callable[[str], str] = str
    ) -> None:
        shown = ", ".join(
            f"{d} (owner {describe(o)}, {o})" for d, o in sorted(conflicts.items())[:5]
        )
        more = f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
        super().__init__(f"{name}: devices owned by another sender: {shown}{more}")
        self.name = name
        self.conflicts = dict(conflicts)


def check_device(device: str) -> str:
    """``device`` if it can be one field of one log line, else DeviceIdError."""
    if not isinstance(device, str) or not device:
        raise DeviceIdError(f"empty or non-text device id: {device!r}")
    if any(ch in device for ch in "\t\r\n"):
        shown = device[:80].encode("unicode_escape").decode("ascii")
        raise DeviceIdError(f"device id with a tab or line break: {shown}")
    return device


def _line_bytes(claimant: str, device: str) -> int:
    """Bytes of the claim line of ``device`` by ``claimant``."""
    return len(CLAIM) + len(claimant) + len(device.encode("utf-8", errors="surrogateescape")) + 3


def _unique(devices: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(check_device(d) for d in devices))


class DeviceOwners:
    """The receiver's device -> owner map, kept in step with ``device_owner.log``."""

    def __init__(self, schema_dir: Path, max_devices: int | None = None) -> None:
        """``max_devices``: devices one sender may claim (``max_devices_per_sender``)."""
        self.path = Path(schema_dir) / "sync" / OWNER_LOG
        self.max_devices = max_devices
        make_dirs(self.path.parent)
        self._thread_lock = threading.Lock()
        # Threads are serialised by the lock above, so the file lock need not be per thread.
        self._file_lock = FileLock(f"{self.path}.lock", timeout=LOCK_TIMEOUT, thread_local=False)
        self._owners: dict[str, str] = {}
        self._claimants: dict[str, set[str]] = {}  # every sender that claimed a device
        self._scope = RECEIVER_SCOPE
        self._count: dict[str, int] = {}  # sender -> devices it claimed (live)
        self._bytes: dict[str, int] = {}  # sender -> bytes of its live claim lines
        self._lines = 0  # event lines read from the log (live and superseded)
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._torn = False
        self._log: durable.AppendLog | None = None
        self.names: Callable[[str], str | None] = lambda uuid: None
        """The name a sender's HELLO gave (the service's sender records), for conflicts."""
        self._told: dict[str, dict[str, None]] = {}  # uuid -> devices its verdicts named

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            try:
                self._file_lock.acquire()
            except Timeout as exc:
                raise SealsyncError(
                    f"{self.path}: another process holds {self._file_lock.lock_file} "
                    f"for more than {LOCK_TIMEOUT:.0f}s"
                ) from exc
            try:
                self._refresh()
                yield
            finally:
                self._file_lock.release()

    def _reset(self) -> None:
        self._owners = {}
        self._claimants = {}
        self._scope = RECEIVER_SCOPE
        self._count = {}
        self._bytes = {}
        self._lines = 0
        self._identity = None
        self._offset = 0
        self._torn = False
        if self._log is not None:
            self._log.close()
            self._log = None

    def _refresh(self) -> None:
        """Apply what the log gained since last time (another process may have appended)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._reset()
            return
        identity = (st.st_dev, st.st_ino)
        if identity != self._identity or st.st_size < self._offset:
            self._reset()
            self._identity = identity
        if st.st_size == self._offset:
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(st.st_size - self._offset)
        complete = data[: data.rfind(b"\n") + 1]
        self._torn = len(complete) != len(data)  # only a crashed writer leaves one
        self._offset += len(complete)
        text = complete.decode("utf-8", errors="surrogateescape")
        for line in text.split("\n")[:-1]:
            self._apply(line)

    def _apply(self, line: str) -> None:
        fields = line.split("\t")
        self._lines += 1
        if len(fields) == 3 and fields[0] == CLAIM and fields[2]:
            device, claimant = fields[2], fields[1]
            self._owners.setdefault(device, claimant)
            claimants = self._claimants.setdefault(device, set())
            if claimant not in claimants:
                claimants.add(claimant)
                self._count[claimant] = self._count.get(claimant, 0) + 1
                self._bytes[claimant] = self._bytes.get(claimant, 0) + _line_bytes(claimant, device)
        elif len(fields) == 2 and fields[0] == RELEASE:
            self._owners.pop(fields[1], None)
            for claimant in self._claimants.pop(fields[1], ()):
                self._count[claimant] -= 1
                self._bytes[claimant] -= _line_bytes(claimant, fields[1])
        elif (
            len(fields) == 2 and fields[0] == SCOPE and fields[1] in (SENDER_SCOPE, RECEIVER_SCOPE)
        ):
            self._scope = fields[1]
        elif line:
            log.warning("%s: ignoring a line that is not an event: %r", self.path, line[:200])

    def _append(self, lines: list[str]) -> None:
        if not lines:
            return
        if self._log is None or self._torn:
            if self._log is not None:
                self._log.close()
            self._log = durable.AppendLog(self.path)  # cuts a torn tail before appending
            self._torn = False
        self._log.append_many(lines)
        self._refresh()  # the state changes only by reading the log back
        live = sum(len(c) for c in self._claimants.values()) + (self._scope == SENDER_SCOPE)
        superseded = self._lines - live
        if superseded > COMPACT_MIN and superseded > live:
            self._compact()

    def _compact(self) -> None:
        """Rewrite the log as its state (the caller holds both locks): the scope if it
        is not the default, then per device its owner's claim and the other claimants'."""
        lines = [f"{SCOPE}\t{SENDER_SCOPE}\n"] if self._scope == SENDER_SCOPE else []
        for device, owner in self._owners.items():
            lines.append(f"{CLAIM}\t{owner}\t{device}\n")
            others = sorted(self._claimants.get(device, set()) - {owner})
            lines.extend(f"{CLAIM}\t{other}\t{device}\n" for other in others)
        before = self._lines
        body = "".join(lines).encode("utf-8", errors="surrogateescape")
        durable.atomic_write(self.path, body)
        self._reset()
        self._refresh()
        log.info(
            "%s: compacted: %d lines, %d of them superseded, rewritten as %d",
            self.path,
            before,
            before - self._lines,
            self._lines,
        )

    def _over_limit(self, uuid: str, new: int) -> DeviceLimit | None:
        """Why ``new`` more devices may not be claimed for ``uuid``, if they may not."""
        owned = self._count.get(uuid, 0)
        if self.max_devices is None or not new or owned + new <= self.max_devices:
            return None
        return DeviceLimit(
            f"sender {uuid} owns {owned} devices; {new} more would exceed "
            f"max_devices_per_sender ({self.max_devices})"
        )

    # --- scope and names ----------------------------------------------------------

    @property
    def scope(self) -> str:
        """``receiver`` (one owner per device) or ``sender``, as the log says now."""
        with self._locked():
            return self._scope

    def set_scope(self, scope: str) -> None:
        """Run with ``scope`` from now on, logged in the log if it changes (the service
        at start, under the storage lock)."""
        if scope == RECEIVER_SCOPE and not self.path.exists():
            return  # no log yet: the default scope, and nothing to write (not even a lock)
        with self._locked():
            if scope == self._scope:
                return
            self._append([f"{SCOPE}\t{scope}"])
            shared = sum(1 for owners in self._claimants.values() if len(owners) > 1)
        log.info("device_scope %s from now on (%s)", scope, self.path)
        if scope == RECEIVER_SCOPE and shared:
            log.warning(
                "device_scope receiver: %d devices were claimed by several senders under "
                "device_scope sender: each is its first claimant's again, and the others' "
                "files of it are refused as conflicts (sealsync owners lists them)",
                shared,
            )

    def describe(self, uuid: str) -> str:
        """A sender as a conflict names it: by its name, never its UUID."""
        try:
            name = self.names(uuid)
        except (OSError, SealsyncError):
            name = None
        return f"sender '{printable(name)}'" if name else "another sender"

    def _conflicts(self, wanted: Iterable[str], uuid: str) -> dict[str, str]:
        if self._scope == SENDER_SCOPE:
            return {}
        return {d: self._owners[d] for d in wanted if self._owners.get(d, uuid) != uuid}

    def _unclaimed(self, wanted: Iterable[str], uuid: str) -> list[str]:
        """The devices a claim by ``uuid`` appends: those it does not own yet (in the
        sender scope, those it never claimed)."""
        if self._scope == SENDER_SCOPE:
            return [d for d in wanted if uuid not in self._claimants.get(d, ())]
        return [d for d in wanted if d not in self._owners]

    def claim(self, devices: Iterable[str], uuid: str) -> dict[str, str]:
        """Claim every unowned device for ``uuid``, or nothing if any is another's.

        Returns ``{device: owner}`` for the devices owned by another sender (nothing
        claimed then), else ``{}`` once the new claims are on disk.
        """
        check_sender_uuid(uuid)
        wanted = _unique(devices)
        with self._locked():
            conflicts = self._conflicts(wanted, uuid)
            if conflicts:
                return conflicts
            new = self._unclaimed(wanted, uuid)
            over = self._over_limit(uuid, len(new))
            if over is not None:
                raise over
            self._append([f"{CLAIM}\t{uuid}\t{d}" for d in new])
            return {}

    def claim_each(
        self, files: Sequence[Iterable[str]], uuid: str
    ) -> list[dict[str, str] | SealsyncError]:
        """:meth:`claim` for several files in order, under one lock and one append.

        Per file: ``{}`` (claimed), its conflicts, or the DeviceIdError of a device id
        the log cannot hold (the DeviceLimit of one that would take the sender past
        ``max_devices``). What the files claim is on disk when this returns.
        """
        check_sender_uuid(uuid)
        wanted_each: list[list[str] | SealsyncError] = []
        for devices in files:
            try:
                wanted_each.append(_unique(devices))
            except SealsyncError as exc:
                wanted_each.append(exc)
        results: list[dict[str, str] | SealsyncError] = []
        with self._locked():
            new: dict[str, None] = {}  # claimed by an earlier file of this call
            for wanted in wanted_each:
                if isinstance(wanted, SealsyncError):
                    results.append(wanted)
                    continue
                conflicts = self._conflicts(wanted, uuid)
                if not conflicts:
                    fresh = [d for d in self._unclaimed(wanted, uuid) if d not in new]
                    over = self._over_limit(uuid, len(new) + len(fresh))
                    if over is not None:
                        results.append(over)
                        continue
                    new.update((d, None) for d in fresh)
                else:
                    self._tell(uuid, min(conflicts))
                results.append(conflicts)
            self._append([f"{CLAIM}\t{uuid}\t{d}" for d in new])
        return results

    def _tell(self, uuid: str, device: str) -> None:
        """Remember that ``uuid`` was refused a file for ``device`` (the conflict verdict
        names the first conflicting device in this order: receiver/commit.py)."""
        told = self._told.setdefault(uuid, {})
        told.pop(device, None)
        told[device] = None
        while len(told) > MAX_TOLD:
            del told[next(iter(told))]

    def told(self, uuid: str) -> set[str]:
        """The devices a conflict verdict to ``uuid`` named since this receiver started:
        what ``OWNERS_QUERY`` may answer it about (receiver/queries.py)."""
        with self._thread_lock:
            return set(self._told.get(uuid, ()))

    def owners_of(self, devices: Iterable[str], asking: str | None = None) -> dict[str, str]:
        """Owner uuid per device, ``""`` for an unowned one. In the sender scope, as
        ``asking`` sees them: its own devices, every other one free to it."""
        wanted = _unique(devices)
        with self._locked():
            if self._scope == SENDER_SCOPE and asking is not None:
                return {d: asking if asking in self._claimants.get(d, ()) else "" for d in wanted}
            return {d: self._owners.get(d, "") for d in wanted}

    def release(self, devices: Iterable[str]) -> list[str]:
        """Make devices unowned so another sender may claim them; returns those that were owned."""
        wanted = _unique(devices)
        with self._locked():
            owned = [d for d in wanted if d in self._owners]
            self._append([f"{RELEASE}\t{d}" for d in owned])
            return owned

    def owned_bytes(self, uuid: str) -> int:
        """Bytes of ``uuid``'s claim lines in the log (what it makes the receiver keep
        there, for its quota)."""
        with self._locked():
            return self._bytes.get(uuid, 0)

    def by_owner(self) -> dict[str, list[str]]:
        """Devices per owner uuid, each list sorted (in the sender scope, a device under
        each sender that claimed it)."""
        with self._locked():
            grouped: dict[str, list[str]] = {}
            for device, owner in self._owners.items():
                owners = self._claimants[device] if self._scope == SENDER_SCOPE else (owner,)
                for each in owners:
                    grouped.setdefault(each, []).append(device)
        return {owner: sorted(found) for owner, found in sorted(grouped.items())}

    def close(self) -> None:
        with self._thread_lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    def __enter__(self) -> DeviceOwners:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
