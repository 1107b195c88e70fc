"""The bandwidth cap (``bwlimit``): a token bucket on every byte a round writes.

An edge node's uplink is shared, and a cron round must not take all of it. The cap
sits where the session writes to the channel, so it counts everything the round sends
— schema pieces, deletions, control frames and file bytes alike — and a round of many
small files is held to it as well as one large file.

The bucket is paid before a write goes out, at ``rate`` bytes per second. It starts
empty, and while the round waits (for an answer, a scan, a reconnect) it saves at most
``BURST_SECONDS`` of unused rate, so the rate over a whole round stays at the cap
instead of catching up on idle time. A write larger than a ``piece`` is paid and sent
in pieces (a tenth of a second's worth, at most 64 KiB), so the link carries a steady
stream rather than a whole chunk at line speed followed by silence. A wait too short
for the OS to sleep precisely is not slept: the debt carries over to the next write,
which keeps the long-run rate exact without a sleep per small frame.

The rate is the protocol's bytes; SSH adds its packet headers and MACs on top.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sealsync.protocol import Stream

BURST_SECONDS = 0.05
"""Unused rate the bucket saves while the round is not writing, in seconds' worth."""
MIN_SLEEP = 0.002
"""Shorter waits are carried over to the next write instead of slept."""
MAX_PIECE = 64 * 1024
"""Largest piece a write is paid and sent in (one SSH packet's worth)."""
MIN_PIECE = 512


class TokenBucket:
    """Paces writes to ``rate`` bytes per second; one round's writer thread uses it."""

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
        burst: float = BURST_SECONDS,
    ) -> None:
        if rate <= 0:
            raise ValueError("a token bucket needs a rate above 0")
        self.rate = float(rate)
        self.capacity = self.rate * burst
        self.piece = int(min(MAX_PIECE, max(self.rate / 10, MIN_PIECE)))
        self._clock = clock
        self._sleep = sleep
        self._tokens = 0.0
        self._stamp = clock()

    def take(self, n: int) -> None:
        """Return once ``n`` more bytes may go out (sleeping off any debt first)."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= n
        if self._tokens < 0:
            wait = -self._tokens / self.rate
            if wait >= MIN_SLEEP:
                self._sleep(wait)  # the next take() credits the time that really passed


def paced_sendall(stream: Stream, data: bytes | memoryview, bucket: TokenBucket | None) -> None:
    """``stream.sendall(data)``, each piece paid to ``bucket`` first (None: no cap)."""
    if bucket is None:
        stream.sendall(data)
        return
    view = memoryview(data)
    piece = bucket.piece
    for start in range(0, len(view), piece):
        part = view[start : start + piece]
        bucket.take(len(part))
        stream.sendall(part)
