"""slurmd pods are protected: Guaranteed QoS sized like their slurm.conf line when
asked (podQoS), busy pods guarded by a PodDisruptionBudget, a high PriorityClass."""

from __future__ import annotations

import os
from typing import Any

import pytest

from slurmkube.api import well_known as wk
from slurmkube.build.slurmd import (
    SlurmdResources,
    busy_label_patch,
    slurmd_disruption_budget,
    slurmd_pod,
    slurmd_priority_class,
)
from slurmkube.plan.cluster import plan_cluster
from slurmkube_local.builders import bundle
from tests.unit.test_helm import HELM, one, render
from tests.unit.test_job_safety import NODE, NODES, World, cpus_change

CLUSTER = bundle(pools=("gpu", "cpu"))
GPU = next(ns for ns in CLUSTER.node_sets if ns.metadata.name == "gpu")


SHAPE = SlurmdResources(64, 261120, 8)


def pod(resources: SlurmdResources | int = SHAPE, **kw: Any) -> Any:
    return slurmd_pod(CLUSTER.cluster, GPU, "n1", resources, "h", **kw)


def test_the_pod_requests_exactly_what_slurm_conf_gives_slurm_and_is_guaranteed() -> None:
    spec = pod()["spec"]
    guaranteed = {"cpu": "64", "memory": "261120Mi"}
    # Pod-level: requests equal limits for CPU and memory is Guaranteed QoS.
    assert spec["resources"] == {"requests": guaranteed, "limits": guaranteed}
    (container,) = spec["containers"]
    assert container["resources"] == {
        "requests": {wk.RESOURCE_GPU: "8"},
        "limits": {wk.RESOURCE_GPU: "8"},
    }


def guaranteed() -> World:
    world = World(pods={})
    world.docs[1]["spec"]["podQoS"] = "Guaranteed"
    return world


def test_the_plan_sizes_each_guaranteed_pod_from_its_node_line() -> None:
    plan = plan_cluster(guaranteed().registered().observed())
    made = {
        p["metadata"]["labels"][wk.LABEL_NODE]: p["spec"]["resources"] for p in plan.create_pods
    }
    # NodeBuilder: 64 CPUs, 256 GiB, less the NodeSet's 1024 MiB reserve.
    assert made == {
        n: {"requests": r, "limits": r}
        for n in NODES
        for r in [{"cpu": "64", "memory": "261120Mi"}]
    }


def test_by_default_the_pod_asks_for_the_gpus_only_so_daemonsets_fit_beside_it() -> None:
    plan = plan_cluster(World(pods={}).registered().observed())
    assert plan.create_pods
    for made in plan.create_pods:
        assert "resources" not in made["spec"]
        (container,) = made["spec"]["containers"]
        assert container["resources"]["requests"] == {wk.RESOURCE_GPU: "4"}


def test_a_held_node_keeps_the_pod_sized_as_slurm_registered_it() -> None:
    world = World().registered().state(NODE, busy=True)
    cpus_change(world)
    before = plan_cluster(World().registered().observed())
    after = plan_cluster(world.observed())
    assert after.create_pods == before.create_pods == ()
    # The same template hash: no rollout replaces the pod under its job.
    assert after.delete_pods == ()


def test_a_pod_without_a_known_shape_asks_for_gpus_only() -> None:
    assert "resources" not in pod(8)["spec"]


@pytest.mark.parametrize(("busy", "label"), [(True, "true"), (False, "false")])
def test_the_busy_label_is_what_the_budget_selects(busy: bool, label: str) -> None:
    labels = pod(busy=busy)["metadata"]["labels"]
    assert labels[wk.LABEL_BUSY] == label
    budget = slurmd_disruption_budget(CLUSTER.cluster, GPU)
    selector = budget["spec"]["selector"]["matchLabels"]
    selected = all(labels.get(k) == v for k, v in selector.items())
    assert selected is busy  # idle pods stay evictable


@pytest.mark.parametrize("busy", [True, False])
def test_the_label_patch_turns_the_budget_on_and_off(busy: bool) -> None:
    labels = pod()["metadata"]["labels"] | busy_label_patch(busy)["metadata"]["labels"]
    selector = slurmd_disruption_budget(CLUSTER.cluster, GPU)["spec"]["selector"]["matchLabels"]
    assert all(labels.get(k) == v for k, v in selector.items()) is busy


def test_the_budget_refuses_every_eviction_of_a_busy_pod() -> None:
    budget = slurmd_disruption_budget(CLUSTER.cluster, GPU)
    assert budget["apiVersion"] == "policy/v1" and budget["kind"] == "PodDisruptionBudget"
    assert budget["spec"]["maxUnavailable"] == 0
    assert budget["spec"]["selector"]["matchLabels"][wk.LABEL_NODESET] == "gpu"


def test_one_budget_per_node_set_with_disjoint_selectors() -> None:
    plan = plan_cluster(World(docs=_two_node_sets()).observed())
    names = [b["metadata"]["name"] for b in plan.disruption_budgets]
    assert len(set(names)) == len(names) == 2
    sets = {b["spec"]["selector"]["matchLabels"][wk.LABEL_NODESET] for b in plan.disruption_budgets}
    assert sets == {"gpu", "cpu"}


def _two_node_sets() -> list[dict[str, Any]]:
    from slurmkube_local.builders import cluster_docs

    return cluster_docs(pools=("gpu", "cpu"))


@pytest.mark.parametrize(
    ("busy_label", "busy", "change"),
    [
        (False, True, {"gpu-gpu-0002": True}),  # a job started: guard the pod
        (True, False, {"gpu-gpu-0002": False}),  # idle again: evictable
        (True, True, {}),  # nothing to write
        (False, False, {}),
    ],
)
def test_the_plan_sets_the_busy_label_from_slurm(
    busy_label: bool, busy: bool, change: dict[str, bool]
) -> None:
    from dataclasses import replace

    world = World().registered().state(NODE, busy=busy)
    observed = world.observed()
    pods = [replace(p, busy_label=busy_label) if p.node == NODE else p for p in observed.pods]
    assert plan_cluster(replace(observed, pods=pods)).busy_labels == change


def test_without_slurm_no_busy_label_is_touched() -> None:
    from dataclasses import replace

    assert plan_cluster(replace(World().observed(), slurm_nodes=None)).busy_labels == {}


def test_the_chart_ships_the_priority_class_slurmd_pods_name() -> None:
    if not os.access(HELM, os.X_OK):
        pytest.fail(f"helm not found at {HELM}: run `make cluster-build` (it installs helm)")
    priority = one(render(HELM), "PriorityClass")
    assert priority["metadata"]["name"] == wk.SLURMD_PRIORITY_CLASS
    assert priority["preemptionPolicy"] == "Never"
    # Above any default workload, below system-cluster-critical (2000000000).
    assert 0 < priority["value"] < 2_000_000_000


def test_the_priority_class_for_clusters_without_the_chart_is_the_charts() -> None:
    if not os.access(HELM, os.X_OK):
        pytest.fail(f"helm not found at {HELM}: run `make cluster-build` (it installs helm)")
    shipped = one(render(HELM), "PriorityClass")
    built = slurmd_priority_class()
    assert {k: v for k, v in shipped.items() if k != "metadata"} == {
        k: v for k, v in built.items() if k != "metadata"
    }
    assert shipped["metadata"]["name"] == built["metadata"]["name"]
