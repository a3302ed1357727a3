"""Core Kubernetes behaviour slurmkube relies on, on the simulated GPU fleet:
the real scheduler places pods on kwok nodes by their GPU capacity, kwok runs
them, and owner-reference garbage collection removes children with the parent."""

from __future__ import annotations

import pytest

from slurmkube_e2e import fleet
from slurmkube_e2e.builders import make_deployment, make_pod, make_statefulset
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.waiting import condition, has_condition, wait_for, wait_for_list, wait_gone

pytestmark = pytest.mark.e2e


def _running(pods: list[Manifest], count: int) -> bool:
    return len(pods) == count and all(
        p["status"].get("phase") == "Running" and has_condition(p, "Ready") for p in pods
    )


def _run(kube: Kube, namespace: str, owner: Manifest) -> list[Manifest]:
    """Apply a Deployment/StatefulSet and wait for all its replicas to be Running."""
    kube.apply(owner, namespace=namespace)
    replicas = owner["spec"]["replicas"]
    return wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda ps: _running(ps, replicas),
        namespace=namespace,
        label_selector=f"app={owner['metadata']['name']}",
        what=f"{replicas} pods Running",
    )


def _collected(kube: Kube, namespace: str, api_version: str, kind: str, app: str) -> None:
    wait_for_list(
        kube,
        api_version,
        kind,
        lambda items: not items,
        namespace=namespace,
        label_selector=f"app={app}",
        what="garbage-collected",
    )


def _wait_scheduled_by_default_scheduler(kube: Kube, pod: Manifest) -> None:
    """The Scheduled event of pod comes from kube-scheduler (events are written async)."""

    def by_scheduler(events: list[Manifest]) -> bool:
        return any(
            (e.get("reportingComponent") or (e.get("source") or {}).get("component"))
            == "default-scheduler"
            for e in events
        )

    wait_for_list(
        kube,
        "v1",
        "Event",
        by_scheduler,
        namespace=pod["metadata"]["namespace"],
        field_selector=f"involvedObject.uid={pod['metadata']['uid']},reason=Scheduled",
        timeout=30,
        what=f"a Scheduled event from default-scheduler for {pod['metadata']['name']}",
    )


def test_deployment_pods_are_scheduled_onto_gpu_nodes_and_run(
    kube: Kube, namespace: str, gpu_nodes: list[Manifest]
) -> None:
    pods = _run(kube, namespace, make_deployment("trainer", replicas=3, gpus=1))
    gpu_node_names = {n["metadata"]["name"] for n in gpu_nodes}
    for pod in pods:
        assert pod["spec"]["nodeName"] in gpu_node_names
        assert has_condition(pod, "PodScheduled")
        _wait_scheduled_by_default_scheduler(kube, pod)


def test_pod_asking_more_gpus_than_any_node_has_stays_unschedulable(
    kube: Kube, namespace: str, gpu_nodes: list[Manifest]
) -> None:
    most = max(int(n["status"]["allocatable"][fleet.GPU_RESOURCE]) for n in gpu_nodes)
    kube.apply(make_pod("too-big", gpus=most + 1), namespace=namespace)
    pod = wait_for(
        kube,
        "v1",
        "Pod",
        "too-big",
        lambda p: has_condition(p, "PodScheduled", "False"),
        namespace=namespace,
        what="reported Unschedulable",
    )
    cond = condition(pod, "PodScheduled") or {}
    assert cond.get("reason") == "Unschedulable"
    assert f"Insufficient {fleet.GPU_RESOURCE}" in cond.get("message", "")


def test_statefulset_pods_run_with_stable_names(kube: Kube, namespace: str) -> None:
    pods = _run(kube, namespace, make_statefulset("slurmd", replicas=2, gpus=4))
    assert sorted(p["metadata"]["name"] for p in pods) == ["slurmd-0", "slurmd-1"]
    # 4 GPUs each on 4-GPU nodes: the scheduler must use two different nodes.
    assert len({p["spec"]["nodeName"] for p in pods}) == 2


def test_deleting_a_deployment_garbage_collects_replicasets_and_pods(
    kube: Kube, namespace: str
) -> None:
    _run(kube, namespace, make_deployment("web", replicas=2))
    kube.delete("apps/v1", "Deployment", "web", namespace=namespace, propagation="Background")
    _collected(kube, namespace, "apps/v1", "ReplicaSet", "web")
    _collected(kube, namespace, "v1", "Pod", "web")


def test_foreground_delete_of_a_statefulset_removes_its_pods_first(
    kube: Kube, namespace: str
) -> None:
    _run(kube, namespace, make_statefulset("db", replicas=2))
    kube.delete("apps/v1", "StatefulSet", "db", namespace=namespace, propagation="Foreground")
    wait_gone(kube, "apps/v1", "StatefulSet", "db", namespace=namespace)
    # Foreground: the owner is only removed once its dependents are.
    assert kube.list("v1", "Pod", namespace=namespace, label_selector="app=db") == []


def test_an_owner_reference_alone_makes_the_child_collectable(kube: Kube, namespace: str) -> None:
    parent = kube.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "parent"}},
        namespace=namespace,
    )
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "parent",
        "uid": parent["metadata"]["uid"],
    }
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "child", "ownerReferences": [owner]},
            "data": {"k": "v"},
        },
        namespace=namespace,
    )
    kube.delete("v1", "ConfigMap", "parent", namespace=namespace)
    wait_gone(kube, "v1", "ConfigMap", "child", namespace=namespace)
