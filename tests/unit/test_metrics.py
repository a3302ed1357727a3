"""The operator's /metrics: served from its own registry, bounded labels."""

from __future__ import annotations

import socket
import urllib.request

from slurmkube import metrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_endpoint_serves_operator_series() -> None:
    metrics.SLURM_NODES.labels("ns", "c", "set", "idle").set(3)
    metrics.RECONFIGURES.labels("ns", "c", "ok").inc()
    port = _free_port()
    metrics.serve(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert (
        'slurmkube_slurm_nodes{cluster="c",namespace="ns",node_set="set",state="idle"} 3.0' in body
    )
    assert 'slurmkube_reconfigures_total{cluster="c",namespace="ns",result="ok"} 1.0' in body
    # Only our registry: no process/GC collectors of the default one double-registered.
    assert "python_gc_objects_collected_total" not in body


def test_no_metric_is_labelled_by_node_name() -> None:
    for collector in metrics.REGISTRY._collector_to_names:
        labels = getattr(collector, "_labelnames", ())
        assert "node" not in labels


def test_every_metric_of_a_cluster_names_its_namespace() -> None:
    """Two clusters of one name in two namespaces are two series."""
    for collector in metrics.REGISTRY._collector_to_names:
        labels = getattr(collector, "_labelnames", ())
        if "cluster" in labels:
            assert labels[:2] == ("namespace", "cluster")
