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
    metrics.SLURM_NODES.labels("c", "set", "idle").set(3)
    metrics.RECONFIGURES.labels("c", "ok").inc()
    port = _free_port()
    metrics.serve(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'slurmkube_slurm_nodes{cluster="c",node_set="set",state="idle"} 3.0' in body
    assert 'slurmkube_reconfigures_total{cluster="c",result="ok"} 1.0' in body
    # Only our registry: no process/GC collectors of the default one double-registered.
    assert "python_gc_objects_collected_total" not in body


def test_no_metric_is_labelled_by_node_name() -> None:
    for collector in metrics.REGISTRY._collector_to_names:
        labels = getattr(collector, "_labelnames", ())
        assert "node" not in labels
