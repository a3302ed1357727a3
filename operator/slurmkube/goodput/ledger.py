"""Goodput metrics over an event log, computed in one streaming pass.

The definitions are in docs/goodput.md, with their sources; this module is
the only implementation: the simulator and the operator's live exporter
(`goodput/live.py`, `controllers/goodput.py`) both feed it, so both report the
same numbers. Events must arrive in time order.

Every GPU-second of a healthy node inside the window is exactly one of:
allocated, reserved-but-unused (node in a lending or return transfer),
fragmentation (free while a queued job that could use that node's side waits),
or idle-healthy (free and nobody could use it). GPU-seconds of free GPUs on
drained or down nodes are drained-down waste and are not healthy.

A mutable accumulator on purpose (the one place the metric state lives while
events stream through); its result is frozen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
from slurmkube.goodput.fairness import DecayedShares
from slurmkube.goodput.formulas import jain_index
from slurmkube.goodput.gangs import GangState, gang_stats
from slurmkube.goodput.report import GoodputReport, Waste

# Slurm's PriorityDecayHalfLife default (slurm.conf(5)): usage half a week ago counts half.
DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0
# How often, at most, the demand-capped entitlement is re-shared (class docstring).
ENTITLEMENT_RESOLUTION_S = 60.0

_SIDE = {Side.SLURM: 0, Side.KUBERNETES: 1}


@dataclass(slots=True)
class _NodeState:
    gpus: int
    owner: int  # _SIDE value
    pool: int
    transferable: bool
    up: bool = True
    in_transfer: bool = False
    allocated: int = 0


class GoodputLedger:
    """Feed events in time order with `observe`; `report()` at any time after.

    `window` bounds the GPU-second integrals (occupancy, waste, fairness);
    start times and gang goodput cover every job submitted inside it.
    `entitlements` are the teams' weights (their agreed share of the fleet).
    The demand-capped entitlement is re-evaluated when demand changes, at most
    once per `entitlement_resolution_s` (a sampled fair share, as Slurm's
    `PriorityCalcPeriod` samples usage).
    """

    def __init__(
        self,
        window: tuple[float, float],
        entitlements: Mapping[str, float],
        *,
        half_life_s: float = DEFAULT_HALF_LIFE_S,
        series_step_s: float = 3600.0,
        entitlement_resolution_s: float = ENTITLEMENT_RESOLUTION_S,
    ) -> None:
        self._start, self._end = window
        self._shares = DecayedShares(window, entitlements, half_life_s)
        self._now = -math.inf  # events may precede the window (jobs already running)
        self._nodes: dict[str, _NodeState] = {}
        self._jobs: dict[str, GangState] = {}
        self._pools: dict[str, int] = {}
        # Queued (eligible, not fully placed) jobs by pool * 2 + side.
        self._queued: dict[int, int] = {}
        # Free GPUs of healthy, settled nodes by category (see _category), and whether a
        # queued job could use that category now.
        self._free: dict[int, int] = {}
        self._wanted: dict[int, bool] = {}
        self._wanted_stale = False
        self._idle_free = self._frag_free = self._allocated = 0
        self._reserved_free = self._unhealthy_free = 0
        self._sums = {"allocated": 0.0, "idle": 0.0, "down": 0.0, "reserved": 0.0, "frag": 0.0}
        self._entitlement_stale = True
        self._resolution = entitlement_resolution_s
        self._next_refresh = self._start
        self._step = series_step_s
        self._bucket_alloc = self._bucket_healthy = 0.0
        self._bucket_end = self._start + series_step_s
        self._series: list[tuple[float, float]] = []
        self._handlers = {
            NodeAdded: self._node_added,
            NodeRemoved: self._node_removed,
            NodeHealthChanged: self._node_health,
            NodeTransferBegan: self._transfer_began,
            NodeTransferEnded: self._transfer_ended,
            JobSubmitted: self._job_submitted,
            JobStarted: self._job_started,
            JobEnded: self._job_ended,
            JobPreempted: self._job_preempted,
        }

    # --- event intake ---------------------------------------------------------------

    def observe(self, event: Event) -> None:
        if event.t < self._now:
            raise ValueError(f"event at t={event.t} arrived after t={self._now}: {event!r}")
        if event.t > self._now:
            self._advance(event.t)
        self._handlers[type(event)](event)  # type: ignore[operator]

    def advance_to(self, t: float) -> None:
        """Account for time passing with no event (e.g. up to the window's end)."""
        if t < self._now:
            raise ValueError(f"cannot go back from t={self._now} to t={t}")
        self._advance(t)

    def observe_all(self, events: Iterable[Event]) -> GoodputLedger:
        for event in events:
            self.observe(event)
        return self

    def _node_added(self, e: NodeAdded) -> None:
        if e.node in self._nodes:
            raise ValueError(f"node {e.node!r} added twice")
        pool = self._pools.setdefault(e.pool, len(self._pools))
        node = _NodeState(e.gpus, _SIDE[e.owner], pool, e.transferable)
        self._nodes[e.node] = node
        self._account(node, +1)
        self._entitlement_stale = True

    def _node_removed(self, e: NodeRemoved) -> None:
        if self._nodes[e.node].allocated:
            raise ValueError(f"node {e.node!r} removed with GPUs in use")
        self._account(self._nodes.pop(e.node), -1)
        self._entitlement_stale = True

    def _node_health(self, e: NodeHealthChanged) -> None:
        node = self._nodes[e.node]
        self._account(node, -1)
        node.up = e.health is Health.UP
        self._account(node, +1)
        self._entitlement_stale = True  # healthy capacity changed

    def _transfer_began(self, e: NodeTransferBegan) -> None:
        node = self._nodes[e.node]
        self._account(node, -1)
        node.in_transfer = True
        self._account(node, +1)

    def _transfer_ended(self, e: NodeTransferEnded) -> None:
        node = self._nodes[e.node]
        self._account(node, -1)
        node.in_transfer = False
        node.owner = _SIDE[e.owner]
        self._account(node, +1)

    def _job_submitted(self, e: JobSubmitted) -> None:
        if e.job in self._jobs:
            raise ValueError(f"job {e.job!r} submitted twice")
        pool = self._pools.setdefault(e.pool, len(self._pools))
        self._jobs[e.job] = GangState(e, pool * 2 + _SIDE[e.side])
        self._queue(self._jobs[e.job], +1)
        if self._shares.ask(e.team, e.gpus):
            self._entitlement_stale = True

    def _job_started(self, e: JobStarted) -> None:
        job = self._jobs[e.job]
        sub = job.submitted
        per = sub.gpus_per_member
        for name in e.nodes:
            self._allocate(name, per)
        job.placed.extend(e.nodes)
        self._shares.use(sub.team, per * len(e.nodes))
        if len(job.placed) > sub.members:
            raise ValueError(f"job {e.job!r} placed {len(job.placed)} of {sub.members} members")
        if len(job.placed) == sub.members and job.eligible:
            job.eligible = False
            self._queue(job, -1)
            job.whole_since = e.t
            if job.first_whole is None:
                job.first_whole = e.t

    def _job_ended(self, e: JobEnded) -> None:
        job = self._jobs[e.job]
        self._release(job, e.t)
        job.ended = e.t
        if job.eligible:
            job.eligible = False
            self._queue(job, -1)
        if self._shares.ask(job.submitted.team, -job.submitted.gpus):
            self._entitlement_stale = True

    def _job_preempted(self, e: JobPreempted) -> None:
        job = self._jobs[e.job]
        self._release(job, e.t)
        if not job.eligible:
            job.eligible = True
            self._queue(job, +1)

    # --- bookkeeping ------------------------------------------------------------------

    def _release(self, job: GangState, t: float) -> None:
        sub = job.submitted
        for name in job.placed:
            self._allocate(name, -sub.gpus_per_member)
        self._shares.use(sub.team, -sub.gpus_per_member * len(job.placed))
        job.placed.clear()
        if job.whole_since is not None:
            job.whole_s += t - job.whole_since
            job.whole_since = None

    def _allocate(self, name: str, gpus: int) -> None:
        node = self._nodes[name]
        after = node.allocated + gpus
        if not 0 <= after <= node.gpus:
            raise ValueError(f"node {name!r} would have {after} of {node.gpus} GPUs in use")
        if node.up and not node.in_transfer and node.allocated > 0 and after > 0:
            # Fast path (most pod starts and ends): the node stays in its free category.
            category = self._category(node)
            node.allocated = after
            self._allocated += gpus
            self._free[category] -= gpus
            if self._wanted[category]:
                self._frag_free -= gpus
            else:
                self._idle_free -= gpus
            return
        self._account(node, -1)
        node.allocated = after
        self._account(node, +1)

    def _queue(self, job: GangState, delta: int) -> None:
        before = self._queued.get(job.queue, 0)
        self._queued[job.queue] = before + delta
        if (before == 0) != (before + delta == 0):
            self._wanted_stale = True  # settled once per instant, in _advance

    @staticmethod
    def _category(node: _NodeState) -> int:
        return ((node.pool * 2 + node.owner) * 2 + node.transferable) * 2 + (node.allocated == 0)

    def _is_wanted(self, category: int) -> bool:
        empty, rest = category & 1, category >> 1
        transferable, rest = rest & 1, rest >> 1
        owner, pool = rest & 1, rest >> 1
        queued = self._queued
        if queued.get(pool * 2 + owner, 0) > 0:
            return True
        return bool(transferable and empty and queued.get(pool * 2 + 1 - owner, 0) > 0)

    def _refresh_wanted(self) -> None:
        self._wanted_stale = False
        for category, free in self._free.items():
            wanted = self._is_wanted(category)
            if wanted != self._wanted[category]:
                self._wanted[category] = wanted
                sign = 1 if wanted else -1
                self._frag_free += sign * free
                self._idle_free -= sign * free

    def _account(self, node: _NodeState, sign: int) -> None:
        self._allocated += sign * node.allocated
        free = sign * (node.gpus - node.allocated)
        if node.in_transfer:
            self._reserved_free += free
        elif not node.up:
            self._unhealthy_free += free
        else:
            category = self._category(node)
            if category not in self._wanted:
                self._wanted[category] = self._is_wanted(category)
                self._free[category] = 0
            self._free[category] += free
            if self._wanted[category]:
                self._frag_free += free
            else:
                self._idle_free += free

    # --- integration ------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        if self._wanted_stale:
            self._refresh_wanted()
        if self._entitlement_stale and (self._now >= self._next_refresh or self._now < self._start):
            healthy = self._allocated + self._idle_free + self._frag_free + self._reserved_free
            self._shares.entitle(self._now, float(healthy))
            self._entitlement_stale = False
            self._next_refresh = self._now + self._resolution
        while self._now < t:
            stop = t if t < self._bucket_end else self._bucket_end
            self._integrate(self._now, stop)
            self._now = stop
            if stop == self._bucket_end:
                self._close_bucket()
        self._shares.advance(t)

    def _close_bucket(self) -> None:
        if self._bucket_healthy > 0 and self._bucket_end <= self._end:
            middle = self._bucket_end - self._step / 2.0
            self._series.append((middle, self._bucket_alloc / self._bucket_healthy))
        self._bucket_alloc = self._bucket_healthy = 0.0
        self._bucket_end += self._step

    def _integrate(self, a: float, b: float) -> None:
        a = max(a, self._start)
        b = min(b, self._end)
        dt = b - a
        if dt <= 0:
            return
        sums = self._sums
        allocated = self._allocated * dt
        sums["allocated"] += allocated
        sums["idle"] += self._idle_free * dt
        sums["frag"] += self._frag_free * dt
        sums["reserved"] += self._reserved_free * dt
        sums["down"] += self._unhealthy_free * dt
        healthy = self._allocated + self._idle_free + self._frag_free + self._reserved_free
        self._bucket_alloc += allocated
        self._bucket_healthy += healthy * dt

    # --- result -----------------------------------------------------------------------

    def report(self) -> GoodputReport:
        sums = self._sums
        healthy = sums["allocated"] + sums["idle"] + sums["frag"] + sums["reserved"]
        capacity = healthy + sums["down"]

        def share(x: float) -> float:
            return x / capacity if capacity > 0 else 0.0

        gangs = gang_stats(self._jobs.values(), self._start, self._end)
        fairness = self._shares.shares(self._now)
        return GoodputReport(
            window_s=(self._start, self._end),
            capacity_gpu_s=capacity,
            healthy_gpu_s=healthy,
            allocated_gpu_s=sums["allocated"],
            occupancy=sums["allocated"] / healthy if healthy > 0 else 0.0,
            waste=Waste(
                idle_healthy=share(sums["idle"]),
                drained_down=share(sums["down"]),
                reserved_unused=share(sums["reserved"]),
                fragmentation=share(sums["frag"]),
            ),
            time_to_start=gangs.time_to_start,
            tts_p95_s_64plus=gangs.tts_p95_s_64plus,
            gangs_finished=gangs.finished,
            gang_goodput_mean=gangs.goodput_mean,
            gang_goodput_gpu_weighted=gangs.goodput_gpu_weighted,
            fairness=fairness,
            jain_index=jain_index([s.ratio for s in fairness.values()]),
            occupancy_series=tuple(self._series),
            waits_by_bucket=gangs.waits_by_bucket,
        )
