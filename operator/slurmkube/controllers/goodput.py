"""kopf wiring of the live goodput exporter: observe -> `goodput.live` -> ledger -> metrics.

One key per SlurmCluster in its own work queue, coming back every
`Settings.goodput_seconds` (15 s); only the leader ticks. A tick reads the
cluster's Slurm nodes and jobs through its slurmrestd client (each read only
when slurmctld changed something since the client's last read: no list grows
with the tick rate), the Node and Workload caches, the bridge's last checks
and the allocation policy's teams; `LiveTranslator` turns what changed into
the ledger's events, the cluster's `LiveLedger` (the simulator's ledger) is
brought up to the tick, and `metrics.goodput` publishes it. The ledger lives
in memory: a new leader starts counting afresh (Prometheus sees a counter
reset).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster, from_object
from slurmkube.controllers import caches, handovers, lending, policy
from slurmkube.controllers.goodput_observe import JOB_STATES, FleetInputs, snapshot
from slurmkube.controllers.memory import State, leading
from slurmkube.controllers.observe import NodeEntry
from slurmkube.controllers.queue import Key, Result, WorkQueue
from slurmkube.goodput import DEFAULT_HALF_LIFE_S
from slurmkube.goodput.live import LiveTranslator
from slurmkube.goodput.live_ledger import LiveLedger
from slurmkube.kube.client import Kube, Manifest
from slurmkube.metrics import goodput as metrics
from slurmkube.slurm.errors import SlurmError

log = logging.getLogger(__name__)
# Slurm reports submit, start and end times in whole seconds, rounded down. A tick
# counts up to this far behind its clock, so a change its read just missed, seen
# by the next tick with a time up to a second before this one, still goes in at
# its own time, not the next tick's ("never back in time", goodput/live.py).
SLURM_TIME_RESOLUTION_S = 1.0


@dataclass
class _Fleet:
    """One cluster's translator and ledger, and the sums last published."""

    translator: LiveTranslator
    ledger: LiveLedger
    lends: bool  # a bridge check lends from the cluster: its nodes are transferable
    published: dict[str, float] = field(default_factory=dict)


@dataclass
class _Exporter:
    clusters: dict[Key, Manifest] = field(default_factory=dict)
    fleets: dict[Key, _Fleet] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


EXPORTER = _Exporter()


async def _tick(key: Key) -> Result:
    kube = State.kube
    if kube is None or not caches.ready():
        return Result(requeue_after=1.0)
    raw = EXPORTER.clusters.get(key)
    if raw is None:
        return Result()
    nodes, workloads = caches.nodes_now(), caches.workloads_now()
    lenders = dict(lending.BRIDGE.lenders)
    await asyncio.to_thread(
        lambda: export_cluster(
            kube,
            key,
            raw,
            nodes=nodes,
            workloads=workloads,
            lenders=lenders,
            now=time.time() - SLURM_TIME_RESOLUTION_S,
        )
    )
    return Result(requeue_after=State.settings.goodput_seconds)


TICKS: WorkQueue[Key] = WorkQueue(_tick, name="goodput")


@kopf.on.event(wk.GROUP, "v1alpha1", "slurmclusters", id="goodput-clusters")
def cluster_event(
    type: str | None, namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> None:
    key = (wk.namespace_or_default(namespace), name)
    if type == "DELETED":
        EXPORTER.clusters.pop(key, None)
        EXPORTER.fleets.pop(key, None)
        TICKS.forget(key)
        metrics.forget(key)
        return
    new = key not in EXPORTER.clusters
    EXPORTER.clusters[key] = dict(body)
    if new:  # later events (status writes) must not make ticks come sooner
        TICKS.add(key)


@kopf.on.startup()
async def start_goodput(**_: Any) -> None:
    EXPORTER.task = asyncio.get_running_loop().create_task(TICKS.run(leading))


@kopf.on.cleanup()
async def stop_goodput(**_: Any) -> None:
    if EXPORTER.task is not None:
        EXPORTER.task.cancel()


@dataclass(frozen=True)
class _Teams:
    """The allocation policy naming a cluster, as the ledger weighs teams."""

    weights: dict[str, float]
    namespaces: dict[str, str]  # namespace -> team
    half_life_s: float = DEFAULT_HALF_LIFE_S


def _policy_teams(key: Key) -> _Teams:
    for (namespace, _), memory in list(policy.SOURCES.items()):
        compiled, ref = memory.policy, (memory.cluster_keys or (None,))[0]
        if compiled is not None and (namespace, ref) == key:
            return _Teams(
                {str(t.name): float(t.weight) for t in compiled.teams},
                compiled.namespace_teams(),
                compiled.half_life_hours * 3600.0,
            )
    return _Teams({}, {})


def export_cluster(
    kube: Kube,
    key: Key,
    raw: Manifest,
    *,
    nodes: Mapping[str, NodeEntry],
    workloads: tuple[Manifest, ...],
    lenders: Mapping[str, Key],
    now: float,
) -> None:
    """One tick of one cluster (module docstring)."""
    cluster = from_object(SlurmCluster, raw)
    rest = State.clients.rest(kube, cluster)
    if rest is None:
        return  # slurmrestd off or not up yet: nothing to measure
    try:
        slurm_nodes, jobs = rest.current_nodes().nodes, rest.list_jobs(JOB_STATES)
    except SlurmError as err:
        metrics.OBSERVE_ERRORS.labels(*key).inc()
        log.info("goodput observe failed cluster=%s/%s error=%s", *key, err)
        return
    teams = _policy_teams(key)
    inputs = FleetInputs(
        slurm_nodes=slurm_nodes,
        jobs=jobs,
        nodes=nodes,
        workloads=workloads,
        checks=frozenset(name for name, lender in lenders.items() if lender == key),
        domain_label=cluster.spec.topology.nvlink_domain_label,
        namespace_teams=teams.namespaces,
        handovers={n: dict(k) for n, k in handovers.LAST.items()},
    )
    fleet = EXPORTER.fleets.get(key)
    if fleet is None or fleet.lends != bool(inputs.checks):
        # The ledger knows a node's transferability from when it joined: lending
        # switched on or off, counting starts afresh (the counters keep growing).
        start = now if fleet is None else fleet.ledger.now
        ledger = LiveLedger(start, half_life_s=teams.half_life_s)
        fleet = EXPORTER.fleets[key] = _Fleet(LiveTranslator(start), ledger, bool(inputs.checks))
    observed = snapshot(inputs, fleet.translator.lending_view, now)
    for gang in observed.gangs:
        # With a policy its teams' weights; without, every team seen weighs the same.
        fleet.ledger.weigh(gang.team, teams.weights.get(gang.team, 0.0 if teams.weights else 1.0))
    try:
        fleet.ledger.observe_all(fleet.translator.translate(observed))
    except ValueError as err:
        # The translator keeps the ledger's events valid; should one still be refused,
        # counting goes on afresh from this tick rather than stopping for good.
        log.error("goodput ledger refused an event cluster=%s/%s error=%s", *key, err)
        metrics.OBSERVE_ERRORS.labels(*key).inc()
        EXPORTER.fleets.pop(key, None)
        return
    fleet.ledger.advance_to(max(now, fleet.ledger.now))
    fleet.ledger.forget_ended()
    _publish(key, fleet, now)


def _publish(key: Key, fleet: _Fleet, now: float) -> None:
    sums = fleet.ledger.gpu_seconds()
    added = {state: value - fleet.published.get(state, 0.0) for state, value in sums.items()}
    fleet.published = sums
    starts, fleet.translator.starts = fleet.translator.starts, []
    metrics.publish(
        key,
        gpu_seconds_added=added,
        gpus=fleet.ledger.gpus_now(),
        occupancy=fleet.ledger.occupancy_now(),
        stranded=fleet.translator.stranded(),
        starts=starts,
        shares=fleet.ledger.shares_now(),
        at=now,
    )
