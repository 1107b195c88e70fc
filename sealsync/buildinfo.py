"""``sealsync_build_info``: which sealsync, protocol and Python each process runs.

Every metrics output (the receiver's ``/metrics``, the sender's and the loader's
textfiles) carries one sample, value 1, labelled with the release, the protocol
version it speaks and the Python running it, so a dashboard can see a fleet's
versions at a glance (both ends must speak the same protocol version). The ``role``
label keeps the sender's and the loader's samples apart when one node_exporter
serves both textfiles: two files with the same series would fail its scrape.
"""

from __future__ import annotations

import platform

from prometheus_client.core import GaugeMetricFamily

from sealsync import __version__
from sealsync.protocol import PROTOCOL_VERSION

NAME = "sealsync_build_info"


def build_info_family(role: str) -> GaugeMetricFamily:
    """The build-info family of a ``role`` (receiver, sender, loader) process."""
    family = GaugeMetricFamily(
        NAME,
        "1, labelled with the sealsync release, the protocol version it speaks, the Python "
        "running it and the role writing it.",
        labels=["version", "protocol", "python", "role"],
    )
    family.add_metric([__version__, str(PROTOCOL_VERSION), platform.python_version(), role], 1)
    return family
