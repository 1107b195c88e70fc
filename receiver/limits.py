"""The receiver's admission policy: who may start a connection, and how much one sender may hold.

Pure logic — counters, clocks and coin flips passed in — so that every rule is
tested without a socket, and each decision costs a few dictionary operations: an
admission check is O(1) per connection whatever the number of peers.

Before authentication (the model is OpenSSH's ``sshd``):

* **startups**: connections accepted and not yet authenticated. ``MaxStartups``
  ``start:rate:full`` — below ``start`` all are admitted; from ``start`` on, a new one
  is dropped with a probability rising linearly from ``rate`` % to 100 % at ``full``.
  Authenticated sessions are counted apart, so a crowd that never authenticates
  cannot take the slots of senders that do.
* **per source**: at most ``per_source`` startups from one address (IPv4 /32, IPv6
  /64 — one host's worth: a single IPv6 host usually holds a whole /64).
* **penalties** (OpenSSH 9.8 ``PerSourcePenalties``): a connection from an address
  that fails authentication, outlives the login grace time, or leaves without trying,
  adds seconds to that address's penalty; once the penalty exceeds ``PENALTY_MIN``
  the address is refused at accept until it runs out. Penalties add up while an
  address keeps failing and are capped at ``max_seconds``. A connection that
  authenticates never adds anything, so an honest sender is never penalised.

After authentication:

* an authenticated connection must open its session within ``SESSION_WAIT`` seconds,
  else it is closed and its source and its key penalised as for a failed login
  (:class:`KeyPenalties`: a penalised key is refused at authentication);
* :class:`SlotCounter`: at most ``limit`` connections per key, sessions per sender UUID.
* :class:`ByteLedger`: bytes of unfinished uploads one sender holds (temporaries).
* :class:`Quota`: bytes one sender holds on the receiver (measured once, then counted).
* :class:`StallWindow`: a frame or file stream must keep making progress.
"""

from __future__ import annotations

import enum
import ipaddress
import random
import threading
import time
from collections.abc import Callable

from sealsync.config import MaxStartups

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Clock = Callable[[], float]

IPV6_SOURCE_PREFIX = 64
"""Addresses of one IPv6 source: a host is normally given a whole /64."""


class Outcome(enum.Enum):
    """How a connection left the startup phase."""

    AUTHENTICATED = "authenticated"
    AUTH_FAILED = "authentication failed"
    GRACE_EXCEEDED = "login grace time exceeded"
    NO_AUTH = "closed without authenticating"
    IDLE_AFTER_AUTH = "authenticated but opened no session"


PENALTY_SECONDS = {
    Outcome.AUTH_FAILED: 5.0,
    Outcome.GRACE_EXCEEDED: 20.0,
    Outcome.NO_AUTH: 1.0,
    Outcome.IDLE_AFTER_AUTH: 5.0,
}
"""Seconds of penalty each failure adds to its source (OpenSSH's scale). A connection
that authenticated and then opened no session in time (``SESSION_WAIT``) counts like
a failed login: a key holding connections open without using them is attacking."""
SESSION_WAIT = 5.0
"""Seconds an authenticated connection has to open its ``sealsync`` session: a sender
asks for it right after its key is accepted."""
PENALTY_MIN = 15.0
"""A source is refused only once its penalty exceeds this: one typo'd key or one port
probe is not enough, a stream of failures is."""
PENALISED = "penalised"
"""What starts :meth:`Admission.admit`'s answer for a source refused for its failures."""
MAX_PENALISED_SOURCES = 65536
"""Sources remembered at once; beyond this, new failures are not penalised (the
alternative, refusing everyone, would let an attacker with many addresses lock
honest senders out)."""


def source_of(ip: IPAddress) -> str:
    """The unit penalties and per-source limits count: the address, or its IPv6 /64."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        net = ipaddress.IPv6Network(f"{ip}/{IPV6_SOURCE_PREFIX}", strict=False)
        return str(net)
    return str(ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else ip)


class SourcePenalties:
    """Seconds of penalty per source, added on failure and running out with time."""

    def __init__(self, max_seconds: float, min_seconds: float = PENALTY_MIN) -> None:
        self.max_seconds = max_seconds
        self.min_seconds = min_seconds
        self._expiry: dict[str, float] = {}
        self._active: set[str] = set()

    def add(self, source: str, seconds: float, now: float) -> float:
        """Add ``seconds`` to ``source``'s penalty; returns the seconds it is now refused for
        (0 while the penalty is still under the minimum)."""
        if self.max_seconds <= 0 or seconds <= 0:
            return 0.0
        expiry = self._expiry.get(source)
        if expiry is None or expiry <= now:
            self._active.discard(source)
            if expiry is None and len(self._expiry) >= MAX_PENALISED_SOURCES:
                self._purge(now)
                if len(self._expiry) >= MAX_PENALISED_SOURCES:
                    return 0.0
            expiry = now
        expiry = min(expiry + seconds, now + self.max_seconds)
        self._expiry[source] = expiry
        if source not in self._active and expiry - now > self.min_seconds:
            self._active.add(source)
        return expiry - now if source in self._active else 0.0

    def refused_for(self, source: str, now: float) -> float:
        """Seconds ``source`` is still refused for (0: admitted)."""
        if source not in self._active:
            return 0.0
        left = self._expiry[source] - now
        if left <= 0:
            self._active.discard(source)
            del self._expiry[source]
            return 0.0
        return left

    def __len__(self) -> int:
        return len(self._expiry)

    def _purge(self, now: float) -> None:
        """Forget expired penalties; amortised over the inserts that filled the table."""
        for source in [s for s, e in self._expiry.items() if e <= now]:
            del self._expiry[source]
            self._active.discard(source)


class Startup:
    """One accepted connection's place in the startup counts."""

    __slots__ = ("source", "authenticated", "closed")

    def __init__(self, source: str) -> None:
        self.source = source
        self.authenticated = False
        self.closed = False


class Admission:
    """Startup counts, per-source caps and penalties for the accept loop; thread-safe.

    ``admit`` is called for every accepted socket (after the allow list), then
    ``authenticated`` when the key is accepted and ``close`` when the connection
    ends; ``close`` applies the penalty its outcome earns.
    """

    def __init__(
        self,
        max_startups: MaxStartups,
        per_source: int,
        penalty_max: float,
        *,
        rand: Callable[[], float] = random.random,
        clock: Clock = time.monotonic,
    ) -> None:
        self.max_startups = max_startups
        self.per_source = per_source
        self.penalties = SourcePenalties(penalty_max)
        self._rand = rand
        self._clock = clock
        self._lock = threading.Lock()
        self._startups = 0
        self._by_source: dict[str, int] = {}

    @property
    def startups(self) -> int:
        with self._lock:
            return self._startups

    def admit(self, ip: IPAddress) -> Startup | str:
        """A new startup, or why the connection is refused."""
        source = source_of(ip)
        with self._lock:
            left = self.penalties.refused_for(source, self._clock())
            if left > 0:
                return f"{PENALISED} for failing connections ({left:.0f} s left)"
            here = self._by_source.get(source, 0)
            if here >= self.per_source:
                return f"{here} unauthenticated connections from this source"
            if self._rand() < self.max_startups.drop_probability(self._startups):
                return f"{self._startups} unauthenticated connections open (max_startups)"
            self._startups += 1
            self._by_source[source] = here + 1
            return Startup(source)

    def authenticated(self, startup: Startup) -> None:
        """The connection's key was accepted: it leaves the startup counts."""
        with self._lock:
            if not startup.authenticated and not startup.closed:
                startup.authenticated = True
                self._leave(startup.source)

    def close(self, startup: Startup, outcome: Outcome) -> float:
        """The connection ended; applies its penalty. Returns the seconds its source is
        refused for if this connection is the one that got it refused (else 0), so that
        the caller reports a source once, not at every failure."""
        with self._lock:
            if startup.closed:
                return 0.0
            startup.closed = True
            if startup.authenticated and outcome is not Outcome.IDLE_AFTER_AUTH:
                return 0.0  # an authenticated connection that used its session: no penalty
            if not startup.authenticated:
                self._leave(startup.source)
            now = self._clock()
            was_refused = self.penalties.refused_for(startup.source, now) > 0
            left = self.penalties.add(startup.source, PENALTY_SECONDS.get(outcome, 0.0), now)
            return 0.0 if was_refused else left

    def _leave(self, source: str) -> None:
        self._startups -= 1
        left = self._by_source[source] - 1
        if left:
            self._by_source[source] = left
        else:
            del self._by_source[source]


class KeyPenalties:
    """Penalties per key (its fingerprint), as :class:`SourcePenalties` per address;
    thread-safe.

    A connection whose key is accepted and that then opens no session adds to its
    key's penalty as to its source's; once the key's penalty passes ``PENALTY_MIN``,
    the key is refused at authentication, from whatever address it comes, until the
    penalty runs out. A compromised edge's key used from many hosts (each under its
    own source's threshold) is stopped all the same; other keys are never affected.
    """

    def __init__(self, max_seconds: float, *, clock: Clock = time.monotonic) -> None:
        self._penalties = SourcePenalties(max_seconds)
        self._clock = clock
        self._lock = threading.Lock()

    def refused_for(self, key: str) -> float:
        """Seconds ``key`` is still refused for (0: it may authenticate)."""
        with self._lock:
            return self._penalties.refused_for(key, self._clock())

    def failed(self, key: str, outcome: Outcome) -> float:
        """One connection of ``key`` ended with ``outcome``; returns the seconds the key
        is refused for if this one got it refused (else 0), to be reported once."""
        with self._lock:
            now = self._clock()
            was_refused = self._penalties.refused_for(key, now) > 0
            left = self._penalties.add(key, PENALTY_SECONDS.get(outcome, 0.0), now)
            return 0.0 if was_refused else left


class SlotCounter:
    """At most ``limit`` open sessions per name (a key fingerprint, a sender UUID)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def acquire(self, name: str) -> bool:
        with self._lock:
            here = self._open.get(name, 0)
            if self.limit is not None and here >= self.limit:
                return False
            self._open[name] = here + 1
            return True

    def release(self, name: str) -> None:
        with self._lock:
            left = self._open.get(name, 0) - 1
            if left > 0:
                self._open[name] = left
            else:
                self._open.pop(name, None)

    def count(self, name: str) -> int:
        with self._lock:
            return self._open.get(name, 0)


class ByteLedger:
    """Bytes each sender holds in unfinished uploads (announced sizes, reserved up front)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}

    def reserve(self, name: str, size: int) -> bool:
        """Take ``size`` bytes for ``name`` if they fit under the limit."""
        with self._lock:
            here = self._held.get(name, 0)
            if self.limit is not None and here + size > self.limit:
                return False
            self._held[name] = here + size
            return True

    def release(self, name: str, size: int) -> None:
        with self._lock:
            left = self._held.get(name, 0) - size
            if left > 0:
                self._held[name] = left
            else:
                self._held.pop(name, None)

    def held(self, name: str) -> int:
        with self._lock:
            return self._held.get(name, 0)


class Quota:
    """Bytes each sender holds on the receiver, against ``limit``.

    Measuring a sender's files walks its folders, so it is done once per sender and
    then kept up to date by adding what arrives. Deletions are not subtracted (the
    loader applies them later, on another thread): the count only errs high, and a
    sender it puts over the limit is measured again — at most every
    ``remeasure_after`` seconds — before anything is refused.
    """

    def __init__(
        self,
        limit: int,
        measure: Callable[[str], int],
        *,
        remeasure_after: float = 60.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self.limit = limit
        self._measure = measure
        self.remeasure_after = remeasure_after
        self._clock = clock
        self._lock = threading.Lock()
        self._used: dict[str, int] = {}
        self._measured_at: dict[str, float] = {}

    def used(self, name: str) -> int:
        """The count for ``name``, measured first if it never was."""
        with self._lock:
            if name in self._used:
                return self._used[name]
        return self._remeasure(name)

    def over(self, name: str, incoming: int) -> int | None:
        """None if ``incoming`` more bytes fit, else the bytes ``name`` holds."""
        used = self.used(name)
        if used + incoming <= self.limit:
            return None
        with self._lock:
            stale = self._clock() - self._measured_at.get(name, 0.0) >= self.remeasure_after
        if stale:
            used = self._remeasure(name)
            if used + incoming <= self.limit:
                return None
        return used

    def add(self, name: str, size: int) -> None:
        with self._lock:
            if name in self._used:
                self._used[name] += size

    def _remeasure(self, name: str) -> int:
        used = self._measure(name)  # outside the lock: it walks folders
        with self._lock:
            self._used[name] = used
            self._measured_at[name] = self._clock()
        return used


class StallWindow:
    """Progress bookkeeping for one session: a trickle is a stall.

    While a frame or a file stream is incomplete (``armed``), the time spent waiting
    for the sender's bytes is cut into windows of ``timeout`` seconds, and each
    window must bring ``min_rate * timeout`` bytes; otherwise the session has
    stalled. Between frames outside a file stream the idle timeout applies instead
    (a sender scans its next data dir there). Only waiting counts: the receiver's own
    work (fsyncs, checks) is never held against the sender.
    """

    def __init__(self, timeout: float, min_rate: int) -> None:
        self.timeout = timeout
        self.min_bytes = max(1, int(min_rate * timeout))
        self.armed = False
        self._waited = 0.0
        self._bytes = 0

    def arm(self) -> None:
        self.armed = True

    def disarm(self) -> None:
        self.armed = False
        self._waited = 0.0
        self._bytes = 0

    def wait_limit(self) -> float:
        """The longest the next read may wait (armed)."""
        return max(self.timeout - self._waited, 0.0)

    def record(self, waited: float, received: int) -> bool:
        """Account one read; True if the window ran out without enough bytes."""
        self._waited += waited
        self._bytes += received
        if self._bytes >= self.min_bytes:
            self._waited, self._bytes = 0.0, 0  # enough: a new window starts
            return False
        return self._waited >= self.timeout

    def describe(self) -> str:
        return (
            f"less than {self.min_bytes} bytes in {self.timeout:g} s inside a frame or file "
            "stream (stall_timeout, min_transfer_rate)"
        )


class RefusalLog:
    """Log lines about refused connections, at most one per kind and ``interval``.

    A flood of refused connections (a penalised source reconnecting, an idle key, a
    port scan) must not flood the log: the first refusal of a kind in an interval is
    logged as it happens, the rest are counted and summed up in one line when the
    interval is over (:meth:`flush`, called on the service's timer and at the next
    refusal)."""

    def __init__(
        self,
        emit: Callable[[int, str], None],
        interval: float = 10.0,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self._emit = emit
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._window_end: dict[str, float] = {}
        self._suppressed: dict[str, tuple[int, int, set[str]]] = {}  # kind -> level, n, ips

    def refused(self, kind: str, level: int, ip: str, message: str) -> None:
        """One refusal of ``kind`` from ``ip``; ``message`` is its whole log line."""
        now = self._clock()
        lines: list[tuple[int, str]] = []
        with self._lock:
            lines.extend(self._due(now))
            end = self._window_end.get(kind)
            if end is None or now >= end:
                self._window_end[kind] = now + self.interval
                lines.append((level, message))
            else:
                _, count, ips = self._suppressed.get(kind, (level, 0, set()))
                if len(ips) < 64:
                    ips.add(ip)
                self._suppressed[kind] = (level, count + 1, ips)
        for line in lines:
            self._emit(*line)

    def flush(self) -> None:
        """Sum up the intervals that are over."""
        with self._lock:
            lines = self._due(self._clock())
        for line in lines:
            self._emit(*line)

    def _due(self, now: float) -> list[tuple[int, str]]:
        lines = []
        for kind, end in list(self._window_end.items()):
            if now < end:
                continue
            del self._window_end[kind]
            level, count, ips = self._suppressed.pop(kind, (0, 0, set()))
            if count:
                shown = ", ".join(sorted(ips)[:8]) + (", ..." if len(ips) > 8 else "")
                lines.append(
                    (
                        level,
                        f"{count} more connections refused in {self.interval:g} s "
                        f"({kind}) from {len(ips)} address(es): {shown}",
                    )
                )
        return lines
