"""The live goodput rules and dashboard: promtool checks and unit-tests the plain rule
file and parses the dashboard's queries, and the chart's PrometheusRule and dashboard
ConfigMap carry exactly those files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import slurmkube.metrics.goodput  # noqa: F401  (registers the goodput metrics)
from slurmkube.metrics import REGISTRY
from tests.unit.test_helm import CHART, HELM, IMAGE, of_kind, one, render, template_without_image

ROOT = Path(__file__).resolve().parents[2]
RULES = CHART / "files" / "goodput-rules.yaml"
RULE_TESTS = ROOT / "tests" / "prometheus" / "goodput-rules-test.yaml"
WITH_RULE = [
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--api-versions",
    "monitoring.coreos.com/v1/PrometheusRule",
]


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: run `make promtool` (Debian's prometheus package)")
    return found


@pytest.fixture(scope="module")
def helm() -> Path:
    if not HELM.exists():
        pytest.fail(f"helm not found at {HELM}: run `make helm`")
    return HELM


@pytest.mark.parametrize(
    ("command", "path"), [("check", RULES), ("test", RULE_TESTS)], ids=["check", "test"]
)
def test_promtool_accepts_the_rules(promtool: str, command: str, path: Path) -> None:
    result = subprocess.run(
        [promtool, command, "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_rule_is_off_by_default(helm: Path) -> None:
    assert not of_kind(render(helm), "PrometheusRule")


def test_prometheus_rule_needs_the_prometheus_operator_api(helm: Path) -> None:
    result = template_without_image(helm, *IMAGE, "--set", "metrics.prometheusRule.enabled=true")
    assert result.returncode != 0
    assert "monitoring.coreos.com/v1 PrometheusRule" in result.stderr


def test_prometheus_rule_carries_the_tested_rule_file(helm: Path) -> None:
    rule = one(
        render(helm, *WITH_RULE, "--set", "metrics.prometheusRule.labels.release=kps"),
        "PrometheusRule",
    )
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert rule["metadata"]["labels"]["release"] == "kps"


DASHBOARD = CHART / "files" / "goodput-dashboard.json"


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in board["panels"] for t in panel["targets"]]


def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """promtool parses each panel's query as a recording rule's expression."""
    rules = [
        {"record": f"dashboard:panel_{i}:query", "expr": e} for i, e in enumerate(dashboard_exprs())
    ]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_reads_only_what_is_exported_or_recorded() -> None:
    recorded = {
        r["record"]
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }
    exported = {
        name
        for collector in list(REGISTRY._collector_to_names)
        for family in collector.describe()
        for name in (family.name, f"{family.name}_total", f"{family.name}_bucket")
    }
    for expr in dashboard_exprs():
        for name in re.findall(r"\b(?:slurmkube_\w+|\w+:\w+:\w+)\b", expr):
            assert name in recorded | exported, (name, expr)


def test_dashboard_is_off_by_default_and_carries_the_file(helm: Path) -> None:
    assert not [
        o for o in of_kind(render(helm), "ConfigMap") if "dashboard" in o["metadata"]["name"]
    ]
    board = one(render(helm, "--set", "metrics.grafanaDashboard.enabled=true"), "ConfigMap")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["slurmkube-goodput.json"]) == json.loads(DASHBOARD.read_text())
