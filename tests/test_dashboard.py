"""examples/grafana-dashboard.json against what real processes expose: every metric a
panel's query names exists in a scrape (a running receiver's ``/metrics``, the
textfile a real ``sealsync send`` wrote, the loader's textfile writer), and every label
a query groups, joins or names in its legend is one those series carry."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import Deployment, free_port, make_deployment, populate
from prometheus_client.parser import text_string_to_metric_families

from spark_loader.metrics import write_loader_metrics

DASHBOARD = Path(__file__).resolve().parent.parent / "examples/grafana-dashboard.json"
METRIC = re.compile(r"\b((?:sealsync|process)_[a-z0-9_]+)\b")
GROUPING = re.compile(r"\b(?:by|on|group_left|group_right|without)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
TARGET_LABELS = {"instance", "job"}  # added by Prometheus to every scraped series
TOPICS = ("Edges", "Lag", "Throughput", "Refusals", "Loader runs")

Names = dict[str, set[str]]  # sample name -> label names


def _names(text: str) -> Names:
    out: Names = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, expr, legend) of every target of every panel."""
    return [
        (panel["title"], target["expr"], target.get("legendFormat", ""))
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def test_the_dashboard_is_valid_and_covers_each_topic() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert tuple(rows) == TOPICS
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")"), (panel["title"], expr)
            assert METRIC.search(expr), (panel["title"], expr)


@pytest.fixture
def scraped(tmp_path: Path) -> tuple[dict[str, Names], Deployment, str]:
    """The names each source exposes after a real round: the receiver's ``/metrics``
    (live), the sender's textfile (written by ``sealsync send``), the loader's."""
    dep = make_deployment(tmp_path / "site", senders=1)
    port = free_port()
    with dep.receiver_config.open("a") as f:
        f.write(f'metrics_listen = "127.0.0.1:{port}"\n')
    sender = dep.senders[0]
    prom = tmp_path / "sender.prom"
    text = sender.config.read_text()
    sender.config.write_text(
        text.replace("max_retries = 3\n", f'max_retries = 3\nmetrics_textfile = "{prom}"\n')
    )
    url = f"http://127.0.0.1:{port}/metrics"
    dep.start_receiver()
    try:
        names = populate(sender.edge, groups=1, files=2)
        result = sender.send()
        assert result.returncode == 0, result.stderr
        with urllib.request.urlopen(url, timeout=10) as response:
            receiver_text = response.read().decode()
    finally:
        assert dep.stop_receiver() == 0
    # restarted, the receiver shows the edge's name and times before it sends again
    dep.start_receiver()
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            restarted_text = response.read().decode()
    finally:
        assert dep.stop_receiver() == 0
    loader_prom = tmp_path / "loader.prom"
    write_loader_metrics(loader_prom, None)
    sources = {
        "receiver": _names(receiver_text),
        "sender": _names(prom.read_text()),
        "loader": _names(loader_prom.read_text()),
    }
    # the per-edge series are this sender's, with what its round shipped
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(receiver_text)
        for s in family.samples
    }
    key = (("sender", sender.uuid),)
    assert samples[("sealsync_receiver_sender_files_received_total", key)] == len(names)
    assert samples[("sealsync_receiver_sender_bytes_received_total", key)] > 0
    assert samples[("sealsync_receiver_sender_last_round_timestamp_seconds", key)] > 0
    assert samples[("sealsync_receiver_sender_newest_file_age_seconds", key)] >= 0
    info = [dict(k) for n, k in samples if n == "sealsync_receiver_sender_info"]
    assert [i["sender"] for i in info] == [sender.uuid]
    assert info[0]["name"]  # the edge's host name
    restarted = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(restarted_text)
        for s in family.samples
    }
    last_round = "sealsync_receiver_sender_last_round_timestamp_seconds"
    assert restarted[(last_round, key)] == samples[(last_round, key)]
    age = "sealsync_receiver_sender_newest_file_age_seconds"
    assert restarted[(age, key)] >= samples[(age, key)]
    assert restarted[("sealsync_receiver_sender_files_received_total", key)] == 0
    assert [dict(k) for n, k in restarted if n == "sealsync_receiver_sender_info"] == info
    # the edge's own series carry its UUID, to join the receiver's on
    assert {
        s.labels.get("sender")
        for family in text_string_to_metric_families(prom.read_text())
        if family.name.startswith("sealsync_sender_")
        for s in family.samples
    } == {sender.uuid}
    return sources, dep, sender.uuid


def _source(metric: str) -> tuple[str, ...]:
    if metric == "sealsync_build_info":
        return ("receiver", "sender", "loader")
    if metric.startswith(("sealsync_receiver_", "process_")):
        return ("receiver",)
    if metric.startswith("sealsync_sender_"):
        return ("sender",)
    if metric.startswith("sealsync_loader_"):
        return ("loader",)
    raise AssertionError(f"{metric}: no source exposes a metric of that name")


@pytest.mark.slow
def test_every_query_names_metrics_and_labels_a_live_scrape_has(
    scraped: tuple[dict[str, Names], Deployment, str],
) -> None:
    sources, _, _ = scraped
    dashboard = json.loads(DASHBOARD.read_text())
    missing: list[str] = []
    for title, expr, legend in _queries(dashboard):
        labels = set(TARGET_LABELS)
        for metric in METRIC.findall(expr):
            for source in _source(metric):
                if metric not in sources[source]:
                    missing.append(f"{title}: {metric} not in the {source}'s scrape")
                else:
                    labels |= sources[source][metric]
        wanted = {x.strip() for g in GROUPING.findall(expr) for x in g.split(",") if x.strip()}
        wanted |= set(LEGEND.findall(legend))
        missing += [f"{title}: label {x} on none of {expr}" for x in sorted(wanted - labels)]
    assert not missing, "\n".join(missing)
    # and the test could fail: a name no scrape has is caught
    assert "sealsync_receiver_sender_lag_total" not in sources["receiver"]
    assert sources["receiver"]["sealsync_build_info"] == {"version", "protocol", "python", "role"}
