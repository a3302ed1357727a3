"""Goodput of a live fleet: observed snapshots -> the ledger's events.

The operator sees states, not events: Slurm's job list (with each job's
submit, start and end times) and node states, Kueue Workloads' conditions,
Nodes' lease labels and readiness. `LiveTranslator.translate` compares a
snapshot with what it already told the ledger and returns the difference as
events (`goodput/events.py`) in time order, so the live exporter and the
simulator feed the same `GoodputLedger`:

- idempotent: the same snapshot twice gives nothing the second time; a gang is
  submitted, started and ended once per incarnation however many snapshots
  show it, and a gang ended and still listed (Slurm keeps finished jobs for
  MinJobAge) is not submitted again;
- a time Slurm or Kueue reports (submit, start, end, a condition's transition)
  or the operator recorded (a node's transfer, `goodput.handovers`) is the
  event's time; a change only a state shows (a node's health, a gang gone from
  the list, a requeue) takes the snapshot's time;
- never back in time: the translator has told the ledger everything up to the
  last snapshot's time, so a later report of an older change (a lagging list,
  a timestamp rounded down to the second) is given at that time; the nodes of
  a first snapshot are added before its oldest event (jobs already running);
- never invalid: a member placed on a node the ledger does not know, or past
  the node's GPUs, stays unplaced (its gang never counts as whole); a node
  holding a job leaves only once the job is released; an incarnation that
  started and ended in the same instant places nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from slurmkube.goodput.events import (
    Event,
    Health,
    JobEnded,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeAdded,
    NodeHealthChanged,
    NodeRemoved,
    NodeTransferBegan,
    NodeTransferEnded,
    Side,
)
from slurmkube.goodput.stranded import StrandGang, StrandNode, stranded_by_domain

_Emit = Callable[[Event], None]
KUEUE_KEY = "kueue/"  # a Workload's gang key is this and its uid

# Order of events at one instant: nodes join first, releases before placements
# (a node freed and taken in the same second), placements last.
EVENT_ORDER: dict[type[Event], int] = {
    NodeAdded: 0,
    JobSubmitted: 1,
    JobEnded: 2,
    JobPreempted: 2,
    NodeRemoved: 3,
    NodeHealthChanged: 4,
    NodeTransferBegan: 5,
    NodeTransferEnded: 6,
    JobStarted: 7,
}


@dataclass(frozen=True, slots=True)
class LiveNode:
    """A node as observed: its health lending aside (Slurm's DOWN/DRAIN, Kubernetes
    readiness) and its owner, or the side it is on its way to (`moving_to`)."""

    name: str
    gpus: int
    health: Health = Health.UP
    owner: Side = Side.SLURM
    moving_to: Side | None = None
    domain: str = ""  # NVLink domain ("": none known)
    pool: str = "fleet"
    transferable: bool = False
    # When its transfer began and ended, if the operator saw it (`goodput.handovers`);
    # otherwise the snapshot's time.
    moved_at: float | None = None
    settled_at: float | None = None
    # When its health last changed, if Slurm says (a drain's or DOWN's reason time, a
    # resume's last_busy); otherwise the snapshot's time.
    health_since: float | None = None


@dataclass(frozen=True, slots=True)
class LiveGang:
    """A Slurm job or a Kueue Workload: its shape and this incarnation's times."""

    key: str  # unique across schedulers ("slurm/<job id>", "kueue/<uid>")
    team: str
    side: Side
    members: int
    gpus_per_member: int
    submitted: float
    started: float | None = None  # this incarnation's start; None while queued
    nodes: tuple[str, ...] = ()  # one per placed member (repeated for pods sharing a node)
    ended: float | None = None
    pool: str = "fleet"
    single_domain: bool = False  # every member in one NVLink domain


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    t: float
    nodes: tuple[LiveNode, ...]
    gangs: tuple[LiveGang, ...]


@dataclass(frozen=True, slots=True)
class GangStart:
    """A gang whole for the first time: what the time-to-start histogram observes."""

    side: Side
    gpus: int
    wait_s: float


@dataclass(slots=True)
class _Node:
    gpus: int
    owner: Side
    pool: str
    transferable: bool
    health: Health = Health.UP
    moving_to: Side | None = None
    allocated: int = 0


@dataclass(slots=True)
class _Gang:
    shape: LiveGang  # as first seen: members and GPUs are fixed at submission
    submitted_at: float = math.nan  # as the ledger got it
    started: float | None = None
    placed: tuple[str, ...] = ()
    whole_once: bool = False


class LiveTranslator:
    """Snapshots in, the ledger's events out (module docstring). `start` is the
    metric window's start: only gangs submitted from then on are reported to
    `starts` (as the ledger's time to start counts them)."""

    def __init__(self, start: float) -> None:
        self._start = start
        self._now = -math.inf
        self._nodes: dict[str, _Node] = {}
        self._gangs: dict[str, _Gang] = {}
        self._done: set[str] = set()  # ended, maybe still listed
        self._domains: dict[str, str] = {}
        self.starts: list[GangStart] = []

    def translate(self, snapshot: LiveSnapshot) -> list[Event]:
        raw: list[tuple[float, int, int, Event]] = []

        def emit(event: Event) -> None:
            raw.append((event.t, EVENT_ORDER[type(event)], len(raw), event))

        self._gang_events(snapshot, emit)
        self._node_events(snapshot, emit)
        raw.sort(key=lambda r: r[:3])
        return self._commit(raw, snapshot.t)

    # --- what changed -----------------------------------------------------------------

    def _gang_events(self, snapshot: LiveSnapshot, emit: _Emit) -> None:
        listed = {g.key for g in snapshot.gangs}
        self._done &= listed  # once gone from the list, a key will not come back
        for gang in snapshot.gangs:
            if gang.key in self._done:
                continue
            record = self._gangs.get(gang.key)
            if record is None:
                record = self._gangs[gang.key] = _Gang(gang)
                emit(
                    JobSubmitted(
                        gang.submitted,
                        gang.key,
                        gang.team,
                        gang.side,
                        gang.members,
                        gang.gpus_per_member,
                        gang.pool,
                    )
                )
            self._incarnation(record, gang, snapshot.t, emit)
        for key in sorted(set(self._gangs) - listed):
            emit(JobEnded(snapshot.t, key))
            self._done.add(key)

    def _incarnation(self, record: _Gang, gang: LiveGang, now: float, emit: _Emit) -> None:
        start = gang.started
        if start is not None and gang.ended is not None and gang.ended <= start:
            start = None  # started and ended at once: nothing was held
        if record.started is not None and start != record.started and gang.ended is None:
            emit(JobPreempted(now if start is None else start, gang.key))
        if start is not None and start != record.started:
            emit(JobStarted(start, gang.key, gang.nodes))
        elif start is not None and not record.placed and gang.nodes and gang.ended is None:
            # Started with none of its nodes known then (a Workload admitted before its
            # lease labels reached the cache): placed from now.
            emit(JobStarted(now, gang.key, gang.nodes))
        record.started = start
        if gang.ended is not None:
            emit(JobEnded(gang.ended, gang.key))
            self._done.add(gang.key)

    def _node_events(self, snapshot: LiveSnapshot, emit: _Emit) -> None:
        now = snapshot.t
        seen = set()
        for node in snapshot.nodes:
            seen.add(node.name)
            known = self._nodes.get(node.name)
            if known is None:
                emit(
                    NodeAdded(
                        -math.inf, node.name, node.gpus, node.owner, node.pool, node.transferable
                    )
                )
                known = _Node(node.gpus, node.owner, node.pool, node.transferable)
            if node.health is not known.health:
                emit(NodeHealthChanged(self._health_changed_at(node, now), node.name, node.health))
            began = now if node.moved_at is None else node.moved_at
            ended = now if node.settled_at is None else node.settled_at
            if node.moving_to is not None and node.moving_to is not known.moving_to:
                emit(NodeTransferBegan(began, node.name, node.moving_to))
            elif node.moving_to is None and (known.moving_to or node.owner is not known.owner):
                if known.moving_to is None:
                    emit(NodeTransferBegan(min(began, ended), node.name, node.owner))
                emit(NodeTransferEnded(ended, node.name, node.owner))
            self._domains[node.name] = node.domain
        for name in sorted(set(self._nodes) - seen):
            emit(NodeRemoved(now, name))
        for name in set(self._domains) - seen - set(self._nodes):
            del self._domains[name]

    def _health_changed_at(self, node: LiveNode, now: float) -> float:
        """Slurm's time for the change if it gave one, else now. A return to service
        counts from Slurm's time only if that falls after the last tick: an older one
        is an earlier job's end, not the resume."""
        since = node.health_since
        if since is None or (node.health is Health.UP and since <= self._now):
            return now
        return min(now, since)

    # --- what the ledger gets ---------------------------------------------------------

    def _commit(self, raw: list[tuple[float, int, int, Event]], now: float) -> list[Event]:
        floor = self._now
        oldest = min((t for t, *_ in raw if t > -math.inf), default=now)
        out = []
        for t, _, _, event in raw:
            at = max(floor, min(oldest, now)) if isinstance(event, NodeAdded) else max(t, floor)
            kept = self._apply(replace(event, t=at))
            if kept is not None:
                out.append(kept)
                floor = at
        self._now = max(floor, now)
        return out

    def _apply(self, event: Event) -> Event | None:
        """Carry `event` into the translator's mirror of the ledger; the event as the
        ledger must get it (None: it would be invalid there)."""
        match event:
            case NodeAdded():
                self._nodes[event.node] = _Node(
                    event.gpus, event.owner, event.pool, event.transferable
                )
            case NodeRemoved():
                if self._nodes[event.node].allocated:
                    return None  # its job's release comes first (a later snapshot)
                del self._nodes[event.node]
            case NodeHealthChanged():
                self._nodes[event.node].health = event.health
            case NodeTransferBegan():
                self._nodes[event.node].moving_to = event.to
            case NodeTransferEnded():
                node = self._nodes[event.node]
                node.owner, node.moving_to = event.owner, None
            case JobSubmitted():
                self._gangs[event.job].submitted_at = event.t
            case JobStarted():
                return self._place(event)
            case JobEnded() | JobPreempted():
                self._release(event.job)
                if isinstance(event, JobEnded):
                    del self._gangs[event.job]
        return event

    def _place(self, event: JobStarted) -> JobStarted | None:
        record = self._gangs.get(event.job)
        if record is None:
            return None  # ended earlier in the same snapshot: nothing to place
        shape = record.shape
        per, room = shape.gpus_per_member, shape.members - len(record.placed)
        placed: list[str] = []
        for name in event.nodes:
            node = self._nodes.get(name)
            if len(placed) == room or node is None or node.allocated + per > node.gpus:
                continue
            node.allocated += per
            placed.append(name)
        if not placed:
            return None
        record.placed += tuple(placed)
        if len(record.placed) == shape.members and not record.whole_once:
            record.whole_once = True
            if record.submitted_at >= self._start:
                wait = event.t - record.submitted_at
                self.starts.append(GangStart(shape.side, shape.members * per, wait))
        return replace(event, nodes=tuple(placed))

    def _release(self, key: str) -> None:
        record = self._gangs[key]
        for name in record.placed:
            self._nodes[name].allocated -= record.shape.gpus_per_member
        record.placed = ()

    # --- views ------------------------------------------------------------------------

    def lending_view(
        self, name: str, *, lent: bool, admitted: bool, slurm: Health, ready: bool
    ) -> tuple[Health, Side, Side | None]:
        """Health, owner and transfer (`LiveNode`'s) of a node from its lease (the
        Kueue bridge's label), whether its workload is admitted, its Slurm health and
        Kubernetes readiness. Lent and admitted: Kubernetes' node; lent, not yet
        admitted: on its way there; no longer lent: on its way back to Slurm until
        Slurm has it up again (slurmd back, the drain undone). A NotReady node is down."""
        known = self._nodes.get(name)
        was_lent = known is not None and Side.KUBERNETES in (known.owner, known.moving_to)
        up = Health.UP if ready else Health.DOWN
        if lent:
            return up, Side.KUBERNETES, None if admitted else Side.KUBERNETES
        if was_lent and slurm is not Health.UP:
            return up, Side.SLURM, Side.SLURM
        return slurm if ready else Health.DOWN, Side.SLURM, None

    def stranded(self) -> dict[str, int]:
        """Free GPUs per NVLink domain no queued gang can use now (docs/goodput.md)."""
        nodes = [
            StrandNode(
                self._domains.get(name, ""),
                n.pool,
                n.owner,
                n.transferable,
                n.gpus - n.allocated,
                n.allocated == 0,
                n.health is Health.UP and n.moving_to is None,
            )
            for name, n in self._nodes.items()
        ]
        gangs = [
            StrandGang(s.pool, s.side, s.members, s.gpus_per_member, s.single_domain)
            for s in (g.shape for g in self._gangs.values() if g.started is None)
        ]
        return stranded_by_domain(nodes, gangs)
