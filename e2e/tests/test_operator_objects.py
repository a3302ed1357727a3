"""The operator on the real API server: a SlurmCluster and NodeSet on simulated GPU
nodes become owned objects and one slurmd pod per node; status tells the truth.

kwok runs no processes, so Slurm is unreachable here by construction: the test
also checks that, without Slurm to ask, scale-in deletes no slurmd pod.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.topology import rendered_blocks, topology_file
from slurmkube_e2e.waiting import wait_for, wait_for_list, wait_gone

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
API = "slurmkube.io/v1alpha1"


def _docs(namespace: str, replicas: int | None = None) -> list[dict[str, Any]]:
    node_set: dict[str, Any] = {
        "clusterRef": "gpu",
        "nodeSelector": {"matchLabels": {"e2e.slurmkube.io/fleet": "gpu"}},
        "memoryReservedMiB": 1024,
    }
    if replicas is not None:
        node_set["replicas"] = replicas
    return [
        {
            "apiVersion": API,
            "kind": "SlurmCluster",
            "metadata": {"name": "gpu", "namespace": namespace},
            "spec": {
                "topology": {"blockSize": 4},
                "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
            },
        },
        {
            "apiVersion": API,
            "kind": "NodeSet",
            "metadata": {"name": "gpu", "namespace": namespace},
            "spec": node_set,
        },
    ]


def apply_cluster(kube: Kube, namespace: str) -> dict[str, Any]:
    """Apply the cluster and its NodeSet; return the operator's rendered ConfigMap."""
    for doc in _docs(namespace):
        kube.apply(doc)
    return wait_for(
        kube,
        "v1",
        "ConfigMap",
        "gpu-slurm-config",
        lambda o: o is not None,
        namespace=namespace,
        timeout=60,
    )


def test_cluster_becomes_owned_objects_and_one_slurmd_pod_per_node(
    kube: Kube, operator: None, namespace: str, gpu_nodes: list[dict[str, Any]]
) -> None:
    config = apply_cluster(kube, namespace)
    slurm_conf = config["data"]["slurm.conf"]
    fleet = [n for n in gpu_nodes if n["metadata"]["labels"].get("e2e.slurmkube.io/fleet") == "gpu"]
    assert "PartitionName=gpu Nodes=gpu-000-[00-03],gpu-001-[00-03]" in slurm_conf
    assert len(rendered_blocks(config["data"])) == 2
    # Objects are applied one after another: wait for each, never assume the order.
    sts = wait_for(
        kube,
        "apps/v1",
        "StatefulSet",
        "gpu-slurmctld",
        lambda o: o is not None,
        namespace=namespace,
        timeout=60,
    )
    assert sts["metadata"]["ownerReferences"][0]["kind"] == "SlurmCluster"
    pods = wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda items: len(items) == len(fleet),
        namespace=namespace,
        label_selector="app.kubernetes.io/name=slurmd",
        timeout=60,
    )
    for pod in pods:
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"nvidia.com/gpu": "4"}
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "NodeSet"
    # Truthful status: no slurmctld runs on kwok, so not Ready and says why.
    cluster = wait_for(
        kube,
        API,
        "SlurmCluster",
        "gpu",
        lambda o: any(
            c["type"] == "SlurmReachable" for c in (o.get("status") or {}).get("conditions", [])
        ),
        namespace=namespace,
        timeout=60,
    )
    conditions = {c["type"]: c for c in cluster["status"]["conditions"]}
    assert conditions["SlurmReachable"]["status"] == "False"
    assert conditions["Ready"]["status"] == "False"
    assert cluster["status"]["observedGeneration"] == cluster["metadata"]["generation"]
    # The release the config is rendered for, from the default image's tag (24.11.5).
    assert cluster["status"]["slurmVersion"] == "24.11"
    # A reconcile before the NodeSet existed may have written the cluster's status
    # without one: wait for the NodeSet's own.
    node_set = wait_for(
        kube,
        API,
        "NodeSet",
        "gpu",
        lambda o: (o.get("status") or {}).get("replicas") == len(fleet),
        namespace=namespace,
        timeout=30,
    )
    assert node_set["status"]["selector"]


def test_without_slurm_scale_in_deletes_no_slurmd_pod(
    kube: Kube, operator: None, namespace: str, gpu_nodes: list[dict[str, Any]]
) -> None:
    for doc in _docs(namespace):
        kube.apply(doc)
    selector = "app.kubernetes.io/name=slurmd"
    pods = wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda items: len(items) == 8,
        namespace=namespace,
        label_selector=selector,
        timeout=60,
    )
    kube.apply(_docs(namespace, replicas=2)[1])
    # Several reconciles later, all pods are still there: Slurm could not say they are idle.
    time.sleep(6)
    still = kube.list("v1", "Pod", namespace=namespace, label_selector=selector)
    assert len(still) == len(pods)
    assert not any(p["metadata"].get("deletionTimestamp") for p in still)


def test_relabelled_node_moves_block_in_the_rendered_topology(
    kube: Kube, operator: None, namespace: str, gpu_nodes: list[dict[str, Any]]
) -> None:
    config = apply_cluster(kube, namespace)
    before = topology_file(config["data"])
    node = "gpu-000-00"
    original = next(n for n in gpu_nodes if n["metadata"]["name"] == node)
    old = original["metadata"]["labels"]["nvidia.com/gpu.clique"]
    target = next(
        n["metadata"]["labels"]["nvidia.com/gpu.clique"]
        for n in gpu_nodes
        if n["metadata"]["labels"].get("nvidia.com/gpu.clique", old) != old
    )
    started = time.monotonic()
    kube.patch("v1", "Node", node, {"metadata": {"labels": {"nvidia.com/gpu.clique": target}}})
    try:
        moved = wait_for(
            kube,
            "v1",
            "ConfigMap",
            "gpu-slurm-config",
            lambda o: topology_file(o["data"]) != before,
            namespace=namespace,
            timeout=30,
        )
        latency = time.monotonic() - started
        blocks = rendered_blocks(moved["data"])
        # The old domain drops below the base block size (4) and leaves the file.
        assert node in blocks[target]
        assert old not in blocks
        print(f"label patch -> rendered topology file: {latency:.2f}s")
    finally:
        kube.patch("v1", "Node", node, {"metadata": {"labels": {"nvidia.com/gpu.clique": old}}})


def test_kueue_topology_and_flavors_follow_the_cluster(
    kube: Kube, operator: None, namespace: str
) -> None:
    for doc in _docs(namespace):
        kube.apply(doc)
    name = f"{namespace}-gpu"
    topology = wait_for(
        kube, "kueue.x-k8s.io/v1beta2", "Topology", name, lambda o: o is not None, timeout=60
    )
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [
        "topology.slurmkube.io/spine",
        "topology.slurmkube.io/leaf",
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    ]
    flavor = wait_for(
        kube,
        "kueue.x-k8s.io/v1beta2",
        "ResourceFlavor",
        f"{name}-gpu",
        lambda o: o is not None,
        timeout=60,
    )
    assert flavor["spec"]["topologyName"] == name
    assert flavor["spec"]["nodeLabels"] == {"e2e.slurmkube.io/fleet": "gpu"}
    # Slurm never runs on these kwok nodes: no slurmd ever registered, so the
    # deletion (deletionPolicy Drain, not forced) has no job to wait for.
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "gpu",
        lambda o: (o.get("status") or {}).get("slurmdRegistered") is False,
        namespace=namespace,
        timeout=60,
    )
    kube.delete(API, "SlurmCluster", "gpu", namespace=namespace)
    wait_gone(kube, "kueue.x-k8s.io/v1beta2", "Topology", name, timeout=60)


def test_unknown_node_set_reference_is_a_condition_naming_the_field_and_applies_nothing(
    kube: Kube, operator: None, namespace: str
) -> None:
    cluster, node_set = _docs(namespace)
    cluster["spec"]["partitions"] = [{"name": "gpu", "nodeSets": ["gpu", "missing"]}]
    kube.apply(cluster)
    kube.apply(node_set)
    obj = wait_for(
        kube,
        API,
        "SlurmCluster",
        "gpu",
        lambda o: any(
            c["type"] == "ConfigApplied" and c["reason"] == "InvalidSpec"
            for c in (o.get("status") or {}).get("conditions") or []
        ),
        namespace=namespace,
        timeout=60,
    )
    applied = next(c for c in obj["status"]["conditions"] if c["type"] == "ConfigApplied")
    assert "spec.partitions[0].nodeSets[1]" in applied["message"]
    assert "missing" in applied["message"]
    # Nothing of the cluster was applied: no config, no slurmctld, no slurmd pod.
    assert kube.get("v1", "ConfigMap", "gpu-slurm-config", namespace=namespace) is None
    assert kube.list("apps/v1", "StatefulSet", namespace=namespace) == []
    assert kube.list("v1", "Pod", namespace=namespace) == []
    events = kube.list("v1", "Event", namespace=namespace)
    assert any(e["reason"] == "InvalidSpec" and e["type"] == "Warning" for e in events)


def test_the_slurm_release_decides_the_topology_file_and_the_metrics_service(
    kube: Kube, operator: None, namespace: str
) -> None:
    """26.05 (spec.slurm.version): topology.yaml and the slurmctld metrics Service;
    back to 24.11: topology.conf only (server-side apply drops the other key) and
    the Service pruned. No slurmctld runs on kwok: objects only."""
    cluster, node_set = _docs(namespace)
    cluster["spec"]["slurm"] = {"version": "26.05"}
    kube.apply(cluster)
    kube.apply(node_set)
    config = wait_for(
        kube,
        "v1",
        "ConfigMap",
        "gpu-slurm-config",
        lambda o: o is not None and "topology.yaml" in o["data"],
        namespace=namespace,
        timeout=60,
    )
    assert "topology.conf" not in config["data"]
    assert len(rendered_blocks(config["data"])) == 2
    assert "\nMetricsType=metrics/openmetrics\n" in config["data"]["slurm.conf"]
    service = wait_for(
        kube,
        "v1",
        "Service",
        "gpu-slurmctld-metrics",
        lambda o: o is not None,
        namespace=namespace,
        timeout=60,
    )
    assert service["spec"]["ports"][0]["targetPort"] == "slurmctld"
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "gpu",
        lambda o: (o.get("status") or {}).get("slurmVersion") == "26.05",
        namespace=namespace,
        timeout=60,
    )

    cluster["spec"]["slurm"] = {"version": "24.11"}
    kube.apply(cluster)
    config = wait_for(
        kube,
        "v1",
        "ConfigMap",
        "gpu-slurm-config",
        lambda o: "topology.conf" in o["data"],
        namespace=namespace,
        timeout=60,
    )
    assert "topology.yaml" not in config["data"]
    assert "MetricsType" not in config["data"]["slurm.conf"]
    wait_gone(kube, "v1", "Service", "gpu-slurmctld-metrics", namespace=namespace, timeout=60)
