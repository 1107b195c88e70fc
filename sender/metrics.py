"""The sender's metrics: each receiver's round history as Prometheus metric families.

Written to ``metrics_textfile`` after each ``sealsync send`` run
(:func:`sealsync.metrics.write_textfile`). Every value comes from the history
(:mod:`sender.manage.history`): its last line, for the last attempt and, with its
running totals, for the counters, so the counters keep counting across runs, cuts of the
history and restarts, as Prometheus expects of a counter. A receiver not tried
yet reports 0 for its timestamps, so "no success for a while" fires for it too.

Every label value a counter can take is written from the start (at 0), so that
``increase()`` sees the first failure of a kind as an increase.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from sealsync.config import SenderConfig
from sealsync.metrics import as_number as _number
from sealsync.metrics import snapshot_registry, write_textfile
from sender.manage.history import OK, OUTCOMES, last_attempt, last_success_time
from sender.manage.layout import SchemaPaths

PREFIX = "sealsync_sender_"

#: Failure kinds written at 0 before they first happen (``SealsyncError.kind`` values).
FAILURE_KINDS = (
    "unreachable",
    "host_key",
    "refused",
    "connection_lost",
    "receiver",
    "protocol",
    "incomplete",
    "local",
    "config",
    "error",
    "internal",
)

_LAST = (
    ("shipped_files", "new", "Files the receiver verified in the last attempt."),
    ("shipped_bytes", "bytes", "Bytes of the files verified in the last attempt."),
    ("deleted_files", "deleted", "Deletions the receiver acknowledged in the last attempt."),
    ("refused_files", "refused", "Files the receiver refused in the last attempt."),
    ("failed_files", "failed", "Files left unsynced after their retries in the last attempt."),
)
_TOTALS = (
    ("shipped_files", "new", "Files the receiver verified, over all attempts."),
    ("shipped_bytes", "bytes", "Bytes of the files the receiver verified, over all attempts."),
    ("deleted_files", "deleted", "Deletions the receiver acknowledged, over all attempts."),
    ("refused_files", "refused", "File refusals by the receiver, over all attempts."),
)


def sender_families(config: SenderConfig) -> Iterator[Metric]:
    """The metric families of every receiver of ``config``, from their histories."""
    lasts = [
        (r.name, last_attempt(SchemaPaths(config.schema_dir, r.host, r.port)))
        for r in config.receivers
    ]
    label = ["receiver"]

    def gauge(name: str, doc: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(PREFIX + name, doc, labels=label)

    attempt_ts = gauge(
        "last_attempt_timestamp_seconds", "When the last attempt ended (0: never tried)."
    )
    success_ts = gauge(
        "last_success_timestamp_seconds", "When the last successful attempt ended (0: never)."
    )
    success = gauge("last_attempt_success", "1 if the last attempt synced everything, else 0.")
    duration = gauge("last_attempt_duration_seconds", "How long the last attempt took.")
    last = [(gauge(f"last_attempt_{name}", doc), key) for name, key, doc in _LAST]
    totals = [
        (CounterMetricFamily(PREFIX + name, doc, labels=label), key) for name, key, doc in _TOTALS
    ]
    outcomes = CounterMetricFamily(
        PREFIX + "attempts", "Attempts by how they ended.", labels=["receiver", "outcome"]
    )
    failures = CounterMetricFamily(
        PREFIX + "failures", "Failed attempts by kind of failure.", labels=["receiver", "kind"]
    )
    for name, entry in lasts:
        line: dict[str, Any] = entry or {}
        sums: dict[str, Any] = line.get("totals") or {}
        attempt_ts.add_metric([name], _number(line.get("end")))
        success_ts.add_metric([name], last_success_time(entry) or 0.0)
        success.add_metric([name], 1.0 if line.get("outcome") == OK else 0.0)
        duration.add_metric([name], max(_number(line.get("end")) - _number(line.get("start")), 0))
        for family, key in last:
            family.add_metric([name], _number(line.get(key)))
        for counter, key in totals:
            counter.add_metric([name], _number(sums.get(key)))
        by_outcome = dict(sums.get("outcomes") or {})
        for outcome in (*OUTCOMES, *sorted(set(by_outcome) - set(OUTCOMES))):
            outcomes.add_metric([name, outcome], _number(by_outcome.get(outcome)))
        by_kind = dict(sums.get("failures") or {})
        for kind in (*FAILURE_KINDS, *sorted(set(by_kind) - set(FAILURE_KINDS))):
            failures.add_metric([name, kind], _number(by_kind.get(kind)))
    yield attempt_ts
    yield success_ts
    yield success
    yield duration
    for family, _ in last:
        yield family
    for counter, _ in totals:
        yield counter
    yield outcomes
    yield failures


def write_sender_metrics(config: SenderConfig) -> None:
    """Rewrite ``config.metrics_textfile`` from the histories (LocalIOError if it fails)."""
    if config.metrics_textfile is not None:
        write_textfile(config.metrics_textfile, snapshot_registry(sender_families(config)))
