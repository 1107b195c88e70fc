"""examples/alerts.yml and the dashboard's queries through promtool, Prometheus' own
checker: the rules file loads, every rule passes its unit tests (tests/alerts_test.yml:
it fires when it should, not before, not for what it must ignore, with its text
rendered), every rule has such a test, the metrics they name are the ones sealsync
writes, and each dashboard query parses and joins the edges' series to their names."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from promtool_helpers import promtool

from receiver.metrics import ReceiverMetrics

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "examples" / "alerts.yml"
RULE_TESTS = ROOT / "tests" / "alerts_test.yml"
DASHBOARD = ROOT / "examples" / "grafana-dashboard.json"
ALERT = re.compile(r"^\s*- alert: (\w+)$", re.MULTILINE)


def _promtool(tool: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture(scope="module")
def tool() -> Path:
    return promtool()


def test_every_rule_has_a_unit_test_that_makes_it_fire() -> None:
    alerts = ALERT.findall(RULES.read_text())
    assert len(alerts) == len(set(alerts)) >= 12
    cases = RULE_TESTS.read_text().split("- eval_time:")[1:]

    def tested(expecting: str) -> set[str]:
        """The alerts of the cases that expect ``expecting`` in their text."""
        return {
            m.group(1)
            for case in cases
            if expecting in case
            for m in [re.search(r"alertname: (\w+)", case)]
            if m
        }

    firing, quiet = tested("exp_labels:"), tested("exp_alerts: []")
    assert set(alerts) <= firing, set(alerts) - firing
    assert set(alerts) <= quiet, set(alerts) - quiet  # and a time it must not fire


def test_the_receiver_rules_name_metrics_the_receiver_serves() -> None:
    served = {family.name for family in ReceiverMetrics().collect()}
    used = set(re.findall(r"\b(sealsync_receiver_[a-z_]+)", RULES.read_text()))
    assert {"sealsync_receiver_storage_ok", "sealsync_receiver_sender_info"} <= used
    # prometheus_client names a counter family without its _total suffix
    assert used <= served | {f"{n}_total" for n in served}, used - served


@pytest.mark.slow
def test_promtool_loads_the_rules_file(tool: Path) -> None:
    out = _promtool(tool, "check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(ALERT.findall(RULES.read_text()))} rules found" in out.stdout


@pytest.mark.slow
def test_every_rule_passes_its_promtool_unit_tests(tool: Path) -> None:
    out = _promtool(tool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def _dashboard_exprs() -> dict[str, list[str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in panels if p["type"] != "row"}


@pytest.mark.slow
def test_every_dashboard_query_parses(tool: Path, tmp_path: Path) -> None:
    exprs = [e for group in _dashboard_exprs().values() for e in group]
    rules = tmp_path / "dashboard.yml"
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(exprs):
        lines += [f"      - record: dashboard:query_{i}", f"        expr: {json.dumps(expr)}"]
    rules.write_text("\n".join(lines) + "\n")
    out = _promtool(tool, "check", "rules", str(rules))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


@pytest.mark.slow
def test_the_dashboard_names_each_edge_by_its_sender_uuid(tool: Path, tmp_path: Path) -> None:
    """An edge's own series take the name the receiver knows it by; an edge with no UUID
    yet keeps its row; a sender that never ended a round is left out of "time since"."""
    exprs = _dashboard_exprs()
    (pending,) = exprs["Pending files per edge"]
    (since,) = exprs["Time since each edge's last round"]
    info = "sealsync_receiver_sender_info"
    doc = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # one edge, known to two receivers
                    {
                        "series": f'{info}{{instance="dc1:9560",sender="aaaa",name="plant-1"}}',
                        "values": "1x20",
                    },
                    {
                        "series": f'{info}{{instance="dc2:9560",sender="aaaa",name="plant-1"}}',
                        "values": "1x20",
                    },
                    {
                        "series": f'{info}{{instance="dc1:9560",sender="cccc",name="plant-3"}}',
                        "values": "1x20",
                    },
                    {
                        "series": 'sealsync_sender_pending_files{instance="e1:9100",'
                        'receiver="dc1",sender="aaaa"}',
                        "values": "3x20",
                    },
                    {  # before its first round: no UUID yet
                        "series": "sealsync_sender_pending_files"
                        '{instance="e2:9100",receiver="dc1"}',
                        "values": "5x20",
                    },
                    {
                        "series": "sealsync_receiver_sender_last_round_timestamp_seconds"
                        '{instance="dc1:9560",sender="aaaa"}',
                        "values": "100x20",
                    },
                    {
                        "series": "sealsync_receiver_sender_last_round_timestamp_seconds"
                        '{instance="dc1:9560",sender="cccc"}',
                        "values": "0x20",
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": pending,
                        "eval_time": "10m",
                        "exp_samples": [
                            {
                                "labels": '{instance="e1:9100",receiver="dc1",sender="aaaa",'
                                'name="plant-1"}',
                                "value": 3,
                            },
                            {
                                "labels": 'sealsync_sender_pending_files{instance="e2:9100",'
                                'receiver="dc1"}',
                                "value": 5,
                            },
                        ],
                    },
                    {
                        "expr": since,
                        "eval_time": "10m",
                        "exp_samples": [
                            {
                                "labels": '{instance="dc1:9560",sender="aaaa",name="plant-1"}',
                                "value": 500,
                            }
                        ],
                    },
                ],
            }
        ],
    }
    tests = tmp_path / "dashboard_test.yml"
    tests.write_text(json.dumps(doc, indent=1))  # JSON is YAML
    out = _promtool(tool, "test", "rules", tests.name, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
