"""The live goodput rules: promtool checks and unit-tests the plain rule file, and the
chart's PrometheusRule carries exactly that file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

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
