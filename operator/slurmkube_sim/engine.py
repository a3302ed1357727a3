"""The discrete-event core: one run of one policy over one job list.

Why a hand-written loop and not a framework: 100k jobs on 2,000 nodes must
run in seconds, so the state is kept in flat per-node lists and per-block
sets, and the expensive questions ("where does this gang go", "when can the
queue head start") are answered from per-block counts.

What is modelled, and from where:

- Slurm side: priority order then FIFO (the main scheduler stops at the
  first job that cannot start), plus EASY backfill every `bf_interval` (30 s,
  slurm.conf `bf_interval` default): the queue head gets a reservation at its
  shadow time computed from the running jobs' time limits; a later job may
  start now if it ends before the shadow time or uses only nodes the head will
  not need (Lifka, "The ANL/IBM SP scheduling system", JSSPP 1995; Mu'alem and
  Feitelson, IEEE TPDS 12(6), 2001). At most `bf_max_job_test` (500, the
  slurm.conf default) jobs are tried per pass. Jobs take whole nodes; a
  single-block job must sit in one NVLink block (`topology/block`, like
  `--segment` equal to the job size); others span as few blocks as the free
  state allows; blocks are chosen by `slurmkube.placement.choose_blocks`.
- Kubernetes side: Kueue-like ClusterQueues per team in one cohort; a team's
  head pod is admitted when the cohort has quota (teams further below their
  fair share go first; StrictFIFO within a team) and a node has the GPUs
  (best fit over nodes' free GPUs).
- Sharing (slurmkube): a pod that fits no Kubernetes node gets an idle
  Slurm node lent by the bridge, when and where
  `slurmkube.lending.sharing` says (`lending.py`); it arrives after the
  drain and pod-start delays (nodes lent before the window opens, for the
  pods already running then, are handed over at once); nodes that Slurm's
  EASY plan holds for the queue head are not lent. Empty Kubernetes nodes
  return to Slurm when Slurm allocates them (slurmd start delay); its main
  pass does so only when its idle nodes cannot hold the job in as few
  blocks (backfill sees both).
  With `Sharing(lending=None)`, the earlier policy: the node
  `slurmkube.placement.place` finds on a live snapshot, busy ones
  (`WaitForIdle`) handed over when their job ends.
- Failures: nodes fail at the rate Meta reports for a 16k-GPU H100 training
  fleet (419 unexpected interruptions in 54 days on 2,048 nodes; Dubey et al.,
  "The Llama 3 Herd of Models", 2024, §3.3.4); a failed node's jobs are
  killed and requeued, keeping their last checkpoint, with a restart penalty;
  the node is down until repaired (`faults`, `failures`). Some failures are
  announced by health signals first; naive placement ignores them,
  health-aware placement drains the sick node (`health_side`).

Every state change is sent to a `GoodputLedger`, so the run is measured with
exactly the definitions of docs/goodput.md.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import insort
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmkube.goodput import GoodputReport, JobSubmitted, Side
from slurmkube.placement import Snapshot
from slurmkube_sim.faults import Fault
from slurmkube_sim.fleet import FleetSpec
from slurmkube_sim.health_side import HealthSide
from slurmkube_sim.policy import Policy, StaticSplit, UpperBound
from slurmkube_sim.state import (
    BF_INTERVAL_S,
    CLEAR,
    DEFAULT_FAILURES,
    FAIL,
    HANDOVER,
    NO_FAILURES,
    POD_END,
    REPAIR,
    RETURN,
    SIGNAL,
    SLURM_BOOTED,
    SLURM_END,
    TICK,
    FailureModel,
    HealthAware,
)
from slurmkube_sim.workload import SimJob

__all__ = ["NO_FAILURES", "FailureModel", "HealthAware", "SimOutcome", "simulate"]


@dataclass(frozen=True, slots=True)
class SimOutcome:
    label: str
    report: GoodputReport
    single_block_straddles: int  # single-block gangs placed across blocks: must be 0
    extra_block_spans: int  # gangs on more blocks than the free state needed: must be 0
    lends: int
    lend_decision_ms_p50: float
    jobs_total: int
    jobs_finished: int
    preemptions: int
    simulated_s: float
    wall_s: float
    # Faults and the placement's answer (see `failures`, `health_side`).
    jobs_killed: int = 0  # runs a node failure killed
    jobs_requeued: int = 0  # runs stopped after a checkpoint because their node turned sick
    lost_gpu_hours: float = 0.0  # work thrown away by kills, plus every restart's penalty
    escalations: int = 0  # domains withheld from block-size gangs
    placed_on_down: int = 0  # placements on a failed node, or work left on one: must be 0
    placed_on_sick: int = 0  # placements on a sick node: must be 0 when health-aware
    nodes_down_at_end: int = 0


def simulate(
    fleet: FleetSpec,
    jobs: Sequence[SimJob],
    policy: Policy,
    *,
    teams: Mapping[str, float],
    horizon: float,
    seed: int,
    failures: FailureModel = DEFAULT_FAILURES,
    health: HealthAware | None = None,
    faults: Sequence[Fault] | None = None,
) -> SimOutcome:
    """Run `jobs` on `fleet` under `policy`; metrics over [0, horizon).

    `health`: how placement answers health signals (None: naive, it ignores them).
    `faults`: these faults instead of the ones `failures` draws for `seed`.
    """
    started = time.perf_counter()
    if isinstance(policy, UpperBound):
        fleet, jobs, failures = _unit_fleet(fleet), _as_units(jobs), NO_FAILURES
    run = _Run(
        fleet,
        jobs=jobs,
        policy=policy,
        teams=teams,
        horizon=horizon,
        seed=seed,
        failures=failures,
        health=health,
    )
    if faults is not None and not run.unified:
        run.faults = tuple(faults)  # a CLEAR names its SIGNAL by position here
    run.loop()
    return run.outcome(time.perf_counter() - started)


def _unit_fleet(fleet: FleetSpec) -> FleetSpec:
    # One block of 1-GPU "nodes": every job may use any GPU.
    return FleetSpec(nodes=fleet.gpus, gpus_per_node=1, nodes_per_block=fleet.gpus)


def _as_units(jobs: Sequence[SimJob]) -> list[SimJob]:
    return [
        SimJob(j.name, j.side, j.team, j.submit, j.gpus, 1, j.duration, j.estimate, j.priority)
        for j in jobs
    ]


class _Run(HealthSide):
    """One run: the state, its event handlers and the loop that feeds them in time order."""

    def _prepare(self) -> None:
        """What the layers above the state set up: the placer's snapshot, the failures."""
        if self.sharing:
            self.snapshot = Snapshot.of(self._placement_node(n) for n in range(self.fleet.nodes))
        self._init_failures(self.seed)

    # --- main loop ------------------------------------------------------------------

    def loop(self) -> None:
        self._prepare()
        jobs, heap = self.jobs, self.heap
        ai, n_jobs = 0, len(jobs)
        handlers = {
            SLURM_END: self._slurm_end,
            SLURM_BOOTED: self._slurm_booted,
            POD_END: self._pod_end,
            HANDOVER: self._handover,
            FAIL: self._fail,
            REPAIR: self._repair,
            TICK: self._tick,
            SIGNAL: self._signal,
            CLEAR: self._clear,
            RETURN: self._return,
        }
        while True:
            t_arrival = jobs[ai].submit if ai < n_jobs else math.inf
            t_event = heap[0][0] if heap else math.inf
            t = min(t_arrival, t_event)
            if t == math.inf:
                break
            self.now = t
            while heap and heap[0][0] == t:
                _, _, kind, subject, epoch = heapq.heappop(heap)
                handlers[kind](subject, epoch)
            while ai < n_jobs and jobs[ai].submit == t:
                self._arrive(ai)
                ai += 1
            if self.slurm_dirty:
                self._main_pass()
            if self.kube_dirty:
                self._kube_pass()
            if self.bf_dirty and self.pending and self.tick_at == math.inf:
                self.tick_at = (math.floor(t / BF_INTERVAL_S) + 1) * BF_INTERVAL_S
                self._push(self.tick_at, TICK, 0, 0)
        self.ledger.advance_to(max(self.now, self.horizon))

    def _arrive(self, j: int) -> None:
        job = self.jobs[j]
        pool = "fleet"
        if isinstance(self.policy, StaticSplit):
            pool = "slurm" if job.side is Side.SLURM else "kubernetes"
        members, per = (1, job.gpus) if self.unified else (job.members, job.gpus_per_member)
        self.ledger.observe(
            JobSubmitted(self.now, job.name, job.team, job.side, members, per, pool)
        )
        self._learn(job)
        if job.side is Side.SLURM or self.unified:
            insort(self.pending, (-job.priority, job.submit, j))
            self.slurm_dirty = self.bf_dirty = True
        else:
            self.queues.setdefault(job.team, deque()).append(j)
            self.team_used.setdefault(job.team, 0)
            self.kube_dirty = True

    # --- result ---------------------------------------------------------------------

    def outcome(self, wall_s: float) -> SimOutcome:
        lend_ms = sorted(self.lend_ms)
        return SimOutcome(
            label=self.policy.label,
            report=self.ledger.report(),
            single_block_straddles=self.straddles,
            extra_block_spans=self.extra_spans,
            lends=self.lends,
            lend_decision_ms_p50=lend_ms[len(lend_ms) // 2] if lend_ms else 0.0,
            jobs_total=len(self.jobs),
            jobs_finished=self.done,
            preemptions=self.preemptions,
            simulated_s=self.now,
            wall_s=wall_s,
            jobs_killed=self.kills,
            jobs_requeued=self.requeues,
            lost_gpu_hours=self.lost_gpu_s / 3600.0,
            escalations=self.escalations,
            placed_on_down=self.placed_on_down,
            placed_on_sick=self.placed_on_sick,
            nodes_down_at_end=len(self.down),
        )
