"""Goodput after the fact: one window recomputed in one pass from the final records
of its nodes and gangs (Slurm's job list with each job's submit, start and end
times; the lending Workloads with their admitted and finished times) and of the
nodes lent (`goodput.handovers`), through the ledger the live exporter and the
simulator feed.

The live exporter learns the same history tick by tick (`goodput/live.py`);
recomputing it here from what Slurm, Kueue and the operator's Events kept is how
its figures are checked (`slurmkube goodput`, the live-vs-offline e2e). Nodes are
present the whole window, and healthy but for the outages slurmdbd recorded
(`goodput.node_history`), when given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurmkube.goodput.events import Event, JobEnded, JobStarted, JobSubmitted, NodeAdded
from slurmkube.goodput.handovers import Handover, LeaseTimes, handover_events
from slurmkube.goodput.ledger import GoodputLedger
from slurmkube.goodput.live import EVENT_ORDER, KUEUE_KEY, LiveGang, LiveNode
from slurmkube.goodput.live_ledger import STATES
from slurmkube.goodput.node_history import Outage, health_events, lent_spans
from slurmkube.goodput.report import GoodputReport


@dataclass(frozen=True, slots=True)
class OfflineGoodput:
    report: GoodputReport
    gpu_seconds: Mapping[str, float]  # by the exporter's state names (`live_ledger.STATES`)


def window_events(
    nodes: Iterable[LiveNode],
    gangs: Iterable[LiveGang],
    window: tuple[float, float],
    node_events: Iterable[Event] = (),
) -> list[Event]:
    """The ledger's events of every gang submitted and every node event (transfers,
    health) by the window's end, in time order; the nodes join before all of them and
    the window."""
    start, end = window
    kept = sorted((g for g in gangs if g.submitted <= end), key=lambda g: g.key)
    moved = [e for e in node_events if e.t <= end]
    first = min([start, *(g.submitted for g in kept), *(e.t for e in moved)])
    events: list[Event] = [
        NodeAdded(first, n.name, n.gpus, n.owner, n.pool, n.transferable) for n in nodes
    ]
    events += moved
    for g in kept:
        events.append(
            JobSubmitted(g.submitted, g.key, g.team, g.side, g.members, g.gpus_per_member, g.pool)
        )
        ended = g.ended if g.ended is not None and g.ended <= end else None
        held = g.started is not None and (ended is None or ended > g.started)
        if held and g.started is not None and g.started <= end and g.nodes:
            events.append(JobStarted(g.started, g.key, g.nodes))
        if ended is not None:
            events.append(JobEnded(ended, g.key))
    events.sort(key=lambda e: (e.t, EVENT_ORDER[type(e)]))
    return events


def recompute(
    nodes: Iterable[LiveNode],
    gangs: Iterable[LiveGang],
    window: tuple[float, float],
    entitlements: Mapping[str, float] | None = None,
    *,
    handovers: Sequence[Handover] = (),
    outages: Sequence[Outage] = (),
) -> OfflineGoodput:
    """The window's report; without entitlements every team weighs the same (as the
    exporter weighs teams when no allocation policy names the cluster). Handovers
    (lent nodes) pair with the gangs of their Workloads (`kueue/<uid>`); outages
    count outside the nodes' lends."""
    gangs, nodes = tuple(gangs), tuple(nodes)
    if window[1] < window[0]:
        raise ValueError(f"window ends before it starts: {window}")
    weights = entitlements if entitlements is not None else {g.team: 1.0 for g in gangs}
    leases = {
        g.key.removeprefix(KUEUE_KEY): LeaseTimes(g.started, g.ended)
        for g in gangs
        if g.key.startswith(KUEUE_KEY)
    }
    node_events = handover_events(handovers, leases)
    node_events += health_events(outages, lent_spans(handovers), (n.name for n in nodes))
    ledger = GoodputLedger(window, weights)
    ledger.observe_all(window_events(nodes, gangs, window, node_events))
    ledger.advance_to(window[1])  # every event kept is at or before the window's end
    report = ledger.report()
    share = report.waste
    capacity = report.capacity_gpu_s
    seconds = {
        "allocated": report.allocated_gpu_s,
        "idle": share.idle_healthy * capacity,
        "frag": share.fragmentation * capacity,
        "reserved": share.reserved_unused * capacity,
        "down": share.drained_down * capacity,
    }
    return OfflineGoodput(report, {STATES[k]: v for k, v in seconds.items()})
