"""kopf wiring of the AllocationSource controller: read the source -> ledger -> gates -> apply.

One work queue keyed by AllocationSource (namespace, name). A spec change
(a new generation) adds the key at once; each sync asks to come back after
`GATE_SECONDS`, the reaction time of the admission gates; an `http` source is
asked again only every `spec.http.pollSeconds` (with its ETag). Only the
leader syncs (`memory.leading`).

A sync: read the teams (`policy_sources`); a source that cannot be read or
does not compile changes nothing (conditions say why). Else observe what
each scheduler runs for each team (Slurm jobs by account through slurmrestd,
Kueue Workloads by namespace from the bridge's watch), accrue the ledger,
plan the gates, write Slurm (`sacctmgr` through the JWT, `policy_apply`) and
Kueue (server-side apply, stale objects deleted by label, the tier label of
pending Workloads' jobs), then status,
Events at budget thresholds and drift, and metrics. The ledger lives in
memory and is seeded from the status's period usage after a restart.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.api.allocation_source import AllocationSource
from slurmkube.api.models import SlurmCluster, from_object
from slurmkube.controllers import caches, handlers, lending
from slurmkube.controllers.memory import State, leading
from slurmkube.controllers.policy_apply import (
    emit,
    label_tiers,
    priority_class_values,
    sync_kueue,
    sync_slurm,
    write_status,
)
from slurmkube.controllers.policy_directory import DirectoryReader
from slurmkube.controllers.policy_sources import Fetched, SourceError, SourceReader
from slurmkube.controllers.queue import Key, Result, WorkQueue
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.policy import PolicyError, compile_kueue, compile_slurm, plan_all_gates
from slurmkube.plan.policy.held import plan_hold_comments
from slurmkube.plan.policy.kueue import source_label
from slurmkube.plan.policy.ledger import BudgetLevel, Observation
from slurmkube.plan.policy.model import Policy
from slurmkube.plan.policy.slurm import SlurmEntity
from slurmkube.plan.policy.slurm_diff import SlurmChange
from slurmkube.plan.policy.sources import load_allocation_source, policy_from_source
from slurmkube.plan.policy.sync import SyncOutcome, policy_events
from slurmkube.plan.policy.tiers import plan_policy_tier_labels
from slurmkube.plan.policy.usage import (
    JobUse,
    Ledgers,
    advance_ledgers,
    ledgers_from_status,
    observe_teams,
    slurm_gpu_seconds,
    teams_status,
)
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.rest import RestClient

log = logging.getLogger(__name__)
GROUP, VERSION = wk.GROUP, "v1alpha1"
# How often the gates follow usage: the policy's reaction time.
GATE_SECONDS = 10.0
# A gap longer than this (the operator was down) accrues no usage: nobody saw it.
MAX_ACCRUE_SECONDS = 300.0


@dataclass
class _Source:
    """What the controller remembers of one AllocationSource between syncs."""

    generation: int | None = None
    fetched: Fetched | None = None
    fetched_at: float = 0.0
    last_applied: tuple[SlurmEntity, ...] | None = None
    ledgers: Ledgers = field(default_factory=lambda: Ledgers({}, {}))
    levels: dict[str, BudgetLevel] = field(default_factory=dict)
    accrued_at: float | None = None
    cluster_keys: tuple[object, ...] | None = None
    # The last policy compiled (the goodput exporter's team weights).
    policy: Policy | None = None


SOURCES: dict[Key, _Source] = {}
READER = SourceReader()
DIRECTORY = DirectoryReader()
TASKS: list[asyncio.Task[None]] = []


async def _reconcile_key(key: Key) -> Result:
    kube = State.kube
    if kube is None:
        return Result(requeue_after=1.0)
    workloads = _workloads_now()
    requeue, cluster = await asyncio.to_thread(sync_source, kube, key, workloads)
    if cluster is not None:
        # The policy's slurm.conf keys changed: render the cluster's config now.
        await handlers.reconcile_now(cluster)
    return Result(requeue_after=requeue)


QUEUE: WorkQueue[Key] = WorkQueue(_reconcile_key, name="allocationsources")


def _workloads_now() -> tuple[Manifest, ...] | None:
    """The Workload cache, copied on the event loop (None before kopf fills it)."""
    if caches.CACHES.workloads is None:
        return None
    return caches.workloads_now()


@kopf.on.event(GROUP, VERSION, "allocationsources")
def source_event(
    type: str | None, namespace: str | None, name: str, meta: kopf.Meta, **_: Any
) -> None:
    key = (wk.namespace_or_default(namespace), name)
    if type == "DELETED":
        QUEUE.forget(key)
        SOURCES.pop(key, None)
        READER.forget(key)
        DIRECTORY.forget(key)
        return
    memory = SOURCES.setdefault(key, _Source())
    # Our own status writes are events too; only a new spec (or the first sight) counts.
    generation = meta.get("generation")
    if memory.generation != generation:
        memory.generation = generation
        memory.fetched = None
        QUEUE.add(key)


@kopf.on.delete(GROUP, VERSION, "allocationsources")
def source_deleted(namespace: str | None, name: str, **_: Any) -> None:
    """Its Kueue objects go (cluster-scoped queues cannot be owned by it); Slurm's
    accounts stay: they hold the teams' usage history."""
    kube = State.kube
    if kube is not None:
        sync_kueue(kube, [], source_label(wk.namespace_or_default(namespace), name))


@kopf.on.startup()
async def start_policy(**_: Any) -> None:
    TASKS.append(asyncio.get_running_loop().create_task(QUEUE.run(leading)))


@kopf.on.cleanup()
async def stop_policy(**_: Any) -> None:
    for task in TASKS:
        task.cancel()


def _read(kube: Kube, source: AllocationSource, memory: _Source, now: float) -> Fetched:
    http = source.spec.http
    due = http is None or now - memory.fetched_at >= http.poll_seconds
    if memory.fetched is None or due:
        memory.fetched = READER.read(kube, source)
        memory.fetched_at = now
    return memory.fetched


def _target(kube: Kube, obj: Manifest, source: AllocationSource) -> tuple[SlurmCluster | None, str]:
    """The SlurmCluster to write, or why none is written."""
    ref, namespace = source.spec.cluster_ref, obj["metadata"]["namespace"]
    if ref is None:
        return None, "no spec.clusterRef"
    raw = kube.get(wk.API_VERSION, "SlurmCluster", ref, namespace)
    if raw is None:
        return None, f"spec.clusterRef: SlurmCluster {namespace}/{ref} not found"
    cluster = from_object(SlurmCluster, raw)
    if not cluster.spec.accounting.enabled:
        return None, f"spec.clusterRef: SlurmCluster {ref} has no accounting (spec.accounting)"
    for other in sorted(
        kube.list(wk.API_VERSION, "AllocationSource", namespace),
        key=lambda o: str(o["metadata"]["name"]),
    ):
        if (other.get("spec") or {}).get("clusterRef") == ref:
            mine = other["metadata"]["name"] == source.metadata.name
            if not mine:
                return None, (
                    f"spec.clusterRef: SlurmCluster {ref} already takes its policy from "
                    f"AllocationSource {other['metadata']['name']}"
                )
            break
    return cluster, ""


def _jobs(rest: RestClient | None) -> list[JobUse] | None:
    if rest is None:
        return None
    try:
        jobs = rest.list_jobs()
    except SlurmError as err:
        log.info("policy slurm jobs not read error=%s", err)
        return None
    return [
        JobUse(
            j.account,
            "RUNNING" in j.state,
            j.gpus_allocated or max(j.gpus_per_node * j.node_count, j.gpus_per_job),
            j.job_id,
            "PENDING" in j.state,
            j.admin_comment,
            None if j.start_time is None else j.start_time.timestamp(),
            None if j.end_time is None else j.end_time.timestamp(),
        )
        for j in jobs
    ]


def _comment_held(rest: RestClient, comments: list[tuple[int, str]]) -> None:
    """Best effort: a job that ended meanwhile, or a refusal, is logged; the
    next sync plans again from what Slurm shows."""
    for job_id, text in comments:
        try:
            rest.set_admin_comment(job_id, text)
        except SlurmError as err:
            log.info("policy job comment not set job=%s error=%s", job_id, err)


def _accrue(
    memory: _Source,
    policy: Policy,
    obs: dict[str, Observation],
    jobs: list[JobUse] | None,
    now: float,
) -> None:
    elapsed = 0.0 if memory.accrued_at is None else min(now - memory.accrued_at, MAX_ACCRUE_SECONDS)
    memory.accrued_at = now
    wall = dt.datetime.now(dt.UTC)
    until = wall.timestamp()
    slurm_used = None if jobs is None else slurm_gpu_seconds(jobs, until - elapsed, until)
    memory.ledgers = advance_ledgers(
        policy, memory.ledgers, obs, elapsed, wall, slurm_used=slurm_used
    )


def _seed(memory: _Source, obj: Manifest) -> None:
    """After a restart: the period usage the status last reported."""
    if memory.ledgers.usage:
        return
    usage, levels = ledgers_from_status((obj.get("status") or {}).get("allocations") or [])
    memory.ledgers = Ledgers(usage, {})
    memory.levels = levels


def sync_source(
    kube: Kube, key: Key, workloads: tuple[Manifest, ...] | None
) -> tuple[float | None, Key | None]:
    """One sync; (when to come back, a SlurmCluster to reconcile now or None)."""
    namespace, name = key
    obj = kube.get(wk.API_VERSION, "AllocationSource", name, namespace)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None, None
    memory = SOURCES.setdefault(key, _Source())
    _seed(memory, obj)
    now = time.monotonic()
    try:
        source = load_allocation_source(obj, f"{namespace}/{name}")
        fetched = _read(kube, source, memory, now)
        policy = policy_from_source(
            source, DIRECTORY.with_groups(kube, key, source, fetched.teams, now)
        )
    except (SourceError, PolicyError) as err:
        reason = err.reason if isinstance(err, SourceError) else "InvalidAllocations"
        write_status(kube, obj, SyncOutcome(source_error=(reason, str(err))), None, None)
        metrics.POLICY_SYNCS.labels(namespace, name, "source_error").inc()
        log.info("policy source error source=%s/%s reason=%s", namespace, name, reason)
        return GATE_SECONDS, None
    memory.policy = policy
    cluster, skipped = _target(kube, obj, source)
    if workloads is None:
        workloads = tuple(lending_workloads(kube))
    rest = None if cluster is None else State.clients.rest(kube, cluster)
    jobs = _jobs(rest)
    observations = observe_teams(policy, jobs, workloads)
    _accrue(memory, policy, observations, jobs, now)
    gates = plan_all_gates(policy, observations, dict(memory.ledgers.usage))
    if rest is not None and jobs is not None:
        _comment_held(rest, plan_hold_comments(gates, jobs))
    changes: tuple[SlurmChange, ...] = ()
    slurm_error = ""
    if cluster is not None:
        client = State.clients.sacctmgr(kube, cluster)
        if client is None:
            slurm_error = "slurmdbd not reachable yet (its pod address or jwt.key)"
        else:
            desired = compile_slurm(policy, {t: g.slurm for t, g in gates.items()}).entities
            changes, slurm_error = sync_slurm(client, desired, memory.last_applied)
            if not slurm_error:
                memory.last_applied = desired
    # Tiers before quotas: a pending workload takes its tier before a quota
    # raised in this sync can admit it.
    values = priority_class_values(kube)
    tier_error = label_tiers(kube, plan_policy_tier_labels(policy, gates, values, workloads))
    kueue_error = sync_kueue(
        kube,
        compile_kueue(policy, {t: g.kueue for t, g in gates.items()}),
        source_label(namespace, name),
    )
    kueue_error = kueue_error or tier_error
    teams = teams_status(policy, observations, memory.ledgers.usage, gates)
    outcome = SyncOutcome(
        slurm_error=slurm_error,
        kueue_error=kueue_error,
        slurm_skipped=skipped,
        teams=len(policy.teams),
    )
    write_status(kube, obj, outcome, teams, memory.fetched.etag if memory.fetched else None)
    emit(kube, obj, policy_events(memory.levels, gates, changes))
    memory.levels = {t: g.level for t, g in gates.items()}
    _record(namespace, name, teams, changes, bool(slurm_error or kueue_error))
    keys = (source.spec.cluster_ref, source.spec.half_life_hours)
    ref = None
    if memory.cluster_keys != keys and source.spec.cluster_ref is not None:
        ref = (namespace, source.spec.cluster_ref)
    memory.cluster_keys = keys
    log.info(
        "policy synced source=%s/%s teams=%d slurm_changes=%d errors=%s",
        namespace,
        name,
        len(policy.teams),
        len(changes),
        bool(slurm_error or kueue_error),
    )
    return GATE_SECONDS, ref


def lending_workloads(kube: Kube) -> list[Manifest]:
    """Workloads when the bridge's watch has not handed its cache over yet."""
    try:
        return kube.list(lending.KUEUE, "Workload", None)
    except ResourceNotFoundError:
        return []


def _record(
    namespace: str,
    name: str,
    teams: list[dict[str, Any]],
    changes: tuple[SlurmChange, ...],
    failed: bool,
) -> None:
    result = "apply_error" if failed else ("applied" if changes else "unchanged")
    metrics.POLICY_SYNCS.labels(namespace, name, result).inc()
    drift = sum(c.drift for c in changes)
    if drift:
        metrics.POLICY_DRIFT.labels(namespace, name).inc(drift)
    for team in teams:
        gauge = metrics.POLICY_TEAM_GPUS
        labels = (namespace, name, team["name"])
        gauge.labels(*labels, "quota").set(team["gpus"])
        gauge.labels(*labels, "slurm").set(team["usage"]["slurmGPUs"])
        gauge.labels(*labels, "kueue").set(team["usage"]["kueueGPUs"])
        gauge.labels(*labels, "headroom").set(team["headroom"])
        entitled = team["gpuHours"]
        used = team["usage"]["periodGPUHours"] / entitled if entitled else 0.0
        metrics.POLICY_BUDGET_USED.labels(*labels).set(used)
