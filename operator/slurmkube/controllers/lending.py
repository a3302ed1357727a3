"""kopf wiring of the Kueue bridge: observe -> `plan_lending` -> apply, per SlurmCluster.

Any event on a Workload, an AdmissionCheck, a SlurmReservationCheck, a slurmd
pod or a Node change (not a heartbeat) wakes a loop that reconciles at once
(after `COALESCE_SECONDS` to gather a burst), and every `RESYNC_SECONDS` anyway
(leak collection, busyNodes grace and timeouts). A reconcile that added or removed
lease labels has the SlurmCluster reconciled at once too (`handlers.reconcile_now`). One
reconcile covers every AdmissionCheck whose controllerName is
`slurmkube.io/slurm-reservation`, grouped by the SlurmCluster its parameters
name. Only the leader reconciles (the operator's Lease, `handlers.State`).

Writes: the Slurm reservation (scontrol, `SlurmClients.scontrol`), the
`slurmkube.io/lease` label on Nodes, our entry of each Workload's
`status.admissionChecks` and the AdmissionCheck's `Active` condition, both by
server-side apply under our own field manager so Kueue's fields stay Kueue's.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import kopf
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from pydantic import ValidationError

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.api.models import NodeSet, SlurmCluster, SlurmReservationCheckSpec, from_object
from slurmkube.build.names import deployment_context
from slurmkube.controllers import handlers
from slurmkube.controllers.failpoints import Step, reached
from slurmkube.controllers.observe import FLEET
from slurmkube.kube.client import Kube, Manifest
from slurmkube.lending import (
    CheckState,
    CheckUpdate,
    Lend,
    LendingPlan,
    LendingPolicy,
    LendingWorld,
    NodeView,
    RequeuePolicy,
    ReservationView,
    RunningJob,
    fold_slurm_state,
    our_check,
    plan_lending,
    reservation_name,
    uid_of_reservation,
    workload_view,
)
from slurmkube.lending.model import WorkloadView
from slurmkube.plan.conditions import timestamp, transition_time
from slurmkube.slurm.errors import SlurmError, SlurmNotFound
from slurmkube.slurm.models import ReservationFlag, ReservationRequest
from slurmkube.slurm.rest import RestClient
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
    # Set by any event the plan may depend on; the loop reconciles as soon as it
    # is set (an asyncio.Event, not a flag polled every half second: each poll
    # interval was paid twice on the way to Ready, before the reservation and
    # after the slurmd pod left).
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    last: float = 0.0
    task: asyncio.Task[None] | None = None
    # Where Workloads and NodeSets are read: the operator's watched namespace
    # (its RBAC is a Role there), or None with --all-namespaces.
    namespace: str | None = None
    # Per Node: node_fingerprint of its last event, so heartbeats do not wake the loop.
    nodes: dict[str, int] = field(default_factory=dict)


BRIDGE = _Bridge()


async def _mark(**_: Any) -> None:
    BRIDGE.wake.set()


async def _node_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    """Lease labels, cordons, nodes coming and going; not heartbeats, which in a large
    fleet arrive many times a second and would keep the bridge reconciling."""
    if node_changed(BRIDGE.nodes, type, body, handlers.label_keys()):
        BRIDGE.wake.set()


kopf.on.event("kueue.x-k8s.io", "v1beta2", "workloads")(_mark)
kopf.on.event("kueue.x-k8s.io", "v1beta2", "admissionchecks")(_mark)
kopf.on.event(wk.GROUP, "v1alpha1", "slurmreservationchecks")(_mark)
kopf.on.event("", "v1", "nodes", id="lending-nodes")(_node_event)
# A slurmd pod leaving a leased node is the last step before Ready.
kopf.on.event("", "v1", "pods", labels={wk.LABEL_NAME: "slurmd"}, id="lending-pods")(_mark)


@kopf.on.startup()
async def start_bridge(**_: Any) -> None:
    BRIDGE.wake.set()  # the first reconcile finds what happened while the operator was away
    BRIDGE.task = asyncio.get_running_loop().create_task(_loop())


@kopf.on.cleanup()
async def stop_bridge(**_: Any) -> None:
    if BRIDGE.task is not None:
        BRIDGE.task.cancel()


async def _loop() -> None:
    while True:
        with contextlib.suppress(TimeoutError):
            # Woken by an event, or every RESYNC_SECONDS anyway (leaks, WaitForIdle timeouts).
            await asyncio.wait_for(BRIDGE.wake.wait(), RESYNC_SECONDS)
        if handlers.State.kube is None or not handlers.leading():
            await asyncio.sleep(0.5)  # still woken: reconciled once this replica leads
            continue
        await asyncio.sleep(COALESCE_SECONDS)
        BRIDGE.wake.clear()
        BRIDGE.last = time.monotonic()
        try:
            relabelled = await asyncio.to_thread(reconcile_bridge, handlers.State.kube)
        except Exception:
            log.exception("bridge reconcile failed")
            await asyncio.sleep(0.5)
            BRIDGE.wake.set()
            continue
        log.info("bridge reconciled seconds=%.3f", time.monotonic() - BRIDGE.last)
        for key in relabelled:
            # A lease label added or removed changes which nodes the cluster wants
            # slurmd on: reconcile it now rather than at its next 1 s tick, so the
            # slurmd pod leaves (or comes back) without that wait. Not awaited: a
            # long cluster reconcile must not hold up the bridge.
            asyncio.get_running_loop().create_task(_reconcile_cluster_now(key))


async def _reconcile_cluster_now(key: tuple[str, str]) -> None:
    try:
        await handlers.reconcile_now(key)
    except Exception:
        log.exception("cluster reconcile after a lease change failed cluster=%s/%s", *key)


# --- observe -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Check:
    name: str
    obj: Manifest
    cluster: tuple[str, str] | None
    policy: LendingPolicy | None
    problem: str = ""


def reconcile_bridge(kube: Kube) -> set[tuple[str, str]]:
    """One round over every check; returns the clusters whose lease labels it changed."""
    try:
        admission_checks = [
            ac
            for ac in kube.list(KUEUE, "AdmissionCheck", None)
            if (ac.get("spec") or {}).get("controllerName") == wk.CHECK_CONTROLLER
        ]
        raw_workloads = kube.list(KUEUE, "Workload", BRIDGE.namespace)
    except ResourceNotFoundError:
        return set()  # Kueue is not installed
    checks = [_check_of(kube, ac) for ac in admission_checks]
    valid = {c.name: c for c in checks if c.policy is not None and c.cluster is not None}
    views = _workloads(raw_workloads, valid)
    # Workloads holding nodes under any of our checks, valid or not: a check whose
    # parameters are being fixed must not cost a running workload its nodes.
    live = frozenset(
        w.uid for w in _workloads(raw_workloads, {c.name: c for c in checks}) if w.holds_nodes
    )
    raw_by_uid = {w["metadata"]["uid"]: w for w in raw_workloads}
    clusters = {c.cluster for c in valid.values() if c.cluster is not None}
    # Leases nobody holds on clusters no valid check names (a check deleted while
    # it lent): those clusters are reconciled with no policy, which releases them.
    clusters |= _clusters_with_leases(kube, live)
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
        )
        if changed:
            relabelled.add(key)
        for c in mine:
            active[c.name] = (ok, reason, message)
    for c in checks:
        _write_active(kube, c.obj, *active.get(c.name, (False, "Unknown", "not reconciled")))
    return relabelled


def _clusters_with_leases(kube: Kube, live: frozenset[str]) -> set[tuple[str, str]]:
    leased = [
        n
        for n in kube.list("v1", "Node", None, wk.LABEL_LEASE)
        if (n["metadata"].get("labels") or {}).get(wk.LABEL_LEASE) not in live
    ]
    if not leased:
        return set()
    found = set()
    for raw in kube.list(wk.API_VERSION, "NodeSet", BRIDGE.namespace):
        node_set = from_object(NodeSet, raw)
        if any(
            node_set.spec.node_selector.matches(n["metadata"].get("labels") or {}) for n in leased
        ):
            found.add(
                (wk.namespace_or_default(node_set.metadata.namespace), node_set.spec.cluster_ref)
            )
    return found


def _check_of(kube: Kube, ac: Manifest) -> _Check:
    name = ac["metadata"]["name"]
    ref = (ac.get("spec") or {}).get("parameters") or {}
    if ref.get("apiGroup") != wk.GROUP or ref.get("kind") != wk.CHECK_PARAMETERS_KIND:
        return _Check(
            name,
            ac,
            None,
            None,
            f"spec.parameters must reference a {wk.CHECK_PARAMETERS_KIND} of apiGroup {wk.GROUP}",
        )
    raw = kube.get(wk.API_VERSION, wk.CHECK_PARAMETERS_KIND, ref.get("name", ""), None)
    if raw is None:
        return _Check(
            name, ac, None, None, f"{wk.CHECK_PARAMETERS_KIND} {ref.get('name')!r} not found"
        )
    try:
        spec = SlurmReservationCheckSpec.model_validate(raw.get("spec") or {})
    except ValidationError as err:
        return _Check(name, ac, None, None, f"{wk.CHECK_PARAMETERS_KIND} spec: {err}")
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
    )
    return _Check(name, ac, (spec.cluster_ref.namespace, spec.cluster_ref.name), policy)


def _workloads(raw: Iterable[Manifest], checks: Mapping[str, _Check]) -> list[WorkloadView]:
    out = []
    for w in raw:
        check = our_check(w, checks.keys())
        if check is not None:
            out.append(workload_view(w, check))
    return out


@dataclass(frozen=True)
class _Cluster:
    obj: Manifest
    spec: SlurmCluster
    rest: RestClient | None


def _reconcile_cluster(
    kube: Kube,
    key: tuple[str, str],
    checks: Sequence[_Check],
    workloads: Sequence[WorkloadView],
    *,
    elsewhere: frozenset[str],
    raw_by_uid: Mapping[str, Manifest],
) -> tuple[tuple[bool, str, str], bool]:
    """The check's Active answer for this cluster, and whether lease labels changed."""
    namespace, name = key
    obj = kube.get(wk.API_VERSION, "SlurmCluster", name, namespace)
    if obj is None:
        return (False, "ClusterNotFound", f"SlurmCluster {namespace}/{name} not found"), False
    cluster = from_object(SlurmCluster, obj)
    writer = handlers.State.clients.scontrol(kube, cluster)
    rest = handlers.State.clients.rest(kube, cluster)
    policies = tuple(c.policy for c in checks if c.policy is not None)
    # Jobs are read only when a policy may requeue them: a deep queue makes /jobs/ costly.
    with_jobs = any(p.requeue is not None for p in policies)
    nodes, reservations, reachable, error = _observe_nodes(kube, cluster, rest, with_jobs)
    world = LendingWorld(
        checks=policies,
        workloads=tuple(workloads),
        nodes=nodes,
        reservations=reservations,
        slurm_reachable=reachable and writer is not None,
        now=time.time(),
        live_elsewhere=elsewhere,
    )
    plan = plan_lending(world)
    started = {r.name: r.start for r in reservations}
    relabelled = _apply(kube, _Cluster(obj, cluster, rest), plan, raw_by_uid, started)
    metrics.LENT_NODES.labels(namespace, name).set(plan.lent_nodes)
    metrics.WAITING_WORKLOADS.labels(namespace, name).set(len(plan.waiting))
    if not world.slurm_reachable:
        reason = error or "no slurmctld address or jwt.key yet"
        return (False, "SlurmUnreachable", reason), relabelled
    return (True, "Active", f"lending from SlurmCluster {namespace}/{name}"), relabelled


def _observe_nodes(
    kube: Kube, cluster: SlurmCluster, rest: RestClient | None, with_jobs: bool
) -> tuple[tuple[NodeView, ...], tuple[ReservationView, ...], bool, str]:
    namespace = wk.namespace_or_default(cluster.metadata.namespace)
    node_sets = [
        from_object(NodeSet, raw)
        for raw in kube.list(wk.API_VERSION, "NodeSet", namespace)
        if (raw.get("spec") or {}).get("clusterRef") == cluster.metadata.name
    ]
    selector = f"{wk.LABEL_CLUSTER}={cluster.metadata.name},{wk.LABEL_NAME}=slurmd"
    # A terminating slurmd pod still counts: the check turns Ready only once it is
    # gone. Ready at deletionTimestamp would be safe for the GPUs (kube-scheduler
    # counts a terminating pod's requests until it is deleted, and Slurm has the
    # node drained and reserved), but it would admit a workload whose pods then
    # sit Pending, with no message saying why, for as long as the termination
    # hangs (a NotReady node keeps its pods Terminating until pod GC). On the
    # local runtime terminating -> gone measured 0.06 s (bench/bridge_live.py),
    # so waiting costs nothing measurable there.
    with_pod = {
        (p["metadata"].get("labels") or {}).get(wk.LABEL_NODE, "")
        for p in kube.list("v1", "Pod", namespace, selector)
    }
    slurm_nodes: dict[str, Any] = {}
    reservations: tuple[ReservationView, ...] = ()
    held: dict[str, str] = {}
    jobs: dict[str, tuple[RunningJob, ...]] = {}
    error = "" if rest is not None else "slurmrestd is disabled or its key is missing"
    if rest is not None:
        try:
            slurm_nodes = {n.name: n for n in rest.list_nodes()}
            all_reservations = rest.list_reservations()
            if with_jobs:
                jobs = _running_jobs_by_node(rest)
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
    views = []
    for raw in kube.iter_items("v1", "Node", None):
        meta = raw["metadata"]
        labels = meta.get("labels") or {}
        node_set = next((ns for ns in node_sets if ns.spec.node_selector.matches(labels)), None)
        fleet = FLEET.convert(raw)
        if node_set is None or fleet is None:
            continue
        s = slurm_nodes.get(meta["name"])
        views.append(
            NodeView(
                name=meta["name"],
                node_set=node_set.metadata.name,
                block=labels.get(domain) or f"node/{meta['name']}",
                gpus=fleet.gpus,
                slurm=fold_slurm_state(
                    has_slurmd_pod=meta["name"] in with_pod,
                    known=s is not None,
                    busy=bool(s and s.busy),
                    responding=bool(s and s.responding),
                    drain=bool(s and s.drain),
                    drained_by_us=bool(s and s.drained_by_us),
                ),
                lease=labels.get(wk.LABEL_LEASE, ""),
                has_slurmd_pod=meta["name"] in with_pod,
                cordoned=bool((raw.get("spec") or {}).get("unschedulable")),
                slurm_reservation=held.get(meta["name"], ""),
                jobs=jobs.get(meta["name"], ()),
            )
        )
    return tuple(views), reservations, rest is not None and not error, error


def _running_jobs_by_node(rest: RestClient) -> dict[str, tuple[RunningJob, ...]]:
    by_node: dict[str, list[RunningJob]] = {}
    # SUSPENDED jobs hold their nodes too, and Slurm requeues them the same way.
    for job in rest.list_jobs(states=("RUNNING", "SUSPENDED")):
        running = RunningJob(job.job_id, job.priority, job.requeueable)
        for node in job.nodes:
            by_node.setdefault(node, []).append(running)
    return {node: tuple(sorted(js, key=lambda j: j.job_id)) for node, js in by_node.items()}


# --- apply -------------------------------------------------------------------------------


def _apply(
    kube: Kube,
    cluster: _Cluster,
    plan: LendingPlan,
    raw_by_uid: Mapping[str, Manifest],
    reserved_at: Mapping[str, float],
) -> bool:
    """Apply the plan; True if a lease label was set or removed."""
    name = cluster.obj["metadata"]["name"]
    relabelled = False
    for release in plan.releases:
        for node in release.unlabel:
            kube.set_node_label(node, wk.LABEL_LEASE, None)
            reached(Step.LEASE_UNLABELLED)
            relabelled = True
        if release.delete_reservation and cluster.rest is not None:
            try:
                cluster.rest.delete_reservation(release.delete_reservation)
                reached(Step.RESERVATION_DELETED)
            except SlurmNotFound:
                pass
            except SlurmError as err:
                log.warning(
                    "reservation delete failed name=%s error=%s", release.delete_reservation, err
                )
                continue
        undone = bool(release.unlabel or release.delete_reservation)
        if release.orphan and undone:
            metrics.LEAKS_COLLECTED.labels(cluster.obj["metadata"]["namespace"], name).inc()
            kube.event(
                cluster.obj,
                "LeaseCollected",
                f"no Workload {release.uid}: removed lease from {list(release.unlabel)}, "
                f"reservation {release.delete_reservation or '-'}",
                warning=True,
            )
        elif undone and release.uid in raw_by_uid:
            kube.event(
                raw_by_uid[release.uid],
                "NodesReturned",
                f"returned {list(release.unlabel)} to Slurm "
                f"(reservation {release.delete_reservation or '-'} deleted)",
            )
        if undone:
            log.info("lease released uid=%s nodes=%s", release.uid, ",".join(release.unlabel))
        if release.check is not None:
            _write_check(kube, raw_by_uid.get(release.uid), release.check)
    user = deployment_context(cluster.spec).slurm_user
    for lend in plan.lends:
        raw = raw_by_uid.get(lend.uid)
        check = lend.check
        if lend.create is not None:
            if cluster.rest is None:
                continue
            try:
                cluster.rest.create_reservation(
                    ReservationRequest(
                        name=lend.create.name,
                        nodes=lend.create.nodes,
                        users=(user,),
                        flags=frozenset(ReservationFlag(f) for f in lend.create.flags),
                    )
                )
            except SlurmError as err:
                log.warning("reservation create failed name=%s error=%s", lend.create.name, err)
                if check is not None:
                    _write_check(
                        kube,
                        raw,
                        CheckUpdate(
                            check.namespace,
                            check.workload,
                            check.check,
                            CheckState.RETRY,
                            f"Slurm refused reservation {lend.create.name}: {err}",
                            requeue_after_seconds=30,
                        ),
                    )
                continue
            if raw is not None:
                kube.event(raw, "NodesReserved", f"reservation {lend.create.name}: {lend.placed}")
            log.info(
                "reservation created name=%s nodes=%s",
                lend.create.name,
                ",".join(lend.create.nodes),
            )
            reached(Step.RESERVATION_CREATED)
        failed = _requeue_jobs(kube, cluster, lend, raw)
        if failed and check is not None:
            check = replace(check, message=f"{check.message}; {failed}")
        for node in lend.label:
            kube.set_node_label(node, wk.LABEL_LEASE, lend.uid)
            reached(Step.LEASE_LABELLED)
            relabelled = True
        if check is not None:
            written = _write_check(kube, raw, check)
            if lend.waiting:
                reached(Step.WAITING_FOR_IDLE)
            if written and check.state is CheckState.READY and raw is not None:
                kube.event(raw, "NodesLent", check.message)
                seconds = _since_quota_reserved(raw)
                if seconds is not None:
                    metrics.LEND_SECONDS.labels(check.check).observe(seconds)
                since = reserved_at.get(reservation_name(lend.uid))
                if since:
                    metrics.DRAIN_WAIT_SECONDS.labels(check.check).observe(
                        max(0.0, time.time() - since)
                    )
                log.info("check ready workload=%s/%s", check.namespace, check.workload)
                reached(Step.CHECK_READY)
    return relabelled


def _requeue_jobs(kube: Kube, cluster: _Cluster, lend: Lend, raw: Manifest | None) -> str:
    """`scontrol requeue` each job the plan names; what failed, for the check message."""
    if not lend.requeue or cluster.rest is None:
        return ""
    name = cluster.obj["metadata"]["name"]
    check = lend.check.check if lend.check is not None else ""
    failures = []
    for job in lend.requeue:
        try:
            cluster.rest.requeue_job(job.job_id)
        except SlurmNotFound:
            continue  # ended on its own meanwhile: the node is freed all the same
        except SlurmError as err:
            log.warning("job requeue failed job=%s uid=%s error=%s", job.job_id, lend.uid, err)
            failures.append(f"Slurm refused to requeue job {job.job_id}: {err}")
            if raw is not None:
                kube.event(raw, "SlurmJobRequeueFailed", failures[-1], warning=True)
            continue
        metrics.JOBS_REQUEUED.labels(cluster.obj["metadata"]["namespace"], name, check).inc()
        log.info("job requeued job=%s priority=%s uid=%s", job.job_id, job.priority, lend.uid)
        if raw is not None:
            kube.event(raw, "SlurmJobRequeued", job.reason)
    return "; ".join(failures)


def _now() -> str:
    return timestamp(dt.datetime.now(dt.UTC))


def _write_check(kube: Kube, raw: Manifest | None, update: CheckUpdate) -> bool:
    """Our entry of status.admissionChecks, by server-side apply; False if unchanged."""
    if raw is None:
        return False
    entries = (raw.get("status") or {}).get("admissionChecks") or []
    current: Manifest = next((e for e in entries if e.get("name") == update.check), {})
    pod_set_updates = [dict(u) for u in update.pod_set_updates]
    if (
        current.get("state") == update.state.value
        and current.get("message") == update.message[:32768]
        and (current.get("podSetUpdates") or []) == pod_set_updates
    ):
        return False
    entry: dict[str, Any] = {
        "name": update.check,
        "state": update.state.value,
        "message": update.message[:32768],
        # Kueue's entries carry a state, not a status: the same rule on it.
        "lastTransitionTime": transition_time(
            {
                "status": current.get("state"),
                "lastTransitionTime": current.get("lastTransitionTime"),
            },
            update.state.value,
            _now(),
        ),
    }
    if pod_set_updates:
        entry["podSetUpdates"] = pod_set_updates
    if update.requeue_after_seconds is not None:
        entry["requeueAfterSeconds"] = update.requeue_after_seconds
    kube.apply_status(
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {"name": update.workload, "namespace": update.namespace},
            "status": {"admissionChecks": [entry]},
        },
        FIELD_MANAGER,
    )
    metrics.CHECK_ANSWERS.labels(update.check, update.state.value).inc()
    if update.state in (CheckState.RETRY, CheckState.REJECTED):
        kube.event(raw, f"Check{update.state.value}", update.message, warning=True)
    return True


def _since_quota_reserved(raw: Manifest) -> float | None:
    for c in (raw.get("status") or {}).get("conditions") or []:
        if c.get("type") == "QuotaReserved" and c.get("status") == "True":
            at = dt.datetime.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")
            return max(0.0, time.time() - at.replace(tzinfo=dt.UTC).timestamp())
    return None


def _write_active(kube: Kube, ac: Manifest, ok: bool, reason: str, message: str) -> None:
    """The AdmissionCheck's Active condition (Kueue admits nothing through an inactive one)."""
    name = ac["metadata"]["name"]
    conditions = (ac.get("status") or {}).get("conditions") or []
    current: Manifest = next((c for c in conditions if c.get("type") == "Active"), {})
    status = "True" if ok else "False"
    if current.get("status") == status and current.get("message") == message[:32768]:
        return
    kube.apply_status(
        {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": name},
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": status,
                        "reason": reason,
                        "message": message[:32768],
                        "lastTransitionTime": transition_time(current, status, _now()),
                        "observedGeneration": ac["metadata"].get("generation"),
                    }
                ]
            },
        },
        FIELD_MANAGER,
    )
    log.info("admission check active check=%s active=%s reason=%s", name, ok, reason)
