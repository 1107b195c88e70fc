"""The sender's metrics: each receiver's round history as Prometheus metric families.

Written to ``metrics_textfile`` after each ``sealsync send`` run
(:func:`sealsync.metrics.write_textfile`). Every value comes from the history
(:mod:`sender.manage.history`): its last line, for the last attempt and, with its
running totals, for the counters, so the counters keep counting across runs, cuts of the
history and restarts, as Prometheus expects of a counter. A receiver not tried
yet reports 0 for its timestamps, so "no success for a while" fires for it too.

Every label value a counter can take is written from the start (at 0), so that
``increase()`` sees the first failure of a kind as an increase.

Every series carries the sender's UUID (label ``sender``, as the receiver's per-sender
series do), so an edge's own view joins the receiver's view of it
(``... * on (sender) group_left (name) sealsync_receiver_sender_info``). It is read,
never created, here: before its first round a sender has none yet, and its series
carry no ``sender`` label until it has.

What is still to ship (``pending_files``, ``pending_bytes``, the oldest pending file's
age) is not in the history: it is what a round would ship now, planned as
``send --dry-run`` plans it (reading only) when the textfile is written, so a
backlog that grows while every attempt "succeeds" is visible. A receiver whose plan
cannot be made (a damaged state file) has no pending samples rather than wrong ones.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from sealsync.buildinfo import build_info_family
from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.errors import SealsyncError
from sealsync.metrics import as_number as _number
from sealsync.metrics import snapshot_registry, write_textfile
from sender.manage.data_owner import _own_uuid as own_uuid
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
    """The metric families of every receiver of ``config``: their histories, what is
    pending for each, and the build info."""
    yield from history_families(config.schema_dir, config.receivers)
    yield from _pending_families(config)
    yield build_info_family("sender")


def history_families(schema_dir: Path, receivers: Sequence[ReceiverEndpoint]) -> Iterator[Metric]:
    """The families the receivers' histories under ``schema_dir`` give."""
    lasts = [(r.name, last_attempt(SchemaPaths(schema_dir, r.host, r.port))) for r in receivers]
    me = own_uuid(schema_dir)
    label = ["receiver", "sender"] if me is not None else ["receiver"]

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
        PREFIX + "attempts", "Attempts by how they ended.", labels=[*label, "outcome"]
    )
    failures = CounterMetricFamily(
        PREFIX + "failures", "Failed attempts by kind of failure.", labels=[*label, "kind"]
    )
    for name, entry in lasts:
        line: dict[str, Any] = entry or {}
        sums: dict[str, Any] = line.get("totals") or {}
        who = [name, me] if me is not None else [name]
        attempt_ts.add_metric(who, _number(line.get("end")))
        success_ts.add_metric(who, last_success_time(entry) or 0.0)
        success.add_metric(who, 1.0 if line.get("outcome") == OK else 0.0)
        duration.add_metric(who, max(_number(line.get("end")) - _number(line.get("start")), 0))
        for family, key in last:
            family.add_metric(who, _number(line.get(key)))
        for counter, key in totals:
            counter.add_metric(who, _number(sums.get(key)))
        by_outcome = dict(sums.get("outcomes") or {})
        for outcome in (*OUTCOMES, *sorted(set(by_outcome) - set(OUTCOMES))):
            outcomes.add_metric([*who, outcome], _number(by_outcome.get(outcome)))
        by_kind = dict(sums.get("failures") or {})
        for kind in (*FAILURE_KINDS, *sorted(set(by_kind) - set(FAILURE_KINDS))):
            failures.add_metric([*who, kind], _number(by_kind.get(kind)))
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


def pending(config: SenderConfig, receiver: ReceiverEndpoint) -> tuple[int, int, float | None]:
    """(files, bytes, oldest mtime) a round to ``receiver`` would ship now, over every
    data dir; a file gone since the scan is left out."""
    from sender.plan import plan_dir

    files, nbytes, oldest = 0, 0, None
    for data_dir in config.data_dirs:
        for name in plan_dir(data_dir, receiver).new:
            try:
                st = os.stat(data_dir / name)
            except FileNotFoundError:
                continue
            files += 1
            nbytes += st.st_size
            oldest = st.st_mtime if oldest is None else min(oldest, st.st_mtime)
    return files, nbytes, oldest


def _pending_families(config: SenderConfig) -> Iterator[Metric]:
    me = own_uuid(config.schema_dir)
    label = ["receiver", "sender"] if me is not None else ["receiver"]
    files = GaugeMetricFamily(
        PREFIX + "pending_files", "Sealed files a round would ship now.", labels=label
    )
    nbytes = GaugeMetricFamily(
        PREFIX + "pending_bytes", "Bytes of the data files a round would ship now.", labels=label
    )
    age = GaugeMetricFamily(
        PREFIX + "oldest_pending_age_seconds",
        "Age (by its mtime) of the oldest file a round would ship now; 0 when none is pending.",
        labels=label,
    )
    now = time.time()
    for receiver in config.receivers:
        try:
            n, b, oldest = pending(config, receiver)
        except (OSError, SealsyncError):
            continue
        who = [receiver.name, me] if me is not None else [receiver.name]
        files.add_metric(who, n)
        nbytes.add_metric(who, b)
        age.add_metric(who, 0.0 if oldest is None else max(now - oldest, 0.0))
    yield from (files, nbytes, age)


def write_sender_metrics(config: SenderConfig) -> None:
    """Rewrite ``config.metrics_textfile`` from the histories (LocalIOError if it fails)."""
    if config.metrics_textfile is not None:
        write_textfile(config.metrics_textfile, snapshot_registry(sender_families(config)))
