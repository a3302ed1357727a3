"""Write what a reconcile found: the SlurmCluster's and each NodeSet's status,
and each slurmd pod's `slurmkube.io/SlurmNode` condition (composed in plan/)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.build.slurmd import slurmd_selector
from slurmkube.controllers.observe import API, Snapshot
from slurmkube.controllers.scaling import record_pending, scaling_status
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.conditions import (
    compose,
    condition,
    metav1_conditions,
    reconcile_failed,
    timestamp,
)
from slurmkube.plan.deletion import slurmd_registered
from slurmkube.plan.health_state import CIRCUIT_CONDITION
from slurmkube.plan.model import Condition, Plan
from slurmkube.plan.status import (
    gpu_counts,
    node_counts,
    node_problems_status,
    pod_condition_updates,
    upgrade_event,
    upgrade_status,
)

HEALTH_CONDITIONS = frozenset({CIRCUIT_CONDITION})


def write_status(kube: Kube, snap: Snapshot, plan: Plan, conditions: list[Condition]) -> None:
    cluster_obj = snap.cluster_obj
    meta = cluster_obj["metadata"]
    slurm_nodes = snap.observed.slurm_nodes or {}
    all_members = {n for nodes in plan.desired.values() for n in nodes}
    conditions = compose(conditions, plan, slurm_nodes)
    ready_condition = condition(conditions, "Ready")
    ready = ready_condition.status
    every_member = [n for nodes in plan.members.values() for n in nodes]
    previous = (cluster_obj.get("status") or {}).get("conditions") or []
    status = {
        "observedGeneration": meta.get("generation"),
        "conditions": metav1_conditions(
            previous, conditions, meta.get("generation"), timestamp(dt.datetime.now(dt.UTC))
        )
        # Written by node health (controllers/health.py), kept as it is.
        + [c for c in previous if c.get("type") in HEALTH_CONDITIONS],
        "nodes": node_counts(slurm_nodes, all_members, every_member),
        "gpus": gpu_counts(slurm_nodes, all_members),
        "nodeProblems": node_problems_status(plan),
        "upgrade": upgrade_status(plan.upgrade),
        "slurmdRegistered": slurmd_registered(cluster_obj.get("status"), snap.observed.slurm_nodes),
    }
    if plan.slurm_version:
        status["slurmVersion"] = plan.slurm_version
    pending = record_pending(snap)
    if pending is not None:
        status["pendingGpus"] = pending
    if plan.rendered is not None and any(
        c.type == "ConfigApplied" and c.status for c in conditions
    ):
        status["configHash"] = plan.rendered.hash
    # The NodeSets first: whoever sees the cluster's status of this reconcile (its
    # observedGeneration, its conditions) then finds each NodeSet's status written too.
    _write_node_set_status(kube, snap, plan)
    kube.patch_status(API, "SlurmCluster", meta["name"], meta["namespace"], status)
    metrics.SLURM_REACHABLE.labels(meta["namespace"], meta["name"]).set(
        snap.observed.slurm_nodes is not None
    )
    was_ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (cluster_obj.get("status") or {}).get("conditions") or []
    )
    if ready != was_ready:
        kube.event(cluster_obj, ready_condition.reason, ready_condition.message, warning=not ready)
    upgrade = upgrade_event(snap.observed.upgrade_memory, plan.upgrade)
    if upgrade is not None:
        reason, message, warning = upgrade
        kube.event(cluster_obj, reason, message, warning=warning)
    if snap.observed.slurm_nodes is not None:
        _mirror_pod_conditions(kube, meta["namespace"], snap)


def write_failure(kube: Kube, cluster_obj: Manifest, error: BaseException) -> None:
    """A reconcile raised: Reconciled and Ready false with the error, the rest as
    it was (the queue retries with backoff)."""
    meta = cluster_obj["metadata"]
    previous = (cluster_obj.get("status") or {}).get("conditions") or []
    now = timestamp(dt.datetime.now(dt.UTC))
    conditions = reconcile_failed(previous, error, meta.get("generation"), now)
    kube.patch_status(
        API, "SlurmCluster", meta["name"], meta["namespace"], {"conditions": conditions}
    )


def _write_node_set_status(kube: Kube, snap: Snapshot, plan: Plan) -> None:
    namespace = snap.cluster_obj["metadata"]["namespace"]
    slurm_nodes = snap.observed.slurm_nodes or {}
    pods_by_set = Counter(p.node_set for p in snap.observed.pods if not p.deleting)
    ready_by_set = Counter(p.node_set for p in snap.observed.pods if p.ready)
    for name, obj in snap.node_set_objs.items():
        created = sum(
            1 for p in plan.create_pods if p["metadata"]["labels"][wk.LABEL_NODESET] == name
        )
        up = set(plan.desired.get(name, ()))
        counts = node_counts(slurm_nodes, up, plan.members.get(name, ()))
        gpus = gpu_counts(slurm_nodes, up)
        cluster = snap.cluster_obj["metadata"]["name"]
        for state, count in counts.items():
            if state != "total":
                metrics.SLURM_NODES.labels(namespace, cluster, name, state).set(count)
        for kind, count in gpus.items():
            metrics.GPUS.labels(namespace, cluster, name, kind).set(count)
        status = {
            "observedGeneration": obj["metadata"].get("generation"),
            "replicas": pods_by_set[name] + created,
            "readyReplicas": ready_by_set[name],
            "selector": slurmd_selector(snap.observed.bundle.cluster, name),
            "nodes": counts,
            "gpus": gpus,
        }
        autoscaling = scaling_status(kube, snap, plan, name)
        if autoscaling is not None:
            status["autoscaling"] = autoscaling
        kube.patch_status(API, "NodeSet", name, namespace, status)


def _mirror_pod_conditions(kube: Kube, namespace: str, snap: Snapshot) -> None:
    """Each slurmd pod shows its node's Slurm state (a strategic merge keyed by type,
    so the kubelet's own conditions stay as they are)."""
    assert snap.observed.slurm_nodes is not None
    now = timestamp(dt.datetime.now(dt.UTC))
    for update in pod_condition_updates(snap.observed.pods, snap.observed.slurm_nodes):
        kube.patch_pod_conditions(namespace, update.pod, [update.as_manifest(now)])
