"""Apply the autoscaling part of a plan: what Slurm is asked, events, metrics, status.

The decisions are in `slurmkube.plan.autoscale`; here they become Slurm
state changes (POWER_UP, POWER_DOWN_ASAP, drains that hold nodes and their
undoing), Warning events for failed resumes, and the numbers users watch.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from slurmkube import metrics
from slurmkube.controllers.observe import Snapshot
from slurmkube.kube.client import Kube
from slurmkube.plan.autoscale import RESUMING, UP
from slurmkube.plan.model import Plan
from slurmkube.slurm.drain import drain, resume_if_ours
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.models import NodeStateChange

log = logging.getLogger(__name__)

# (namespace, cluster, node) -> when the operator first saw it POWERING_UP.
_resume_seen: dict[tuple[str, str, str], float] = {}


def apply_scaling(kube: Kube, snap: Snapshot, plan: Plan) -> None:
    """Each call is idempotent: a state already set is not asked for again (the plan
    reads Slurm's flags), and a failed call is retried by the next reconcile."""
    slurm = snap.slurm
    if slurm is None or snap.observed.slurm_nodes is None:
        return
    cluster_obj = snap.cluster_obj
    for node, reason in sorted(plan.hold.items()):
        try:
            drain(slurm, node, reason)
        except SlurmError as err:
            log.warning("hold failed node=%s error=%s", node, err)
    for name, scaling in plan.scaling.items():
        node_set = snap.node_set_objs.get(name, cluster_obj)
        try:
            for node, reason in sorted(scaling.hold.items()):
                drain(slurm, node, reason)
            for node in scaling.release:
                resume_if_ours(slurm, node)
            for node in scaling.power_up:
                slurm.update_node_state(node, NodeStateChange.POWER_UP)
                log.info("power up asked node=%s nodeset=%s", node, name)
            for node in scaling.power_down:
                slurm.update_node_state(node, NodeStateChange.POWER_DOWN_ASAP)
                kube.event(
                    node_set,
                    "PowerDown",
                    f"asked Slurm to power down {node} once idle (lent away or above maxNodes)",
                )
        except SlurmError as err:
            log.warning("autoscaling step failed nodeset=%s error=%s", name, err)


def scaling_status(kube: Kube, snap: Snapshot, plan: Plan, name: str) -> dict[str, Any] | None:
    """The NodeSet's status.autoscaling; says each newly failed resume once (Warning event)."""
    scaling = plan.scaling.get(name)
    if scaling is None:
        return None
    meta = snap.cluster_obj["metadata"]
    cluster = meta["name"]
    obj = snap.node_set_objs[name]
    before = ((obj.get("status") or {}).get("autoscaling") or {}).get("failedNodes") or []
    views = snap.observed.slurm_nodes or {}
    for node in scaling.failed:
        if node in before:
            continue
        view = views.get(node)
        reason = view.reason if view is not None else ""
        kube.event(
            obj,
            "ResumeFailed",
            f"{node} did not register its slurmd in time ({reason or 'ResumeTimeout'}): "
            "Slurm marked it DOWN and requeued its jobs; after fixing the cause, "
            f"`scontrol update NodeName={node} State=RESUME` returns it",
            warning=True,
        )
        metrics.RESUME_FAILURES.labels(meta["namespace"], cluster, name).inc()
        log.warning("resume failed node=%s nodeset=%s reason=%s", node, name, reason)
    _observe_resumes(meta["namespace"], cluster, name, plan, snap)
    for state, count in scaling.counts.items():
        metrics.AUTOSCALING_NODES.labels(meta["namespace"], cluster, name, state).set(count)
    return {**scaling.counts, "failedNodes": list(scaling.failed)}


def _observe_resumes(namespace: str, cluster: str, name: str, plan: Plan, snap: Snapshot) -> None:
    """Resume latency as the operator sees it: first POWERING_UP to registered."""
    views = snap.observed.slurm_nodes or {}
    now = time.monotonic()
    for node in plan.members.get(name, ()):
        key = (namespace, cluster, node)
        view = views.get(node)
        power = view.power if view is not None else ""
        if power == RESUMING:
            _resume_seen.setdefault(key, now)
        elif key in _resume_seen:
            started = _resume_seen.pop(key)
            if power == UP and view is not None and view.responding:
                metrics.RESUME_SECONDS.labels(namespace, cluster, name).observe(now - started)


def record_pending(snap: Snapshot) -> dict[str, int] | None:
    pending = snap.pending_gpus
    if pending is None:
        return None
    cluster = snap.cluster_obj["metadata"]["name"]
    for partition in snap.observed.bundle.cluster.spec.partitions:
        metrics.PENDING_GPUS.labels(
            snap.cluster_obj["metadata"]["namespace"], cluster, partition.name
        ).set(pending.get(partition.name, 0))
    return pending
