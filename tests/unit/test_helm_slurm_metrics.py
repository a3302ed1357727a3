"""The chart scrapes Slurm's own metrics: a ServiceMonitor over the operator's
slurmctld metrics Services, and the slurmctld NetworkPolicy admitting the scrapers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmkube.build.slurmctld import controller_statefulset, metrics_service
from slurmkube_local.builders import bundle
from tests.unit.test_helm import CHART, of_kind, one, render, template_without_image
from tests.unit.test_helm import helm as helm  # noqa: PLC0414 - the fixture, re-exported
from tests.unit.test_helm_network import admitted, matches

Obj = dict[str, Any]
IMAGE = ["--set", "image.registry=slurmkube"]
MONITORED = [
    "--set",
    "slurmMetrics.serviceMonitor.enabled=true",
    "--api-versions",
    "monitoring.coreos.com/v1/ServiceMonitor",
]
SCRAPERS = (
    'networkPolicy.slurmMetricsFrom=[{"namespaceSelector":{"matchLabels":'
    '{"kubernetes.io/metadata.name":"monitoring"}}}]'
)


def cluster_26_05() -> Any:
    return bundle(extra={"slurm": {"version": "26.05"}}).cluster


def test_the_slurm_service_monitor_is_off_by_default_and_needs_the_prometheus_operator(
    helm: Path,
) -> None:
    assert not of_kind(render(helm), "ServiceMonitor")
    result = template_without_image(
        helm, *IMAGE, "--set", "slurmMetrics.serviceMonitor.enabled=true"
    )
    assert result.returncode != 0
    assert "slurmMetrics.serviceMonitor.enabled needs" in result.stderr


def test_the_slurm_service_monitor_selects_the_metrics_service_the_operator_builds(
    helm: Path,
) -> None:
    monitor = one(render(helm, *MONITORED), "ServiceMonitor")
    service = metrics_service(cluster_26_05())
    assert matches(monitor["spec"]["selector"], service["metadata"]["labels"])
    # ...and never the headless slurmctld Service every cluster has.
    assert not matches(monitor["spec"]["selector"], {"app.kubernetes.io/name": "slurmctld"})
    port = service["spec"]["ports"][0]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {port["name"]}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    paths = values["slurmMetrics"]["serviceMonitor"]["paths"]
    assert [e["path"] for e in monitor["spec"]["endpoints"]] == paths
    for label in monitor["spec"]["targetLabels"]:
        assert label in service["metadata"]["labels"]
    # The Service's target port is the slurmctld container's named port.
    container = controller_statefulset(cluster_26_05())["spec"]["template"]["spec"]["containers"]
    assert port["targetPort"] in {p["name"] for c in container for p in c.get("ports", [])}


@pytest.mark.parametrize(
    ("values", "selector"),
    [
        ([], {"any": True}),
        (["--set", "clusterNamespaces={slurm,team-b}"], {"matchNames": ["slurm", "team-b"]}),
        (["--set", "watchNamespace=slurm"], {"matchNames": ["slurm"]}),
    ],
)
def test_the_slurm_service_monitor_looks_where_the_clusters_are(
    helm: Path, values: list[str], selector: Obj
) -> None:
    monitor = one(render(helm, *MONITORED, *values), "ServiceMonitor")
    assert monitor["spec"]["namespaceSelector"] == selector


@pytest.mark.parametrize(
    ("scrapers", "source_ns", "admits"),
    [
        (True, "monitoring", True),
        (True, "elsewhere", False),
        (False, "monitoring", False),
    ],
)
def test_slurmctld_admits_only_the_configured_scrapers_to_its_port(
    helm: Path, scrapers: bool, source_ns: str, admits: bool
) -> None:
    values = ["--set", "clusterNamespaces={slurm}"]
    if scrapers:
        values += ["--set-json", SCRAPERS]
    policies = of_kind(render(helm, *values), "NetworkPolicy")
    pod = controller_statefulset(cluster_26_05())["spec"]["template"]["metadata"]["labels"]
    prometheus = (source_ns, {"app": "prometheus"})
    assert admitted(policies, ("slurm", pod), 6817, prometheus) is admits
