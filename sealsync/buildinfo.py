"""Which sealsync, protocol and Python each process runs: ``sealsync --version`` and
``sealsync_build_info``.

The release comes from the installed package's metadata (``sealsync.__version__``),
so each release answers its own number; the protocol versions from
``sealsync.protocol.spec``, so an operator upgrading one end of a link sees at once
which ends can talk (each release speaks its predecessor's version too).

Every metrics output (the receiver's ``/metrics``, the sender's and the loader's
textfiles) carries one sample, value 1, labelled with the release, the protocol
version it speaks and the Python running it, so a dashboard can see a fleet's
versions at a glance (both ends must speak the same protocol version). The ``role``
label keeps the sender's and the loader's samples apart when one node_exporter
serves both textfiles: two files with the same series would fail its scrape.
"""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING

from sealsync import __version__
from sealsync.protocol import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily

NAME = "sealsync_build_info"


def version_line() -> str:
    """What ``sealsync --version`` prints: the release and the protocol versions."""
    speaks = (
        f"protocol {PROTOCOL_VERSION}"
        if OLDEST_PROTOCOL_VERSION == PROTOCOL_VERSION
        else f"protocol {PROTOCOL_VERSION}, also speaks {OLDEST_PROTOCOL_VERSION}"
    )
    return f"sealsync {__version__} ({speaks})"


def build_info_family(role: str) -> GaugeMetricFamily:
    """The build-info family of a ``role`` (receiver, sender, loader) process."""
    from prometheus_client.core import GaugeMetricFamily  # not for ``--version``

    family = GaugeMetricFamily(
        NAME,
        "1, labelled with the sealsync release, the protocol version it speaks, the Python "
        "running it and the role writing it.",
        labels=["version", "protocol", "python", "role"],
    )
    family.add_metric([__version__, str(PROTOCOL_VERSION), platform.python_version(), role], 1)
    return family
