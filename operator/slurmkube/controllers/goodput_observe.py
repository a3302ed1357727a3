"""What the live goodput exporter reads of one SlurmCluster, as `goodput.live` views.

Slurm's jobs (every state: a finished job stays listed for MinJobAge and
carries its end time) and nodes, from the cluster's slurmrestd client, which
reads both only when slurmctld changed them; the Nodes (readiness, NVLink
domain label, the bridge's lease label) and the Kueue Workloads under one of
the bridge's checks that lends from this cluster, from the operator's
caches. Nothing here lists or writes anything.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.controllers.observe import NodeEntry
from slurmkube.goodput import Health, Side
from slurmkube.goodput.handovers import Handover, LeaseTimes, latest, transfer_times
from slurmkube.goodput.live import KUEUE_KEY, LiveGang, LiveNode, LiveSnapshot
from slurmkube.kube.client import Manifest
from slurmkube.lending import our_check, workload_view
from slurmkube.slurm.models import Job, Node

# squeue(1) JOB STATE CODES: a job in one of these holds its nodes; one in
# FINISHED has ended (its end_time says when).
HOLDING = frozenset({"RUNNING", "SUSPENDED", "STOPPED"})
FINISHED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
JOB_STATES = HOLDING | FINISHED | {"PENDING", "REQUEUED", "RESIZING", "CONFIGURING", "COMPLETING"}
NO_ACCOUNT = "default"
NO_LEASE = LeaseTimes()

LendingView = Callable[..., tuple[Health, Side, Side | None]]


@dataclass(frozen=True, slots=True)
class FleetInputs:
    """One cluster's observed state, read on the exporter's tick."""

    slurm_nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    nodes: Mapping[str, NodeEntry]  # the Node cache
    workloads: tuple[Manifest, ...]  # the Workload cache
    checks: frozenset[str]  # the bridge's AdmissionChecks lending from this cluster
    domain_label: str
    namespace_teams: Mapping[str, str]  # the allocation policy's namespaces -> team
    # node -> its latest handover of each kind (controllers/handovers.py)
    handovers: Mapping[str, Mapping[str, Handover]] = field(default_factory=dict)


def _epoch(at: dt.datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def _kube_time(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def slurm_gang(job: Job, now: float) -> LiveGang:
    members = max(job.node_count, len(job.nodes), 1)
    submitted = _epoch(job.submit_time) or now
    started = ended = None
    if job.state & FINISHED:
        ended = _epoch(job.end_time) or now
        started = _epoch(job.start_time) if job.nodes else None
    elif job.state & HOLDING:
        started = _epoch(job.start_time) or now
    return LiveGang(
        key=f"slurm/{job.job_id}",
        team=job.account or NO_ACCOUNT,
        side=Side.SLURM,
        members=members,
        gpus_per_member=job.gpus_requested // members,
        submitted=submitted,
        started=started,
        nodes=job.nodes if started is not None else (),
        ended=ended,
    )


def _conditions(raw: Manifest) -> dict[str, float | None]:
    """Conditions that are True, with when they became so."""
    found = (raw.get("status") or {}).get("conditions") or []
    return {
        str(c.get("type")): _kube_time(c.get("lastTransitionTime"))
        for c in found
        if c.get("status") == "True"
    }


def kueue_gang(
    raw: Manifest, check: str, team: str, lent: Iterable[tuple[str, int]], now: float
) -> LiveGang | None:
    """A Workload under our check as one gang; None when it asks for no GPUs. Pods of
    different sizes become one-GPU members (the gang's GPUs are what counts)."""
    view = workload_view(raw, check)
    pod_sets = [p for p in view.pod_sets if p.gpus_per_pod > 0]
    if not pod_sets:
        return None
    sizes = {p.gpus_per_pod for p in pod_sets}
    per = sizes.pop() if len(sizes) == 1 else 1
    members = sum(p.count * p.gpus_per_pod for p in pod_sets) // per
    conditions = _conditions(raw)
    created = _kube_time(raw["metadata"].get("creationTimestamp")) or now
    admitted = "Admitted" in conditions and not view.evicted
    started = (conditions["Admitted"] or now) if admitted else None
    ended = (conditions["Finished"] or now) if view.finished else None
    return LiveGang(
        key=f"{KUEUE_KEY}{view.uid}",
        team=team,
        side=Side.KUBERNETES,
        members=members,
        gpus_per_member=per,
        submitted=created,
        started=started,
        nodes=_spread(members, per, lent) if started is not None else (),
        ended=ended,
        single_domain=any(p.single_block for p in pod_sets),
    )


def _spread(members: int, per: int, lent: Iterable[tuple[str, int]]) -> tuple[str, ...]:
    """Members over the lent nodes, each filled in name order (the pods' nodes are not
    watched: the bridge sized its lend to hold them)."""
    out: list[str] = []
    for name, gpus in sorted(lent):
        out += [name] * min(gpus // per, members - len(out))
    return tuple(out)


def slurm_health(node: Node) -> Health:
    if not node.responding and "POWERED_DOWN" not in node.state:
        return Health.DOWN
    return Health.DRAINED if node.drain else Health.UP


def snapshot(inputs: FleetInputs, lending_view: LendingView, now: float) -> LiveSnapshot:
    gangs = [slurm_gang(job, now) for job in inputs.jobs]
    leases: dict[str, list[tuple[str, int]]] = {}
    for name, entry in inputs.nodes.items():
        uid = entry.labels.get(wk.LABEL_LEASE)
        if uid and entry.fleet is not None:
            leases.setdefault(uid, []).append((name, entry.fleet.gpus))
    admitted = set()
    times: dict[str, LeaseTimes] = {}
    for raw in inputs.workloads:
        check = our_check(raw, inputs.checks)
        if check is None:
            continue
        meta = raw["metadata"]
        team = inputs.namespace_teams.get(meta.get("namespace", ""), meta.get("namespace", ""))
        uid = str(meta["uid"])
        gang = kueue_gang(raw, check, team, leases.get(uid, ()), now)
        if gang is not None:
            gangs.append(gang)
            times[uid] = LeaseTimes(gang.started, gang.ended)
            if gang.started is not None and gang.ended is None:
                admitted.add(uid)
    nodes = _nodes(inputs, lending_view, admitted, times)
    return LiveSnapshot(now, tuple(nodes), tuple(gangs))


def _nodes(
    inputs: FleetInputs,
    lending_view: LendingView,
    admitted: set[str],
    leases: Mapping[str, LeaseTimes],
) -> Iterable[LiveNode]:
    for node in inputs.slurm_nodes:
        entry = inputs.nodes.get(node.name)
        labels: Mapping[str, Any] = entry.labels if entry is not None else {}
        lease = str(labels.get(wk.LABEL_LEASE, ""))
        if "POWERED_DOWN" in node.state and not lease:
            continue  # not deployed (autoscaling): no GPUs in the fleet
        fleet = entry.fleet if entry is not None else None
        slurm = slurm_health(node)
        health, owner, moving = lending_view(
            node.name,
            lent=bool(lease),
            admitted=lease in admitted,
            slurm=slurm,
            ready=fleet.ready if fleet is not None else True,
        )
        stamps = inputs.handovers.get(node.name, {})
        last = latest(stamps)
        lent_to = lease or (last.lease if last is not None else "")
        moved_at, settled_at = transfer_times(stamps, owner, moving, leases.get(lent_to, NO_LEASE))
        yield LiveNode(
            node.name,
            node.gpus or (fleet.gpus if fleet is not None else 0),
            health,
            owner,
            moving,
            domain=str(labels.get(inputs.domain_label, "")),
            transferable=bool(inputs.checks),
            moved_at=moved_at,
            settled_at=settled_at,
            health_since=_slurm_since(node, health, slurm),
        )


def _slurm_since(node: Node, health: Health, slurm: Health) -> float | None:
    """When Slurm last changed the node's health, if that is its health now (`slurm`:
    Slurm's view); slurmdbd records the same second. A drain or DOWN began at its
    reason's time; an idle node back in service was resumed at its `last_busy`, which
    a resume sets (and so does a job ending: the translator takes it only if it falls
    after its last tick). None when Slurm cannot say (busy, or down in Kubernetes only)."""
    if health is not slurm:
        return None
    if health is Health.UP:
        return float(node.last_busy) if node.last_busy and not node.busy else None
    return float(node.reason_changed_at) if node.reason_changed_at else None
