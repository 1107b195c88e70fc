"""Who may talk to the receiver: IP allow list, authorized keys, UUID-to-key binding.

Three independent gates (docs/design.md §5.1, §9.7, §9.10):

* the **allow list** is checked against the TCP peer address of the socket, before
  a single SSH byte is exchanged — never against anything the client says;
* **public-key authentication** against an OpenSSH ``authorized_keys`` file, compared
  by key blob, re-read when the file changes so that revoking a key needs no restart;
* a sender's **UUID is bound to the first key that presented it**: the UUID names the
  sender's folders and its device ownership, so a second key claiming it could write
  under another sender's name. The bindings live in ``<schema dir>/sync/sender_keys.txt``,
  one line per sender, tab separated::

      <uuid>\\t<key fingerprint SHA256:...>\\t<last peer ip>\\t<first seen, UTC ISO 8601>

  replaced atomically on every change, under ``sender_keys.txt.lock`` so that the
  running receiver and ``sealsync senders`` never write over each other. An operator
  re-keys a sender with ``sealsync senders rekey UUID --key NEW.pub`` (the binding moves
  from the old key to the new one in one write: the UUID is never free for another key
  to claim) and retires one with ``sealsync senders retire UUID``, which keeps its line
  with the key field ``retired:<the key's fingerprint>``: no key can claim that UUID
  again until it is re-keyed explicitly, and the retired key binds no new UUID either
  (an edge wiped and reinstalled, or a copy of its key, would otherwise come back at
  once under a new name and claim the devices its retirement released) until the
  operator binds it to one, ``sealsync senders rekey NEWUUID --key KEY.pub``. A line
  ``retired`` without a fingerprint retires the UUID alone.

  Each of those operator changes raises the file's **generation** (a first line
  ``# generation N``), and :mod:`receiver.key_generation` records it outside the
  storage as well, so that a restore of an older copy of the file cannot bring a
  retired sender or an old key back silently. A binding the receiver makes itself
  (a new sender's first HELLO, a new address) keeps the generation it found.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from filelock import FileLock

from sealsync import durable, permissions, sshfiles
from sealsync.errors import SealsyncError
from sealsync.keys import fingerprint

log = logging.getLogger(f"sealsync.{__name__}")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SENDER_KEYS_FILE = "sender_keys.txt"
RETIRED = "retired"
"""The fingerprint of a retired sender's binding: no key matches it. On disk the key
field is ``retired:<fingerprint of the key it had>`` (or ``retired`` alone)."""


# --- allow list ----------------------------------------------------------------------


def peer_address(host: str) -> IPAddress:
    """The IP of a socket peer, an IPv4-mapped IPv6 address taken as the IPv4 it maps.

    A dual-stack listener reports IPv4 clients as ``::ffff:a.b.c.d``; an allow list
    written with IPv4 networks must still match them.
    """
    ip = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_allowed(ip: IPAddress, allow: Iterable[IPNetwork]) -> bool:
    """True if ``ip`` is inside one of the networks (networks of the other family never match)."""
    return any(ip.version == net.version and ip in net for net in allow)


# --- authorized_keys -----------------------------------------------------------------


def lenient_authorized_keys(text: str, source: str = "authorized_keys") -> set[bytes]:
    """The key blobs of an OpenSSH ``authorized_keys`` text, bad lines skipped.

    A line is ``type base64 [comment]``. Options (``from=``, ``command=``...) are not
    enforced by this server, so a line with options is skipped rather than granted
    more than it says, as is a line whose key does not decode. This is the lenient
    reading for a file that changes while the receiver runs (one bad line must not
    lock every sender out); at start-up the config refuses such a file with
    ``file:line`` (``sshfiles.read_authorized_keys``).
    """
    blobs, problems = sshfiles.parse_authorized_keys(text)
    for number, problem in problems:
        log.warning("%s:%d: skipped: %s", source, number, problem)
    return blobs


class AuthorizedKeys:
    """The public keys allowed to connect, re-read whenever the file changes.

    The file's identity (inode, size, mtime) and mode are checked at each
    authentication attempt. A file that vanished, cannot be read, or that group or
    others can write or replace (through its folder) grants nothing (fail closed, as
    sshd does). Why it grants nothing
    is logged once per reason, named on each connection it refuses, and told to the
    sender as a fixed banner (:meth:`ignored`), so the edge does not ask for a key to
    be added to a file that holds it.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._blobs: frozenset[bytes] = frozenset()
        self._refused = ""  # why the file grants nothing, logged once per reason
        self._refresh()

    def _refuse(self, why: str) -> frozenset[bytes]:
        if why != self._refused:
            log.warning("%s: %s: no key is accepted", self.path, why)
        self._refused = why
        self._stamp, self._blobs = None, frozenset()
        return self._blobs

    def _refresh(self) -> frozenset[bytes]:
        with self._lock:
            try:
                st = os.stat(self.path)
            except OSError as exc:
                return self._refuse(f"cannot read ({exc.strerror or exc})")
            unsafe = permissions.trust_file_problem(self.path, st.st_mode)
            if unsafe is not None:
                return self._refuse(unsafe)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp != self._stamp:
                try:
                    text = self.path.read_text(encoding="utf-8", errors="replace")
                except OSError as exc:
                    return self._refuse(f"cannot read ({exc.strerror or exc})")
                self._blobs = frozenset(lenient_authorized_keys(text, str(self.path)))
                self._stamp = stamp
                self._refused = ""
                log.info("%s: %d authorized keys", self.path, len(self._blobs))
            return self._blobs

    def allows(self, key_blob: bytes) -> bool:
        return key_blob in self._refresh()

    def ignored(self) -> str:
        """Why the file grants no key now ("" when it is read and used)."""
        self._refresh()
        with self._lock:
            return self._refused


# --- UUID to key binding -------------------------------------------------------------


@dataclass(frozen=True)
class SenderBinding:
    uuid: str
    fingerprint: str
    last_ip: str
    first_seen: str
    retired_key: str = ""
    """For a retired binding: the fingerprint of the key it had, which binds no new UUID."""

    def line(self) -> str:
        key = f"{RETIRED}:{self.retired_key}" if self.retired_key else self.fingerprint
        return "\t".join((self.uuid, key, self.last_ip, self.first_seen))

    @classmethod
    def from_fields(cls, uuid: str, key: str, last_ip: str, first_seen: str) -> SenderBinding:
        if key.startswith(f"{RETIRED}:"):
            return cls(uuid, RETIRED, last_ip, first_seen, key[len(RETIRED) + 1 :])
        return cls(uuid, key, last_ip, first_seen)


GENERATION_LINE = "# generation "
"""The first line of ``sender_keys.txt`` once an operator changed a binding."""


def parse_generation(lines: Iterable[str]) -> int:
    """The file's generation: its ``# generation N`` line, 0 without one."""
    for line in lines:
        if line.startswith(GENERATION_LINE):
            value = line[len(GENERATION_LINE) :].strip()
            return int(value) if value.isdigit() else 0
    return 0


def parse_sender_keys(lines: Iterable[str]) -> dict[str, SenderBinding]:
    """Bindings by UUID; malformed lines are skipped (the file is only written here),
    comment lines (the generation's) are not bindings."""
    out: dict[str, SenderBinding] = {}
    for line in lines:
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 4 or not parts[0] or not _is_key_field(parts[1]):
            if line:
                log.warning("%s: ignoring a malformed line: %r", SENDER_KEYS_FILE, line[:200])
            continue
        out.setdefault(parts[0], SenderBinding.from_fields(*parts))
    return out


def _is_key_field(value: str) -> bool:
    if value.startswith(f"{RETIRED}:"):
        value = value[len(RETIRED) + 1 :]
    return value.startswith("SHA256:") or value == RETIRED


class GenerationWitness(Protocol):
    """The copy of ``sender_keys.txt``'s generation kept outside the storage."""

    def read(self) -> int: ...

    def write(self, generation: int) -> None: ...


class KeyLimit(SealsyncError):
    """A key already acts as ``max_uuids_per_key`` senders and claims one more."""


class Retired(SealsyncError):
    """The UUID was retired (``sealsync senders retire``): no key may act as it."""


class RolledBack(Retired):
    """``sender_keys.txt`` went back to a lower generation while this process read it
    (an older copy restored under a running receiver): no sender is accepted."""


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


class SenderKeys:
    """The UUID → key bindings, shared by every session of one receiver.

    The file is read again whenever its identity (inode, size, mtime, ctime) changed,
    so that an operator's edit (deleting a line to re-key a sender) takes effect at
    the next HELLO, and otherwise served from memory: a HELLO costs one ``stat``
    under the lock, not a read and parse of every binding. Writes happen only when
    something changed.

    ``max_uuids_per_key`` bounds how many sender UUIDs one key may bind: an edge node
    runs one sender per instance, and a key binding UUIDs without end could claim
    devices and folders under as many names as it likes.
    """

    def __init__(
        self,
        schema_dir: Path,
        max_uuids_per_key: int | None = None,
        witness: GenerationWitness | None = None,
    ) -> None:
        self.path = Path(schema_dir) / "sync" / SENDER_KEYS_FILE
        self._file_lock = FileLock(f"{self.path}.lock")
        self.max_uuids_per_key = max_uuids_per_key
        self.witness = witness
        """Where an operator's change (``set_key``, ``accept``) records the file's new
        generation outside the storage (:class:`receiver.key_generation.Witness`)."""
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._bindings: dict[str, SenderBinding] = {}
        self._by_key: dict[str, set[str]] = {}
        self._retired_keys: dict[str, str] = {}  # key fingerprint -> a UUID retired with it
        self._generation = 0
        self._highest = 0  # the highest generation this process has seen

    def bindings(self) -> dict[str, SenderBinding]:
        with self._lock:
            return dict(self._current())

    def generation(self) -> int:
        """The file's generation (0: no operator change recorded in it)."""
        with self._lock:
            self._current()
            return self._generation

    def _current(self) -> dict[str, SenderBinding]:
        """The bindings on disk now, re-read only if the file changed (caller holds the lock)."""
        stamp = self._file_stamp()
        if stamp is None or stamp != self._stamp:
            lines = durable.read_lines(self.path) if stamp else []
            self._cache(parse_sender_keys(lines), stamp, parse_generation(lines))
        return self._bindings

    def _cache(
        self,
        bindings: dict[str, SenderBinding],
        stamp: tuple[int, int, int, int] | None,
        generation: int,
    ) -> None:
        self._bindings, self._stamp, self._generation = bindings, stamp, generation
        if generation < self._highest:
            log.error(
                "%s went back from generation %d to %d (an older copy restored while the "
                "receiver runs): no sender is accepted until the receiver restarts",
                self.path,
                self._highest,
                generation,
            )
        self._highest = max(self._highest, generation)
        self._by_key = {}
        self._retired_keys = {}
        for b in bindings.values():
            if b.fingerprint != RETIRED:
                self._by_key.setdefault(b.fingerprint, set()).add(b.uuid)
            elif b.retired_key:
                self._retired_keys.setdefault(b.retired_key, b.uuid)

    def _file_stamp(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def bind(self, uuid: str, key: object, ip: str) -> SenderBinding | None:
        """Bind ``uuid`` to ``key`` (a paramiko key, blob or fingerprint) if it is free.

        Returns the binding when the key may act as ``uuid``, None when the UUID is
        already bound to another key; raises Retired for a retired UUID, or a new UUID
        presented by a key a retirement kept (see the module doc), and KeyLimit
        when the UUID is free but the key already binds ``max_uuids_per_key`` others
        (UUIDs it holds stay usable). A HELLO from a known sender at its known address
        reads nothing but a ``stat``; a change is decided again under the file lock,
        on the file as it is then.
        """
        fp = key if isinstance(key, str) and key.startswith("SHA256:") else fingerprint(key)
        with self._lock:
            current = self._current().get(uuid)
            if self._generation < self._highest:
                raise RolledBack(
                    f"{self.path} was restored from an older copy while the receiver runs: "
                    "no sender is accepted until it restarts (serve then names the fix)"
                )
            if current is not None and current.fingerprint == fp and current.last_ip == ip:
                return current
        self.path.parent.mkdir(parents=True, exist_ok=True)  # where the lock file lives
        with self._lock, self._file_lock:
            bindings = self._current()
            current = bindings.get(uuid)
            if current is not None and current.fingerprint == RETIRED:
                raise Retired(
                    f"sender UUID {uuid} was retired on this receiver; "
                    "its operator can bind a key again with: sealsync senders rekey"
                )
            if current is not None and current.fingerprint != fp:
                return None
            if current is not None and current.last_ip == ip:
                return current
            if current is None and fp in self._retired_keys:
                raise Retired(
                    f"key {fp} was retired on this receiver with sender "
                    f"{self._retired_keys[fp]}: it acts as no new sender ({uuid}) until "
                    f"the receiver's operator binds it: sealsync senders rekey {uuid} "
                    "--key <its .pub>"
                )
            if current is None:
                held = self._by_key.get(fp, set())
                if self.max_uuids_per_key is not None and len(held) >= self.max_uuids_per_key:
                    raise KeyLimit(
                        f"key {fp} already acts as {len(held)} sender UUIDs, the most the "
                        f"receiver allows (max_uuids_per_key = {self.max_uuids_per_key})"
                    )
            first_seen = current.first_seen if current is not None else _now()
            binding = SenderBinding(uuid, fp, ip, first_seen)
            self._write({**bindings, uuid: binding})
            if current is None:
                log.info("sender %s bound to key %s (first seen from %s)", uuid, fp, ip)
            return binding

    def set_key(self, uuid: str, fp: str) -> SenderBinding | None:
        """Bind ``uuid`` to the key ``fp`` in one write, whatever held it (re-keying, or
        bringing back a retired sender, or letting a retired sender's key act as a new
        UUID); returns the binding it replaced. KeyLimit if the key already acts as
        ``max_uuids_per_key`` other senders."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self._file_lock:
            bindings = self._current()
            old = bindings.get(uuid)
            kept = ""  # a retirement keeps the key it retires (or kept before)
            if fp == RETIRED and old is not None:
                kept = old.retired_key if old.fingerprint == RETIRED else old.fingerprint
            others = self._by_key.get(fp, set()) - {uuid}
            if fp != RETIRED and self.max_uuids_per_key is not None:
                if len(others) >= self.max_uuids_per_key:
                    raise KeyLimit(
                        f"key {fp} already acts as {len(others)} other sender UUIDs, the most "
                        f"the receiver allows (max_uuids_per_key = {self.max_uuids_per_key})"
                    )
            first_seen = old.first_seen if old is not None else _now()
            last_ip = old.last_ip if old is not None else "-"
            new = {**bindings, uuid: SenderBinding(uuid, fp, last_ip, first_seen, kept)}
            self._operator_write(new)
            return old

    def accept(self) -> int:
        """Raise the file's generation past the one recorded outside the storage, its
        bindings unchanged (``sealsync senders accept-restore``); returns it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self._file_lock:
            return self._operator_write(self._current())

    def _operator_write(self, bindings: dict[str, SenderBinding]) -> int:
        """An operator's change: the next generation, checked and recorded by the
        witness before the file is replaced, then the file. A crash between the two
        leaves the witness ahead: ``serve`` refuses until the operator looks."""
        generation = self._generation
        if self.witness is not None:
            generation = max(generation, self.witness.read())
        generation += 1
        if self.witness is not None:
            self.witness.write(generation)
        self._write(bindings, generation)
        return generation

    def retire(self, uuid: str) -> SenderBinding | None:
        """Mark ``uuid`` retired (no key may claim it); returns its binding before, if any."""
        return self.set_key(uuid, RETIRED)

    def _write(self, bindings: dict[str, SenderBinding], generation: int | None = None) -> None:
        """Replace the file (caller holds both locks) and the cache with ``bindings``,
        at ``generation`` (None: the one it has)."""
        generation = self._generation if generation is None else generation
        head = [f"{GENERATION_LINE}{generation}"] if generation else []
        durable.write_lines(self.path, head + [b.line() for b in bindings.values()])
        self._cache(bindings, self._file_stamp(), generation)  # what we wrote, not read back
