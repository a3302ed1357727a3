"""Slurm 26.05's own metrics, as the chart's ServiceMonitor scrapes them.

slurmctld from the 26.05 image, under podman on loopback, on a configuration
slurmkube rendered for 26.05 (`MetricsType=metrics/openmetrics`), with one
configless slurmd. A plain HTTP client (what Prometheus is) reads, on
slurmctld's own port, the index and every path the chart scrapes
(`slurmMetrics.serviceMonitor.paths`), each OpenMetrics text naming the
cluster's nodes and partitions as slurm.conf has them, GPU gauges included.
"""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest
import yaml

from images import build as image_build
from slurmkube.render import plan_config, render_files
from slurmkube_local.builders import NodeBuilder, bundle
from slurmkube_local.local_slurm import free_ports

from .conftest import Podman
from .daemons import loopback_context, start_cluster

CHART_VALUES = Path(__file__).resolve().parents[2] / "helm" / "slurmkube" / "values.yaml"
NODE = "cpu-0001"


@pytest.fixture(scope="module")
def image() -> str:
    (built,) = image_build.cmd_build(["slurm-26.05"])
    return built.ref


def scrape(port: int, path: str) -> tuple[int, str, str]:
    """GET as Prometheus does: no `Connection: close` (urllib's). slurmctld 26.05.5
    answers an empty endpoint to a client that sends one with that header line
    repeated after the blank line, i.e. as a body that is not OpenMetrics."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read().decode()
        return response.status, response.getheader("Content-Type") or "", body
    finally:
        connection.close()


def test_slurmctld_26_05_serves_the_paths_the_chart_scrapes(
    image: str, podman: Podman, tmp_path: Path
) -> None:
    ctl_port, node_port = free_ports(2)
    nodes = [
        NodeBuilder(NODE).gpus(0).clique(1).obj(),
        NodeBuilder("cpu-0002").gpus(0).clique(1).obj(),
        # Powered down (no slurmd), but in slurm.conf with its GPUs.
        NodeBuilder("gpu-0001").gpus(4).clique(2).obj(),
    ]
    b = bundle(block_size=1, extra={"slurm": {"version": "26.05"}})
    files = render_files(plan_config(b, nodes, loopback_context(ctl_port, NODE, node_port))).files
    assert "MetricsType=metrics/openmetrics" in files["slurm.conf"].splitlines()
    start_cluster(podman, image, tmp_path, files, node=NODE, ctl_port=ctl_port)

    paths = yaml.safe_load(CHART_VALUES.read_text())["slurmMetrics"]["serviceMonitor"]["paths"]
    _, _, index = scrape(ctl_port, "/metrics")
    listed = {line.split("'")[1] for line in index.splitlines() if line.strip().startswith("'")}
    assert set(paths) <= listed, index

    bodies = {}
    for path in paths:
        status, content_type, body = scrape(ctl_port, path)
        assert status == 200, path
        # jobs-users-accts is empty while no job runs.
        if body:
            assert content_type.startswith("text/plain"), (path, content_type)
            assert "# TYPE " in body, (path, body[:200])
        bodies[path] = body
    nodes_text = bodies["/metrics/nodes"]
    for node in ("cpu-0001", "cpu-0002", "gpu-0001"):
        assert f'slurm_node_cpus{{node="{node}"}} 64' in nodes_text, nodes_text[:600]
    # The GPU gauges are there; they count gres/gpu as a TRES, which Slurm tracks only
    # with slurmdbd (AccountingStorageTRES=gres/gpu is fatal without it), so 0 here.
    assert 'slurm_node_gpus{node="gpu-0001"} ' in nodes_text, nodes_text[:600]
    assert 'slurm_partition_jobs_gpus_alloc{partition="gpu"} 0' in bodies["/metrics/partitions"]
    assert 'slurm_partition_jobs{partition="gpu"} 0' in bodies["/metrics/partitions"]
    assert "slurm_bf_depth_mean" in bodies["/metrics/scheduler"]
