"""What the Kueue bridge reads: our AdmissionChecks and their parameters, the
Workloads under them, and the lendable nodes of a SlurmCluster as Kubernetes
and Slurm see them (folded into `lending.NodeView`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from slurmkube.api import well_known as wk
from slurmkube.api.models import NodeSet, SlurmCluster, SlurmReservationCheckSpec, from_object
from slurmkube.controllers.observe import NodeEntry, resource_version
from slurmkube.kube.client import Kube, Manifest
from slurmkube.lending import (
    LendingPolicy,
    NodeView,
    RequeuePolicy,
    ReservationView,
    RunningJob,
    fold_slurm_state,
    our_check,
    sickness_of,
    uid_of_reservation,
    workload_view,
)
from slurmkube.lending.model import PendingJob, WorkloadView
from slurmkube.lending.sharing import SharingPolicy
from slurmkube.plan.model import PodView
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.models import Job
from slurmkube.slurm.rest import RestClient

log = logging.getLogger(__name__)
# squeue(1) JOB REASON CODES of a job that waits for nodes alone.
WAITS_FOR_NODES = frozenset({"Priority", "Resources", "None", ""})


@dataclass(frozen=True)
class Cache:
    """What the operator's watches hold (the Node cache, kopf indexes), copied on the event loop
    for one bridge round: a round lists no Nodes, pods or Workloads."""

    nodes: Mapping[str, NodeEntry]
    slurmd_pods: Mapping[tuple[str, str], tuple[PodView, ...]]
    node_sets: tuple[Manifest, ...]
    workloads: tuple[Manifest, ...]


@dataclass(frozen=True)
class Check:
    name: str
    obj: Manifest
    cluster: tuple[str, str] | None
    policy: LendingPolicy | None
    problem: str = ""


def clusters_with_leases(live: frozenset[str], cache: Cache) -> set[tuple[str, str]]:
    """SlurmClusters whose NodeSets select a node leased to no live Workload."""
    leased = [
        e.labels
        for e in cache.nodes.values()
        if wk.LABEL_LEASE in e.labels and e.labels[wk.LABEL_LEASE] not in live
    ]
    if not leased:
        return set()
    found = set()
    for raw in cache.node_sets:
        node_set = from_object(NodeSet, raw)
        if any(node_set.spec.node_selector.matches(labels) for labels in leased):
            found.add(
                (wk.namespace_or_default(node_set.metadata.namespace), node_set.spec.cluster_ref)
            )
    return found


def check_of(kube: Kube, ac: Manifest) -> Check:
    name = ac["metadata"]["name"]
    ref = (ac.get("spec") or {}).get("parameters") or {}
    if ref.get("apiGroup") != wk.GROUP or ref.get("kind") != wk.CHECK_PARAMETERS_KIND:
        return Check(
            name,
            ac,
            None,
            None,
            f"spec.parameters must reference a {wk.CHECK_PARAMETERS_KIND} of apiGroup {wk.GROUP}",
        )
    raw = kube.get(wk.API_VERSION, wk.CHECK_PARAMETERS_KIND, ref.get("name", ""), None)
    if raw is None:
        return Check(
            name, ac, None, None, f"{wk.CHECK_PARAMETERS_KIND} {ref.get('name')!r} not found"
        )
    try:
        spec = SlurmReservationCheckSpec.model_validate(raw.get("spec") or {})
    except ValidationError as err:
        return Check(name, ac, None, None, f"{wk.CHECK_PARAMETERS_KIND} spec: {err}")
    busy = spec.busy_nodes
    policy = LendingPolicy(
        check=name,
        node_sets=frozenset(spec.node_sets),
        wait_timeout_seconds=float(busy.timeout_seconds),
        requeue=RequeuePolicy(busy.requeue_below_priority, float(busy.grace_seconds or 0))
        if busy.policy == "Requeue" and busy.requeue_below_priority is not None
        else None,
        max_nodes=spec.max_nodes,
        flags=tuple(spec.reservation_flags),
        tolerations=tuple(t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations),
        retry_after_seconds=spec.retry_after_seconds,
        entitled_nodes=spec.entitled_nodes,
        sharing=SharingPolicy(
            horizon_s=float(spec.slurm_queue.horizon_seconds),
            queue_depth=spec.slurm_queue.protected_jobs,
        ),
    )
    return Check(name, ac, (spec.cluster_ref.namespace, spec.cluster_ref.name), policy)


def workloads_of(raw: Iterable[Manifest], checks: Mapping[str, Check]) -> list[WorkloadView]:
    out = []
    for w in raw:
        check = our_check(w, checks.keys())
        if check is not None:
            out.append(workload_view(w, check))
    return out


@dataclass(frozen=True)
class SlurmSide:
    """The cluster's lendable nodes and Slurm's state as the bridge plans with them."""

    nodes: tuple[NodeView, ...]
    reservations: tuple[ReservationView, ...]
    queue: tuple[PendingJob, ...]  # pending jobs that wait for nodes, queue head first
    reachable: bool
    error: str


def observe_nodes(
    kube: Kube,
    cluster: SlurmCluster,
    rest: RestClient | None,
    with_jobs: bool,
    cache: Cache,
    *,
    escalated: frozenset[str] = frozenset(),
) -> SlurmSide:
    """The cluster's nodes as the bridge plans with them; `escalated`: the NVLink
    domains node health withholds from gangs (its `status.health.domains`). Jobs are
    read `with_jobs` only (the incremental list costs a deep queue's size whenever a
    job changed)."""
    namespace = wk.namespace_or_default(cluster.metadata.namespace)
    node_sets_raw = [
        raw
        for raw in cache.node_sets
        if wk.namespace_or_default(raw["metadata"].get("namespace")) == namespace
        and (raw.get("spec") or {}).get("clusterRef") == cluster.metadata.name
    ]
    node_sets = [from_object(NodeSet, raw) for raw in node_sets_raw]
    # A terminating slurmd pod still counts: the check turns Ready only once it is
    # gone. Ready at deletionTimestamp would be safe for the GPUs (kube-scheduler
    # counts a terminating pod's requests until it is deleted, and Slurm has the
    # node drained and reserved), but it would admit a workload whose pods then
    # sit Pending, with no message saying why, for as long as the termination
    # hangs (a NotReady node keeps its pods Terminating until pod GC). On the
    # local runtime terminating -> gone measured 0.06 s (bench/bridge_live.py),
    # so waiting costs nothing measurable there.
    with_pod = {p.node for p in cache.slurmd_pods.get((namespace, cluster.metadata.name), ())}
    slurm_nodes: dict[str, Any] = {}
    reservations: tuple[ReservationView, ...] = ()
    held: dict[str, str] = {}
    jobs: dict[str, tuple[RunningJob, ...]] = {}
    ends: dict[str, float] = {}
    queue: tuple[PendingJob, ...] = ()
    error = "" if rest is not None else "slurmrestd is disabled or its key is missing"
    if rest is not None:
        try:
            slurm_nodes = {n.name: n for n in rest.current_nodes().nodes}
            all_reservations = rest.list_reservations()
            if with_jobs:
                listed = rest.list_jobs(states=("RUNNING", "SUSPENDED", "PENDING"))
                jobs, ends = running_jobs_by_node(listed)
                queue = slurm_queue(listed)
        except SlurmError as err:
            error = str(err)
        else:
            for res in all_reservations:
                for node in res.nodes:
                    held[node] = res.name
            reservations = tuple(
                ReservationView(r.name, r.nodes, r.start.timestamp() if r.start else 0.0)
                for r in all_reservations
                if uid_of_reservation(r.name) is not None
            )
    domain = cluster.spec.topology.nvlink_domain_label
    key = (namespace, cluster.metadata.name)
    context = (tuple(resource_version(raw) for raw in node_sets_raw), domain, escalated)
    memo = _VIEWS.get(key)
    if memo is None or memo.context != context:
        memo = _VIEWS[key] = _Views(context)
    made, views = memo.made, []
    for name in sorted(cache.nodes):
        entry, s = cache.nodes[name], slurm_nodes.get(name)
        has_pod, reservation = name in with_pod, held.get(name, "")
        node_jobs, busy_until = jobs.get(name, ()), ends.get(name)
        last = made.get(name)
        if (
            last is None
            or last.entry is not entry
            or last.slurm is not s
            or last.has_pod != has_pod
            or last.reservation != reservation
            or last.jobs != node_jobs
            or last.busy_until != busy_until
        ):
            node_set = next(
                (ns for ns in node_sets if ns.spec.node_selector.matches(entry.labels)), None
            )
            view = None
            if node_set is not None:
                view = _node_view(
                    name,
                    entry,
                    node_set.metadata.name,
                    s=s,
                    has_pod=has_pod,
                    reservation=reservation,
                    jobs=node_jobs,
                    busy_until=busy_until,
                    domain=domain,
                    escalated=escalated,
                )
            last = made[name] = _Made(entry, s, has_pod, reservation, node_jobs, busy_until, view)
        if last.view is not None:
            views.append(last.view)
    if len(made) > len(cache.nodes):
        for gone in made.keys() - cache.nodes.keys():
            del made[gone]
    reachable = rest is not None and not error
    return SlurmSide(tuple(views), reservations, queue, reachable, error)


@dataclass(frozen=True, slots=True)
class _Made:
    """One node's view (None: no NodeSet of the cluster selects it, or unusable) and
    what it was made from: the same NodeEntry and Slurm node objects (the caches
    replace them on a change), the same pod, reservation and jobs."""

    entry: NodeEntry
    slurm: object
    has_pod: bool
    reservation: str
    jobs: tuple[RunningJob, ...]
    busy_until: float | None
    view: NodeView | None


@dataclass
class _Views:
    """A cluster's NodeViews of the last round: a round folds again only the nodes
    whose inputs changed, and allocates nothing for the others (folding 25,000
    nodes cost a round about 0.2 s). `context`: the round-wide inputs (its
    NodeSets' versions, the domain label, the escalated domains); a change there
    folds every node again."""

    context: tuple[object, ...]
    made: dict[str, _Made] = field(default_factory=dict)


_VIEWS: dict[tuple[str, str], _Views] = {}


def forget_views(keep: Iterable[tuple[str, str]]) -> None:
    """Drop the views of clusters the bridge no longer lends from (deleted, or no
    check names them): a round folds such a cluster again from nothing."""
    for key in _VIEWS.keys() - set(keep):
        del _VIEWS[key]


def _node_view(
    name: str,
    entry: NodeEntry,
    node_set: str,
    *,
    s: Any,
    has_pod: bool,
    reservation: str,
    jobs: tuple[RunningJob, ...],
    busy_until: float | None,
    domain: str,
    escalated: frozenset[str],
) -> NodeView | None:
    """One node as the bridge plans with it (None: unusable labels or resources)."""
    labels, fleet = entry.labels, entry.fleet
    if fleet is None:
        return None
    return NodeView(
        name=name,
        node_set=node_set,
        block=labels.get(domain) or f"node/{name}",
        gpus=fleet.gpus,
        slurm=fold_slurm_state(
            has_slurmd_pod=has_pod,
            known=s is not None,
            busy=bool(s and s.busy),
            responding=bool(s and s.responding),
            drain=bool(s and s.drain),
            drained_by_us=bool(s and s.drained_by_us),
            health_drain=bool(s and s.drain and wk.is_health_drain(s.reason)),
        ),
        lease=labels.get(wk.LABEL_LEASE, ""),
        has_slurmd_pod=has_pod,
        cordoned=entry.cordoned,
        slurm_reservation=reservation,
        jobs=jobs,
        busy_until=busy_until or 0.0,
        planned=bool(s and s.planned),
        sickness=sickness_of(
            drain=bool(s and s.drain),
            reason=s.reason if s else "",
            tainted=any(t[0] == wk.TAINT_UNHEALTHY for t in entry.taints),
        ),
        escalated=bool(labels.get(domain)) and labels.get(domain) in escalated,
    )


def running_jobs_by_node(
    listed: Iterable[Job],
) -> tuple[dict[str, tuple[RunningJob, ...]], dict[str, float]]:
    """Each node's running jobs, and when the last of their time limits ends (0 when
    one has none: the node is never counted as ending soon)."""
    by_node: dict[str, list[RunningJob]] = {}
    ends: dict[str, float] = {}
    # SUSPENDED jobs hold their nodes too, and Slurm requeues them the same way.
    for job in listed:
        if job.pending:
            continue
        running = RunningJob(job.job_id, job.priority, job.requeueable)
        end = job.end_time.timestamp() if job.end_time and job.time_limit else 0.0
        for node in job.nodes:
            by_node.setdefault(node, []).append(running)
            known = ends.get(node, end)
            ends[node] = 0.0 if 0.0 in (end, known) else max(end, known)
    jobs = {node: tuple(sorted(js, key=lambda j: j.job_id)) for node, js in by_node.items()}
    return jobs, ends


def slurm_queue(listed: Iterable[Job]) -> tuple[PendingJob, ...]:
    """Pending jobs that wait only for nodes (Slurm's reasons Priority, Resources,
    None), in Slurm's order: priority, then job id. Held jobs, dependencies and jobs
    of a reservation or over a limit cannot use idle nodes soon."""
    waiting = [
        PendingJob(job.job_id, max(1, job.node_count), job.priority)
        for job in listed
        if job.pending and job.reason in WAITS_FOR_NODES and not job.reservation
    ]
    return tuple(sorted(waiting, key=lambda j: (-j.priority, j.job_id)))
