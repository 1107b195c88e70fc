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
  that fails authentication, outlives the login grace time, idles before
  authenticating (``preauth_timeout``), or leaves without trying, adds seconds to that
  address's penalty; once the penalty exceeds ``PENALTY_MIN`` the address is refused
  at accept until it runs out. Penalties add up while an address keeps failing and
  are capped at ``max_seconds``. A connection that authenticates never adds anything,
  so an honest sender is never penalised.
* **blocks**: what an address earns while it is not refused yet also goes to its
  block (IPv4 /24, IPv6 /48); a block whose penalty exceeds ``BLOCK_PENALTY_MIN`` is
  refused as a whole. One address alone never gets there (it is refused itself first,
  and a refused address adds nothing), a crowd of addresses of one network does, as
  soon as it starts failing, however few connections each address makes.
* **a reserve for known senders**: an address whose connection opened a ``sealsync``
  session recently (``TRUSTED_FOR``; at start, the addresses of the sender folders
  rounds used) is exempt from its block's refusal, and its startups are counted apart,
  in a reserve of their own (``reserved``), before the shared ones: a flood of
  strangers cannot take them. An address loses this once its own penalty refuses it.

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
from collections.abc import Callable, Iterable

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
    IDLE_BEFORE_AUTH = "silent, or no authentication after the key exchange (preauth_timeout)"
    IDLE_AFTER_AUTH = "authenticated but opened no session"


PENALTY_SECONDS = {
    Outcome.AUTH_FAILED: 5.0,
    Outcome.GRACE_EXCEEDED: 20.0,
    Outcome.NO_AUTH: 1.0,
    Outcome.IDLE_BEFORE_AUTH: 10.0,
    Outcome.IDLE_AFTER_AUTH: 5.0,
}
"""Seconds of penalty each failure adds to its source (OpenSSH's scale). A connection
that authenticated and then opened no session in time (``SESSION_WAIT``) counts like
a failed login: a key holding connections open without using them is attacking. One
cut for idling before authentication stays under ``PENALTY_MIN`` (a sender on a slow
link may be cut once), two do not."""
SESSION_WAIT = 5.0
"""Seconds an authenticated connection has to open its ``sealsync`` session: a sender
asks for it right after its key is accepted."""
PENALTY_MIN = 15.0
"""A source is refused only once its penalty exceeds this: one typo'd key or one port
probe is not enough, a stream of failures is."""
PENALISED = "penalised"
"""What starts :meth:`Admission.admit`'s answer for a source refused for its failures."""
BLOCK_PENALTY_MIN = 60.0
"""A block (IPv4 /24, IPv6 /48) is refused once its penalty exceeds this: four times an
address's, so that one failing address, or two, never refuse their neighbours."""
IPV4_BLOCK_PREFIX = 24
IPV6_BLOCK_PREFIX = 48
"""An address block: a network one party typically holds (an IPv4 /24, an IPv6 site's
/48; an IPv6 address already counts as its /64)."""
TRUSTED_FOR = 7 * 86400.0
"""Seconds an address that opened a session stays in the reserve for known senders."""
MAX_TRUSTED = 65536
"""Known sender addresses remembered at once (the oldest are forgotten first)."""
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


def block_of(ip: IPAddress) -> str:
    """The address block penalties also count: its IPv4 /24 or IPv6 /48."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.IPv6Network(f"{ip}/{IPV6_BLOCK_PREFIX}", strict=False))
    v4 = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else ip
    assert v4 is not None
    return str(ipaddress.IPv4Network(f"{v4}/{IPV4_BLOCK_PREFIX}", strict=False))


class Refusal(str):
    """Why :meth:`Admission.admit` refused a connection: the text, its ``kind`` (fixed
    words, for the log's rate limit: the text holds counts) and whether the peer is
    ``silent``-ly closed (a penalised address learns nothing) or told in one line."""

    kind: str
    silent: bool

    def __new__(cls, text: str, kind: str, *, silent: bool = False) -> Refusal:
        refusal = super().__new__(cls, text)
        refusal.kind = kind
        refusal.silent = silent
        return refusal


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
    """One accepted connection's place in the startup counts (``reserved``: in the
    reserve for known senders)."""

    __slots__ = ("source", "block", "reserved", "authenticated", "closed")

    def __init__(self, source: str, block: str = "", reserved: bool = False) -> None:
        self.source = source
        self.block = block
        self.reserved = reserved
        self.authenticated = False
        self.closed = False


class Admission:
    """Startup counts, per-source caps and penalties for the accept loop; thread-safe.

    ``admit`` is called for every accepted socket (after the allow list), then
    ``authenticated`` when the key is accepted, ``logged_in`` when its session opens,
    and ``close`` when the connection ends; ``close`` applies the penalty its outcome
    earns. ``reserved``: startups kept for known senders' addresses (see the module).
    """

    def __init__(
        self,
        max_startups: MaxStartups,
        per_source: int,
        penalty_max: float,
        *,
        reserved: int = 0,
        rand: Callable[[], float] = random.random,
        clock: Clock = time.monotonic,
    ) -> None:
        self.max_startups = max_startups
        self.per_source = per_source
        self.reserved = reserved
        self.penalties = SourcePenalties(penalty_max)
        self.block_penalties = SourcePenalties(penalty_max, BLOCK_PENALTY_MIN)
        self._rand = rand
        self._clock = clock
        self._lock = threading.Lock()
        self._startups = 0
        self._reserved_open = 0
        self._by_source: dict[str, int] = {}
        self._logins: dict[str, float] = {}  # source -> when a session last opened, oldest first

    @property
    def startups(self) -> int:
        """Startups in the shared count (``max_startups``)."""
        with self._lock:
            return self._startups

    @property
    def reserved_startups(self) -> int:
        """Startups in the reserve for known senders."""
        with self._lock:
            return self._reserved_open

    def admit(self, ip: IPAddress) -> Startup | Refusal:
        """A new startup, or why the connection is refused."""
        source, block = source_of(ip), block_of(ip)
        with self._lock:
            now = self._clock()
            left = self.penalties.refused_for(source, now)
            if left > 0:
                return Refusal(
                    f"{PENALISED} for failing connections ({left:.0f} s left)",
                    PENALISED,
                    silent=True,
                )
            known = self._known(source, now)
            if not known:
                left = self.block_penalties.refused_for(block, now)
                if left > 0:
                    return Refusal(
                        f"connections from its network {block} keep failing ({left:.0f} s left)",
                        "network penalised",
                    )
            here = self._by_source.get(source, 0)
            if here >= self.per_source:
                return Refusal(
                    f"{here} unauthenticated connections from this source",
                    "per_source_max_startups",
                )
            reserved = known and self._reserved_open < self.reserved
            if reserved:
                self._reserved_open += 1
            else:
                if self._rand() < self.max_startups.drop_probability(self._startups):
                    return Refusal(
                        f"{self._startups} unauthenticated connections open (max_startups)",
                        "max_startups",
                    )
                self._startups += 1
            self._by_source[source] = here + 1
            return Startup(source, block, reserved)

    def authenticated(self, startup: Startup) -> None:
        """The connection's key was accepted: it leaves the startup counts."""
        with self._lock:
            if not startup.authenticated and not startup.closed:
                startup.authenticated = True
                self._leave(startup)

    def logged_in(self, startup: Startup) -> None:
        """The connection opened its session: its address is a known sender's now."""
        with self._lock:
            self._remember(startup.source, self._clock())

    def remember(self, sources: Iterable[tuple[str, float]]) -> None:
        """Known senders' addresses (``source_of`` form) with the age in seconds of
        their last session: at start, from the sender folders their rounds used."""
        with self._lock:
            now = self._clock()
            for source, age in sorted(sources, key=lambda sa: -sa[1]):  # oldest first
                if 0 <= age <= TRUSTED_FOR:
                    self._remember(source, now - age)

    def close(self, startup: Startup, outcome: Outcome) -> float:
        """The connection ended; applies its penalty. Returns the seconds its source is
        refused for if this connection is the one that got it refused (else 0), so that
        the caller reports a source once, not at every failure."""
        return self.closed(startup, outcome)[0]

    def closed(self, startup: Startup, outcome: Outcome) -> tuple[float, float]:
        """:meth:`close`, and the seconds the source's block is refused for if this
        connection is the one that got it refused (else 0)."""
        with self._lock:
            if startup.closed:
                return 0.0, 0.0
            startup.closed = True
            if startup.authenticated and outcome is not Outcome.IDLE_AFTER_AUTH:
                return 0.0, 0.0  # an authenticated connection that used its session: no penalty
            if not startup.authenticated:
                self._leave(startup)
            seconds = PENALTY_SECONDS.get(outcome, 0.0)
            if seconds <= 0:
                return 0.0, 0.0
            now = self._clock()
            if self.penalties.refused_for(startup.source, now) > 0:
                self.penalties.add(startup.source, seconds, now)
                return 0.0, 0.0  # refused already: reported, and nothing for its block
            left = self.penalties.add(startup.source, seconds, now)
            if left > 0:  # refused now: no known sender's address any more
                self._logins.pop(startup.source, None)
            block = startup.block
            if not block:
                return left, 0.0
            was_refused = self.block_penalties.refused_for(block, now) > 0
            block_left = self.block_penalties.add(block, seconds, now)
            return left, 0.0 if was_refused else block_left

    def _known(self, source: str, now: float) -> bool:
        when = self._logins.get(source)
        return when is not None and now - when <= TRUSTED_FOR

    def _remember(self, source: str, when: float) -> None:
        self._logins.pop(source, None)  # re-inserted last: the dict stays oldest first
        while len(self._logins) >= MAX_TRUSTED:
            del self._logins[next(iter(self._logins))]
        self._logins[source] = when

    def _leave(self, startup: Startup) -> None:
        if startup.reserved:
            self._reserved_open -= 1
        else:
            self._startups -= 1
        source = startup.source
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
