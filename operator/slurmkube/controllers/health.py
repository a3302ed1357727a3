"""kopf wiring of node health: observe -> `plan_health` -> apply, per SlurmCluster.

A SlurmCluster with `spec.health.rules` or `spec.health.nodeCheck` on (or a
health record left from earlier settings) has one key in this module's work
queue. A Node event that changes a condition or taint some rule reads, or
slurmkube's own taint, adds every such key (after `COALESCE_SECONDS`);
heartbeats change neither and add nothing. A pass comes back soon while a
node is checking (its check job's result is read from Slurm), and every
`RESYNC_SECONDS` anyway: an admin's resume in Slurm, or a drain by slurmd's
GPU check, is no Kubernetes event. Only the leader acts.

Observed: the Node cache's conditions, taints and domain label
(`caches.nodes_now`), each Slurm node's drain, reason and jobs, the check
jobs' states; the planner's memory is the record in the SlurmCluster's
`slurmkube.io/health` annotation, written after every pass that changed it.
Written: the actions (`health_apply`), `status.health`, the
HealthCircuitOpen condition, Events and metrics.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import kopf

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster, from_object
from slurmkube.controllers import caches
from slurmkube.controllers.health_apply import Applied, HealthTarget, apply_health
from slurmkube.controllers.memory import State, leading
from slurmkube.controllers.observe import NodeEntry
from slurmkube.controllers.queue import Key, Result, WorkQueue
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.conditions import timestamp, transition_time
from slurmkube.plan.health import plan_health
from slurmkube.plan.health_model import (
    ActionKind,
    HealthNode,
    HealthPlan,
    HealthSnapshot,
    NodeMemory,
    NodeTaint,
    SlurmHealthView,
)
from slurmkube.plan.health_state import (
    CIRCUIT_CONDITION,
    JOB_STATES,
    HealthRecord,
    check_outcomes,
    check_result,
    circuit_condition,
    health_events,
    health_status,
    next_checks,
    node_set_health,
    node_set_health_empty,
    parse_record,
    record_text,
)
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.models import Node
from slurmkube.slurm.rest import RestClient
from slurmkube.topology.fleet import node_signals

log = logging.getLogger(__name__)
COALESCE_SECONDS: Final = 0.05
RESYNC_SECONDS: Final = 30.0
# While a node is checking, or an action failed: how soon to look again.
CHECKING_SECONDS: Final = 2.0
SICK_SECONDS: Final = 10.0


@dataclass
class _Health:
    # Per SlurmCluster with health rules or a record: the condition types and taint keys
    # its rules read.
    clusters: dict[Key, frozenset[str]] = field(default_factory=dict)
    # Per Node: node_signals of its last event.
    seen: dict[str, tuple[object, ...]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


HEALTH = _Health()


def rule_keys(spec: Mapping[str, Any]) -> frozenset[str]:
    """The condition types and taint keys a SlurmCluster's `spec.health.rules` read."""
    keys = set()
    for rule in (spec.get("health") or {}).get("rules") or []:
        for signal, name in (("condition", "type"), ("taint", "key")):
            value = (rule.get(signal) or {}).get(name)
            if isinstance(value, str):
                keys.add(value)
    return frozenset(keys)


def node_check_enabled(spec: Mapping[str, Any]) -> bool:
    """`spec.health.nodeCheck.enabled`: slurmd's check drains nodes health must recover."""
    return bool(((spec.get("health") or {}).get("nodeCheck") or {}).get("enabled"))


def _keys() -> frozenset[str]:
    keys = frozenset().union(*HEALTH.clusters.values()) if HEALTH.clusters else frozenset()
    return keys | {wk.TAINT_UNHEALTHY} if HEALTH.clusters else keys


async def _pass(key: Key) -> Result:
    kube = State.kube
    if kube is None or not caches.ready():
        return Result(requeue_after=1.0)
    if key not in HEALTH.clusters:
        return Result()
    return Result(requeue_after=await asyncio.to_thread(reconcile_health, kube, key, _nodes()))


def _nodes() -> dict[str, NodeEntry]:
    return caches.nodes_now()


PASSES: WorkQueue[Key] = WorkQueue(_pass, name="node-health", workers=2)


@kopf.on.event(wk.GROUP, "v1alpha1", "slurmclusters", id="health-clusters")
def cluster_event(
    type: str | None,
    namespace: str | None,
    name: str,
    spec: kopf.Spec,
    annotations: kopf.Annotations,
    **_: Any,
) -> None:
    key = (wk.namespace_or_default(namespace), name)
    keys = rule_keys(spec)
    watched = keys or node_check_enabled(spec) or wk.ANNOTATION_HEALTH in annotations
    if type == "DELETED" or not watched:
        HEALTH.clusters.pop(key, None)
        PASSES.forget(key)
    else:
        HEALTH.clusters[key] = keys
        PASSES.add(key, COALESCE_SECONDS)
    caches.CACHES.health_keys = _keys()


@caches.on_node
def node_event(type: str, body: Manifest) -> None:
    """A rule's condition or taint changed (or our taint): every health cluster looks."""
    if not HEALTH.clusters:
        return
    name = body["metadata"]["name"]
    if type == "DELETED":
        HEALTH.seen.pop(name, None)
        return
    signals = node_signals(body, caches.CACHES.health_keys)
    if HEALTH.seen.get(name) == signals:
        return
    HEALTH.seen[name] = signals
    for key in list(HEALTH.clusters):
        PASSES.add(key, COALESCE_SECONDS)


@kopf.on.startup()
async def start_health(**_: Any) -> None:
    HEALTH.task = asyncio.get_running_loop().create_task(PASSES.run(leading))


@kopf.on.cleanup()
async def stop_health(**_: Any) -> None:
    if HEALTH.task is not None:
        HEALTH.task.cancel()


@dataclass(frozen=True, slots=True)
class _Observed:
    snapshot: HealthSnapshot
    slurm_nodes: dict[str, Node]
    gpus: dict[str, int]


def observe_health(
    cluster: SlurmCluster,
    rest: RestClient,
    nodes: Mapping[str, NodeEntry],
    record: HealthRecord,
    now: float,
) -> _Observed:
    """The cluster's nodes (Kubernetes Nodes Slurm knows by the same name) as the
    planner reads them."""
    listed = {n.name: n for n in rest.current_nodes().nodes}
    states: dict[int, frozenset[str]] = {}
    if record.checks:
        states = {j.job_id: j.state for j in rest.list_jobs(JOB_STATES)}
    domain = cluster.spec.topology.nvlink_domain_label
    health_nodes, gpus = [], {}
    for name, entry in sorted(nodes.items()):
        slurm = listed.get(name)
        if slurm is None or entry.fleet is None:
            continue
        job = record.checks.get(name)
        health_nodes.append(
            HealthNode(
                name=name,
                domain=entry.labels.get(domain) or None,
                conditions=entry.conditions,
                taints=tuple(NodeTaint(*t) for t in entry.taints),
                slurm=SlurmHealthView(drain=slurm.drain, reason=slurm.reason, busy=slurm.busy),
                check=check_result(states.get(job) if job is not None else None),
                lent=wk.LABEL_LEASE in entry.labels,
            )
        )
        gpus[name] = entry.fleet.gpus
    snapshot = HealthSnapshot(tuple(health_nodes), record.memory, now)
    return _Observed(snapshot, listed, gpus)


def reconcile_health(kube: Kube, key: Key, nodes: Mapping[str, NodeEntry]) -> float | None:
    """One observe -> plan -> apply -> record; returns when to come back."""
    namespace, name = key
    obj = kube.get(wk.API_VERSION, "SlurmCluster", name, namespace)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    cluster = from_object(SlurmCluster, obj)
    annotations = obj["metadata"].get("annotations") or {}
    record = parse_record(annotations.get(wk.ANNOTATION_HEALTH))
    rest = State.clients.rest(kube, cluster)
    if rest is None:
        return SICK_SECONDS  # slurmrestd not up yet (or off): nothing can be acted on
    try:
        observed = observe_health(cluster, rest, nodes, record, time.time())
    except SlurmError as err:
        log.warning("health observe failed cluster=%s/%s error=%s", namespace, name, err)
        return SICK_SECONDS
    spec = cluster.spec.health
    plan = plan_health(observed.snapshot, spec)
    target = HealthTarget(
        kube, rest, namespace, name, observed.slurm_nodes, spec.recovery.check_timeout_seconds
    )
    applied = apply_health(target, plan)
    after = HealthRecord(plan.memory, next_checks(record.checks, plan, applied.submitted))
    kept = annotations.get(wk.ANNOTATION_HEALTH)
    # An empty record of a cluster health no longer acts on goes, and with it its key.
    empty = not (after.memory or after.checks)
    text = None if empty and not spec.acts else record_text(after)
    if text != kept and not (kept is None and empty):
        kube.annotate(wk.API_VERSION, "SlurmCluster", name, namespace, {wk.ANNOTATION_HEALTH: text})
    opened = _write_status(kube, obj, plan, observed.gpus)
    _write_node_set_status(kube, key, plan, observed.gpus)
    for event in health_events(plan, applied.done, circuit_opened=opened):
        kube.event(obj, event.reason, event.message, warning=event.warning)
    _record_metrics(key, observed, plan)
    for kind, node in applied.done:
        since = plan.memory.get(node, NodeMemory()).sick_since
        if kind is ActionKind.DRAIN and since is not None:
            drained = max(time.time() - since, 0.0)
            metrics.HEALTH_TIME_TO_DRAIN.labels(*key).observe(drained)
    return _next_look(plan, applied)


def _write_status(kube: Kube, obj: Manifest, plan: HealthPlan, gpus: Mapping[str, int]) -> bool:
    """`status.health`, and HealthCircuitOpen when it changes; True if it just opened."""
    meta, status = obj["metadata"], obj.get("status") or {}
    health = health_status(plan, gpus)
    update: dict[str, Any] = {}
    if status.get("health") != health:
        update["health"] = health
    conditions = list(status.get("conditions") or [])
    old = next((c for c in conditions if c.get("type") == CIRCUIT_CONDITION), None)
    now = timestamp(dt.datetime.now(dt.UTC))
    wanted = circuit_condition(plan, meta.get("generation"), now)
    opened = plan.circuit.open and (old is None or old.get("status") != "True")
    if old is None or (old.get("status"), old.get("reason")) != (
        wanted["status"],
        wanted["reason"],
    ):
        wanted["lastTransitionTime"] = transition_time(old or {}, wanted["status"], now)
        others = [c for c in conditions if c.get("type") != CIRCUIT_CONDITION]
        update["conditions"] = [*others, wanted]
    if update:
        kube.patch_status(wk.API_VERSION, "SlurmCluster", meta["name"], meta["namespace"], update)
    return opened


def _write_node_set_status(kube: Kube, key: Key, plan: HealthPlan, gpus: Mapping[str, int]) -> None:
    """Each NodeSet's `status.health`, from its slurmd pods' nodes (the cache)."""
    node_set_of = {p.node: p.node_set for p in caches.slurmd_pods_now(key) if p.node}
    found = node_set_health(plan, gpus, node_set_of)
    for raw in caches.node_sets_now(key):
        name = raw["metadata"]["name"]
        wanted = found.get(name) or node_set_health_empty()
        if (raw.get("status") or {}).get("health") != wanted:
            kube.patch_status(wk.API_VERSION, "NodeSet", name, key[0], {"health": wanted})


def _record_metrics(key: Key, observed: _Observed, plan: HealthPlan) -> None:
    health = health_status(plan, observed.gpus)
    for verdict in ("sick", "held", "checking", "waiting"):
        metrics.HEALTH_NODES.labels(*key, verdict).set(health[verdict])
    metrics.HEALTHY_GPUS.labels(*key).set(health["healthyGpus"])
    for result, count in check_outcomes(observed.snapshot, plan).items():
        if count:
            metrics.HEALTH_CHECKS.labels(*key, result).inc(count)


def _next_look(plan: HealthPlan, applied: Applied) -> float:
    verdicts = {v.verdict for v in plan.verdicts}
    if "checking" in verdicts or applied.failed:
        return CHECKING_SECONDS
    if verdicts - {"healthy"} or plan.circuit.open:
        return SICK_SECONDS
    return RESYNC_SECONDS
