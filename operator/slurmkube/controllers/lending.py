"""kopf wiring of the Kueue bridge: observe -> `plan_lending` -> apply, per SlurmCluster.

Any event on a Workload, an AdmissionCheck, a SlurmReservationCheck, a slurmd
pod or a Node change (not a heartbeat) asks the bridge's work queue for a round
(after `COALESCE_SECONDS` to gather a burst), and every `RESYNC_SECONDS` anyway
(leak collection, busyNodes grace and timeouts). A reconcile that added or removed
lease labels has the SlurmCluster reconciled at once too (`handlers.reconcile_now`). One
reconcile covers every AdmissionCheck whose controllerName is
`slurmkube.io/slurm-reservation`, grouped by the SlurmCluster its parameters
name. Only the leader reconciles (the operator's Lease, `memory.State`).

Writes (`lending_apply`): the Slurm reservation (slurmrestd, or scontrol where its
data_parser cannot write reservations, `RestClient`), the
`slurmkube.io/lease` label on Nodes, our entry of each Workload's
`status.admissionChecks` and the AdmissionCheck's `Active` condition, both by
server-side apply under our own field manager so Kueue's fields stay Kueue's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster, from_object
from slurmkube.controllers import caches, handlers
from slurmkube.controllers.lending_apply import LendingCluster, apply_lending, write_active
from slurmkube.controllers.lending_observe import (
    Cache,
    Check,
    check_of,
    clusters_with_leases,
    forget_views,
    observe_nodes,
    workloads_of,
)
from slurmkube.controllers.memory import State, label_keys, leading
from slurmkube.controllers.queue import Result, WorkQueue
from slurmkube.kube.client import Kube, Manifest
from slurmkube.lending import (
    LendingWorld,
    plan_lending,
)
from slurmkube.lending.model import CheckState, WorkloadView
from slurmkube.topology.fleet import node_changed

log = logging.getLogger(__name__)
KUEUE = "kueue.x-k8s.io/v1beta2"
FIELD_MANAGER = "slurmkube-admission-check"
RESYNC_SECONDS = 10.0


# After a wake-up, how long to let a burst of events (a reconcile's own writes,
# a Job's pods) gather into one reconcile.
COALESCE_SECONDS = 0.05


@dataclass
class _Bridge:
    # What asked for the next round (TRIGGERS), for slurmkube_bridge_rounds_total.
    triggers: set[str] = field(default_factory=set)
    # The last round's valid checks and the SlurmCluster each lends from (the goodput
    # exporter reads it rather than asking the API server again).
    lenders: dict[str, tuple[str, str]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


BRIDGE = _Bridge()
# The bridge's rounds, one key: an event asks for a round COALESCE_SECONDS from
# now (not a flag polled every half second: each poll interval was paid twice on
# the way to Ready, before the reservation and after the slurmd pod left); a
# round asks for the next after RESYNC_SECONDS (leaks, WaitForIdle timeouts).
ROUND = "round"
# What asked for a round, for slurmkube_bridge_rounds_total; the first present wins,
# so a round any Node event asked for counts as "node".
TRIGGERS = ("node", "workload", "admissioncheck", "slurmreservationcheck", "pod")


async def _round(_: str) -> Result:
    kube = State.kube
    if kube is None or not caches.ready():
        return Result(requeue_after=COALESCE_SECONDS)
    trigger = next((t for t in TRIGGERS if t in BRIDGE.triggers), "requeue")
    BRIDGE.triggers.clear()
    metrics.BRIDGE_ROUNDS.labels(trigger).inc()
    started = time.monotonic()
    relabelled = await asyncio.to_thread(reconcile_bridge, kube, _cache_now())
    log.info("bridge reconciled seconds=%.3f", time.monotonic() - started)
    for key in relabelled:
        # A lease label added or removed changes which nodes the cluster wants
        # slurmd on: reconcile it now rather than debounced, so the slurmd pod
        # leaves (or comes back) without that wait.
        await handlers.reconcile_now(key)
    return Result(requeue_after=RESYNC_SECONDS)


ROUNDS: WorkQueue[str] = WorkQueue(_round, name="kueue-bridge")


def _cache_now() -> Cache:
    """The watches' caches, copied on the event loop (kopf updates them there)."""
    return Cache(
        nodes=caches.nodes_now(),
        slurmd_pods=caches.all_slurmd_pods_now(),
        node_sets=caches.all_node_sets_now(),
        workloads=caches.workloads_now(),
    )


def _ask(trigger: str) -> None:
    BRIDGE.triggers.add(trigger)
    ROUNDS.add(ROUND, COALESCE_SECONDS)


async def _mark(resource: kopf.Resource, **kwargs: Any) -> None:
    caches.take(kwargs)
    _ask(resource.plural.removesuffix("s"))


@caches.on_node
def _node_event(type: str, body: Manifest) -> None:
    """Lease labels, cordons, nodes coming and going; not heartbeats, which in a large
    fleet arrive many times a second and would keep the bridge reconciling."""
    if node_changed(State.bridge_nodes_seen, type, body, label_keys()):
        _ask("node")


kopf.on.event("kueue.x-k8s.io", "v1beta2", "workloads")(_mark)
kopf.on.event("kueue.x-k8s.io", "v1beta2", "admissionchecks")(_mark)
kopf.on.event(wk.GROUP, "v1alpha1", "slurmreservationchecks")(_mark)
# A slurmd pod leaving a leased node is the last step before Ready.
kopf.on.event("", "v1", "pods", labels={wk.LABEL_NAME: "slurmd"}, id="lending-pods")(_mark)


@kopf.on.startup()
async def start_bridge(**_: Any) -> None:
    ROUNDS.add(ROUND)  # the first round finds what happened while the operator was away
    BRIDGE.task = asyncio.get_running_loop().create_task(ROUNDS.run(leading))


@kopf.on.cleanup()
async def stop_bridge(**_: Any) -> None:
    if BRIDGE.task is not None:
        BRIDGE.task.cancel()


def reconcile_bridge(kube: Kube, cache: Cache) -> set[tuple[str, str]]:
    """One round over every check; returns the clusters whose lease labels it changed."""
    try:
        admission_checks = [
            ac
            for ac in kube.list(KUEUE, "AdmissionCheck", None)
            if (ac.get("spec") or {}).get("controllerName") == wk.CHECK_CONTROLLER
        ]
    except ResourceNotFoundError:
        return set()  # Kueue is not installed
    raw_workloads = cache.workloads
    checks = [check_of(kube, ac) for ac in admission_checks]
    valid = {c.name: c for c in checks if c.policy is not None and c.cluster is not None}
    BRIDGE.lenders = {c.name: c.cluster for c in valid.values() if c.cluster is not None}
    views = workloads_of(raw_workloads, valid)
    # Workloads holding nodes under any of our checks, valid or not: a check whose
    # parameters are being fixed must not cost a running workload its nodes.
    live = frozenset(
        w.uid for w in workloads_of(raw_workloads, {c.name: c for c in checks}) if w.holds_nodes
    )
    raw_by_uid = {w["metadata"]["uid"]: w for w in raw_workloads}
    clusters = {c.cluster for c in valid.values() if c.cluster is not None}
    # Leases nobody holds on clusters no valid check names (a check deleted while
    # it lent): those clusters are reconciled with no policy, which releases them.
    clusters |= clusters_with_leases(live, cache)
    forget_views(clusters)
    active: dict[str, tuple[bool, str, str]] = {
        c.name: (False, "InvalidParameters", c.problem) for c in checks if c.problem
    }
    relabelled = set()
    for key in sorted(clusters):
        mine = [c for c in valid.values() if c.cluster == key]
        (ok, reason, message), changed = _reconcile_cluster(
            kube,
            key,
            mine,
            [w for w in views if valid[w.check].cluster == key],
            elsewhere=live,
            raw_by_uid=raw_by_uid,
            cache=cache,
        )
        if changed:
            relabelled.add(key)
        for c in mine:
            active[c.name] = (ok, reason, message)
    for c in checks:
        write_active(kube, c.obj, *active.get(c.name, (False, "Unknown", "not reconciled")))
    return relabelled


def _reconcile_cluster(
    kube: Kube,
    key: tuple[str, str],
    checks: Sequence[Check],
    workloads: Sequence[WorkloadView],
    *,
    elsewhere: frozenset[str],
    raw_by_uid: Mapping[str, Manifest],
    cache: Cache,
) -> tuple[tuple[bool, str, str], bool]:
    """The check's Active answer for this cluster, and whether lease labels changed."""
    namespace, name = key
    obj = kube.get(wk.API_VERSION, "SlurmCluster", name, namespace)
    if obj is None:
        return (False, "ClusterNotFound", f"SlurmCluster {namespace}/{name} not found"), False
    cluster = from_object(SlurmCluster, obj)
    writer = State.clients.scontrol(kube, cluster)
    rest = State.clients.rest(kube, cluster)
    policies = tuple(c.policy for c in checks if c.policy is not None)
    # Jobs are read only when a policy may requeue them or a workload is being placed
    # (the sharing policy protects Slurm's queue): a deep queue makes /jobs/ costly.
    with_jobs = any(p.requeue is not None for p in policies) or any(
        w.holds_nodes and w.check_state is CheckState.PENDING for w in workloads
    )
    health = (obj.get("status") or {}).get("health") or {}
    escalated = frozenset(str(d.get("domain")) for d in health.get("domains") or [])
    slurm = observe_nodes(kube, cluster, rest, with_jobs, cache, escalated=escalated)
    world = LendingWorld(
        checks=policies,
        workloads=tuple(workloads),
        nodes=slurm.nodes,
        reservations=slurm.reservations,
        slurm_reachable=slurm.reachable and writer is not None,
        now=time.time(),
        live_elsewhere=elsewhere,
        escalation_gang_nodes=cluster.spec.health.rack_escalation.gang_nodes,
        slurm_queue=slurm.queue,
    )
    plan = plan_lending(world)
    started = {r.name: r.start for r in slurm.reservations}
    relabelled = apply_lending(kube, LendingCluster(obj, cluster, rest), plan, raw_by_uid, started)
    metrics.LENT_NODES.labels(namespace, name).set(plan.lent_nodes)
    metrics.WAITING_WORKLOADS.labels(namespace, name).set(len(plan.waiting))
    if not world.slurm_reachable:
        reason = slurm.error or "no slurmctld address or jwt.key yet"
        return (False, "SlurmUnreachable", reason), relabelled
    return (True, "Active", f"lending from SlurmCluster {namespace}/{name}"), relabelled
