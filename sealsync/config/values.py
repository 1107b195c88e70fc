"""The text forms of config values that are more than a type: endpoints, rates, ``MaxStartups``.

Each parser raises ValueError with what is wrong; the reader that calls it
(``sealsync.config.schema``) names the file and the key. They are also used where the
same forms come from a command line (``send --bwlimit``) or from a user's setting
(a Spark master's ``host:port``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# A host goes into a state folder name (<host>_<port>) and into log lines.
_HOST_RE = re.compile(r"^[A-Za-z0-9._:%-]+$")


def is_host(host: str) -> bool:
    """A host name or IP address the resolver takes: the allowed characters and, for a
    name, no empty label and none longer than 63 (a typo'd ``a..b`` made the
    resolver's IDNA step raise UnicodeError, an internal error, at connect time)."""
    if not _HOST_RE.match(host):
        return False
    if ":" in host:
        return True  # IPv6, whose form the caller checks
    labels = host.removesuffix(".").split(".")  # one trailing dot: a fully qualified name
    return len(host) <= 253 and all(0 < len(label) <= 63 for label in labels)


def format_endpoint(host: str, port: int) -> str:
    """``host:port`` the way a user writes it, brackets around an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class MaxStartups:
    """``start:rate:full`` as in ``sshd_config``'s ``MaxStartups``."""

    start: int
    rate: int
    full: int

    def __post_init__(self) -> None:
        if not 1 <= self.start <= self.full:
            raise ValueError(f"start must be between 1 and full ({self.full}), got {self.start}")
        if not 0 <= self.rate <= 100:
            raise ValueError(f"rate must be a percentage (0 to 100), got {self.rate}")

    @classmethod
    def parse(cls, text: str) -> MaxStartups:
        """``"10:30:60"``, or ``"N"`` for a plain cap of N (no early drop)."""
        parts = text.strip().split(":")
        if len(parts) not in (1, 3) or not all(p.isdigit() for p in parts):
            raise ValueError('expected "start:rate:full" (like "10:30:60") or one number')
        if len(parts) == 1:
            return cls(int(parts[0]), 100, int(parts[0]))
        start, rate, full = (int(p) for p in parts)
        return cls(start, rate, full)

    def drop_probability(self, startups: int) -> float:
        """The chance that a new connection is dropped while ``startups`` are open."""
        if startups < self.start:
            return 0.0
        if startups >= self.full:
            return 1.0
        span = self.full - self.start
        return (self.rate + (100 - self.rate) * (startups - self.start) / span) / 100


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` into its parts; ValueError says what is wrong."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or value[end + 1 : end + 2] != ":":
            raise ValueError("write an IPv6 address as [address]:port")
        host, port_text = value[1:end], value[end + 2 :]
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep or not host:
            raise ValueError("must be host:port")
        if ":" in host:
            raise ValueError("write an IPv6 address as [address]:port")
        if not is_host(host):
            raise ValueError(f"{host!r} is not a host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {port_text!r}")
    return host, int(port_text)


_RATE_RE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(?:([bkmgtp])(b|ib)?)?$", re.IGNORECASE)
RATE_HELP = (
    "write a number with an optional K, M or G suffix: 4M is 4 MiB/s, a bare number is "
    "KiB/s, KB, MB and GB are powers of 1000, 0 is no limit"
)
#: rsync's smallest cap other than 0 (unlimited).
MIN_RATE = 512


def parse_rate(text: str) -> int:
    """Bytes per second from rsync's ``--bwlimit`` syntax; ValueError says what is wrong.

    As rsync reads it: a number (fractions allowed) and an optional suffix letter
    B, K, M, G, T or P (any case) meaning bytes or powers of 1024, followed by an
    optional ``B`` that makes the powers 1000 or ``iB`` that keeps them 1024; no
    suffix is KiB. ``0`` is no limit; other rates under 512 bytes/s are refused.
    rsync's ``+1``/``-1`` byte offsets are not taken: they mean nothing for a rate.
    """
    m = _RATE_RE.match(text.strip())
    if m is None:
        raise ValueError(f"not a rate: {text!r}; {RATE_HELP}")
    number, letter, unit = m.groups()
    power = "bkmgtp".index((letter or "k").lower())
    base = 1000 if unit is not None and unit.lower() == "b" else 1024
    rate = int(float(number) * base**power)
    if 0 < rate < MIN_RATE or (rate == 0 and float(number) != 0):
        raise ValueError(
            f"rate too small: {text!r} (at least {MIN_RATE} bytes/s, or 0 for no limit)"
        )
    return rate
