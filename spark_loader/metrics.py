"""The loader's metrics: ``last_run.json`` as Prometheus metric families.

Written to ``metrics_textfile`` after each ``sealsync load``, failed runs too, with
the sender's writer (:func:`sealsync.metrics.write_textfile`: atomic, so a scrape of
node_exporter's textfile collector never sees half a file). Every value comes from
the run's record (:mod:`.lastrun`), so ``status`` and the metrics agree, and the
counters come from its running totals, which survive failed runs. A loader never run
reports 0 for its timestamps, so "no success for a while" fires for it too. Every
outcome and failure kind is written from the start, at 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from sealsync.buildinfo import build_info_family
from sealsync.metrics import as_number as _number
from sealsync.metrics import snapshot_registry, write_textfile
from spark_loader.outcomes import FAILURE_KINDS, OK, OUTCOMES

PREFIX = "sealsync_loader_"

_LAST = (
    ("ingested_files", "ingested", "Files whose rows the last run wrote."),
    ("removed_files", "removed", "Files whose rows the last run removed."),
    ("rows_written", "rows_written", "Rows the last run wrote."),
    ("rows_removed", "rows_removed", "Rows the last run removed."),
    ("skipped_files", "skipped", "Files the last run could not ingest (retried next run)."),
    ("kept_missing_files", "kept_missing", "Files missing without a logged deletion, kept."),
)
_TOTALS = (
    ("ingested_files", "ingested", "Files ingested, over all runs."),
    ("removed_files", "removed", "Files whose rows were removed, over all runs."),
    ("rows_ingested", "rows_written", "Rows ingested, over all runs."),
    ("rows_removed", "rows_removed", "Rows removed, over all runs."),
)


def loader_families(doc: dict[str, Any] | None) -> Iterator[Metric]:
    """The metric families of one loader, from its last run's record (None: never run)."""
    line = doc or {}
    totals: dict[str, Any] = line.get("totals") or {}

    def gauge(name: str, doc_: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(PREFIX + name, doc_, value=value)

    yield gauge(
        "last_attempt_timestamp_seconds",
        "When the last run ended (0: never run).",
        _number(line.get("end")),
    )
    yield gauge(
        "last_success_timestamp_seconds",
        "When the last successful run ended (0: never).",
        _number(line.get("last_success")),
    )
    yield gauge(
        "last_attempt_success",
        "1 if the last run ingested everything, else 0.",
        1.0 if line.get("outcome") == OK else 0.0,
    )
    yield gauge(
        "last_attempt_duration_seconds",
        "How long the last run took.",
        max(_number(line.get("end")) - _number(line.get("start")), 0.0),
    )
    for name, key, text in _LAST:
        yield gauge(f"last_attempt_{name}", text, _number(line.get(key)))
    held = line.get("held")
    yield gauge(
        "last_attempt_held_senders",
        "Senders whose files all waited in the last run (their trouble held only them).",
        float(len(held)) if isinstance(held, dict) else 0.0,
    )
    yield gauge(
        "last_attempt_lag_seconds",
        "Seconds from the receiver's first load the last run took in to the end of its "
        "commit (a following loader; 0 for a one-shot run).",
        _number(line.get("lag_seconds")),
    )
    yield gauge("table_files", "Source files the table holds.", _number(line.get("table_files")))
    yield gauge("table_rows", "Rows the table holds.", _number(line.get("table_rows")))
    for name, key, text in _TOTALS:
        yield CounterMetricFamily(PREFIX + name, text, value=_number(totals.get(key)))
    outcomes = CounterMetricFamily(
        PREFIX + "attempts", "Runs by how they ended.", labels=["outcome"]
    )
    by_outcome = dict(totals.get("outcomes") or {})
    for outcome in (*OUTCOMES, *sorted(set(by_outcome) - set(OUTCOMES))):
        outcomes.add_metric([outcome], _number(by_outcome.get(outcome)))
    yield outcomes
    failures = CounterMetricFamily(
        PREFIX + "failures", "Failed runs by kind of failure.", labels=["kind"]
    )
    by_kind = dict(totals.get("failures") or {})
    for kind in (*FAILURE_KINDS, *sorted(set(by_kind) - set(FAILURE_KINDS))):
        failures.add_metric([kind], _number(by_kind.get(kind)))
    yield failures
    yield build_info_family("loader")


def write_loader_metrics(textfile: Path, doc: dict[str, Any] | None) -> None:
    """Rewrite ``textfile`` from a run's record (LocalIOError naming it if it fails)."""
    write_textfile(textfile, snapshot_registry(loader_families(doc)))
