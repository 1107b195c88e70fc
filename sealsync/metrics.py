"""Prometheus metrics in a textfile, for node_exporter's textfile collector.

Sender and loader are cron jobs, not servers: nothing could scrape them between
runs. So each run writes what it knows to a ``*.prom`` file that node_exporter
serves (``--collector.textfile.directory``). The collector reads the file whenever
it is scraped, so the file is replaced atomically (``durable.atomic_write``): a
scrape sees the previous run's file or this run's, never half of one.

The values come from the run's own records (the sender's round history), not from
process-lifetime counters, so a run builds a fresh registry of metric families with
their values set once (:func:`snapshot_registry`); counters carry no ``_created``
sample, whose "time of creation" would be the time of writing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from sealsync import durable
from sealsync.errors import LocalIOError, describe_os_error


class _Fixed(Collector):
    """Serves metric families built beforehand, as they are."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def snapshot_registry(families: Iterable[Metric]) -> CollectorRegistry:
    """A registry holding exactly ``families`` (``GaugeMetricFamily``, ``CounterMetricFamily``)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Fixed(families))
    return registry


def as_number(value: object) -> float:
    """A recorded value as a sample: a number as it is, anything else (missing, a
    boolean, a damaged record) as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value)


def write_textfile(path: str | os.PathLike[str], registry: CollectorRegistry) -> None:
    """Replace ``path`` with ``registry``'s metrics in the Prometheus text format.

    Raises LocalIOError naming the file when it cannot be written.
    """
    data = generate_latest(registry)
    try:
        durable.atomic_write(Path(path), data)
    except OSError as exc:
        raise LocalIOError(describe_os_error(exc, "write the metrics textfile")) from exc
