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
- Sharing (slurmkube): a pod that fits no Kubernetes node gets a node lent
  by the bridge, chosen by `slurmkube.placement.place` on a live snapshot;
  idle Slurm nodes arrive after the drain and pod-start delays, busy ones
  (`WaitForIdle`) when their job ends; nodes that Slurm's EASY plan holds for
  the queue head are not lent. Empty Kubernetes nodes return to Slurm when
  Slurm allocates them (slurmd start delay).
- Failures: nodes fail at the rate Meta reports for a 16k-GPU H100 training
  fleet (419 unexpected interruptions in 54 days on 2,048 nodes; Dubey et al.,
  "The Llama 3 Herd of Models", 2024, §3.3.4); a failed node's jobs are
  requeued with a restart penalty; the node is down until repaired.

Every state change is sent to a `GoodputLedger`, so the run is measured with
exactly the definitions of docs/goodput.md.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmkube.goodput import (
    GoodputLedger,
    GoodputReport,
    Health,
    JobEnded,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeAdded,
    NodeHealthChanged,
    NodeTransferBegan,
    NodeTransferEnded,
    Side,
)
from slurmkube.placement import (
    BlockPolicy,
    GangRequest,
    Node,
    NodeState,
    Snapshot,
    choose_blocks,
    min_blocks_needed,
    place,
)
from slurmkube_sim.fleet import FleetSpec
from slurmkube_sim.policy import Policy, Sharing, StaticSplit, UpperBound
from slurmkube_sim.workload import SimJob

# Node states.
IDLE, BUSY, DRAINING, LENDING, KUBE, RESUMING, DOWN = range(7)
# Event kinds (heap entries are (time, seq, kind, subject, epoch)).
_SLURM_END, _SLURM_BOOTED, _POD_END, _HANDOVER, _FAIL, _REPAIR, _TICK = range(7)
BF_INTERVAL_S = 30.0
_POOL = "ideal-pool"
BF_MAX_JOB_TEST = 500


@dataclass(frozen=True, slots=True)
class FailureModel:
    # 419 unexpected interruptions / (54 days * 2,048 nodes), Llama 3 §3.3.4.
    per_node_day: float = 419 / (54 * 2048)
    repair_s: float = 4 * 3600.0  # our assumption: diagnose, swap, burn-in
    restart_penalty_s: float = 600.0  # reload the last checkpoint


NO_FAILURES = FailureModel(per_node_day=0.0)


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


def simulate(
    fleet: FleetSpec,
    jobs: Sequence[SimJob],
    policy: Policy,
    *,
    teams: Mapping[str, float],
    horizon: float,
    seed: int,
    failures: FailureModel = FailureModel(),
) -> SimOutcome:
    """Run `jobs` on `fleet` under `policy`; metrics over [0, horizon)."""
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
    )
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


class _Run:
    """Mutable state of one run (the loop's working memory; results leave frozen)."""

    def __init__(
        self,
        fleet: FleetSpec,
        *,
        jobs: Sequence[SimJob],
        policy: Policy,
        teams: Mapping[str, float],
        horizon: float,
        seed: int,
        failures: FailureModel,
    ) -> None:
        self.fleet = fleet
        self.policy = policy
        self.sharing = policy if isinstance(policy, Sharing) else None
        self.unified = isinstance(policy, UpperBound)
        self.failures = failures
        self.rng = random.Random(seed * 7919 + 17)
        self.jobs = sorted(jobs, key=lambda j: (j.submit, j.name))
        self.horizon = horizon
        self.t0 = min(0.0, self.jobs[0].submit) if self.jobs else 0.0
        n_nodes, g = fleet.nodes, fleet.gpus_per_node
        self.g = g
        self.names = [fleet.node_name(n) for n in range(n_nodes)]
        self.index = {name: n for n, name in enumerate(self.names)}
        self.block = [fleet.block_of(n) for n in range(n_nodes)]
        self.n_blocks = fleet.blocks
        self.tier_paths = [fleet.tier_path(b) for b in range(self.n_blocks)]
        self.block_names = [fleet.block_name(b) for b in range(self.n_blocks)]
        self.leaf = [path[0] for path in self.tier_paths]
        self.state = [IDLE] * n_nodes
        self.job_on = [-1] * n_nodes
        self.kube_used = [0] * n_nodes
        self.pods_on: list[set[int]] = [set() for _ in range(n_nodes)]
        self.bound: dict[int, list[int]] = {}  # lent node in flight -> pods waiting for it
        self.spare: dict[int, int] = {}  # lent node in flight -> GPUs not yet promised
        self.avail_idle: list[set[int]] = [set() for _ in range(self.n_blocks)]
        self.avail_kube: list[set[int]] = [set() for _ in range(self.n_blocks)]
        self.count = [0] * self.n_blocks  # len(avail_idle[b]) + len(avail_kube[b])
        self.avail_version = 0
        self.blocked_head: tuple[int, int] = (-1, -1)  # (job, avail_version) that did not fit
        self.free_bucket: list[set[int]] = [set() for _ in range(g + 1)]
        self.kube_home: set[int] = set()
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.now = 0.0
        # Jobs.
        n_jobs = len(self.jobs)
        self.remaining = [j.duration for j in self.jobs]
        self.epoch = [0] * n_jobs
        self.nodes_of: list[list[int]] = [[] for _ in range(n_jobs)]
        self.run_start = [0.0] * n_jobs
        # Nodes per block a running Slurm job gives back to Slurm when it ends.
        self.releases: list[dict[int, int]] = [{} for _ in range(n_jobs)]
        self.est_end = [0.0] * n_jobs
        self.done = 0
        self.preemptions = 0
        self.pending: list[tuple[int, float, int]] = []  # (-priority, submit, job)
        self.running_by_end: list[tuple[float, int]] = []
        self.queues: dict[str, deque[int]] = {}  # Kubernetes teams, in order of first pod
        self.team_used: dict[str, int] = {}
        self.team_weight = {t: max(w, 1e-9) for t, w in teams.items()}
        self.kube_admitted = 0
        self.kube_nodes = 0  # nodes owned by Kubernetes or on their way there
        self.slurm_dirty = self.kube_dirty = self.bf_dirty = False
        self.tick_at = math.inf
        self.planned: set[int] = set()
        self.straddles = self.extra_spans = self.lends = 0
        self.lend_ms: list[float] = []
        self.ledger = GoodputLedger((0.0, horizon), teams)
        self._init_nodes()
        self.snapshot_dirty: set[int] = set()
        self.snapshot = (
            Snapshot.of(self._placement_node(n) for n in range(n_nodes)) if self.sharing else None
        )
        self._init_failures(seed)

    # --- setup --------------------------------------------------------------------

    def _init_nodes(self) -> None:
        g = self.g
        kube_blocks = self.policy.kubernetes_blocks if isinstance(self.policy, StaticSplit) else 0
        first_kube_block = self.n_blocks - kube_blocks
        pool_of = {Side.SLURM: "slurm", Side.KUBERNETES: "kubernetes"}
        for n, name in enumerate(self.names):
            b = self.block[n]
            owner = Side.KUBERNETES if b >= first_kube_block else Side.SLURM
            if isinstance(self.policy, StaticSplit):
                pool, transferable = pool_of[owner], False
            else:
                pool, transferable = "fleet", True
            if not self.unified:
                self.ledger.observe(NodeAdded(self.t0, name, g, owner, pool, transferable))
            if owner is Side.KUBERNETES:
                self.state[n] = KUBE
                self.kube_home.add(n)
                self.free_bucket[g].add(n)
                self.kube_nodes += 1
            else:
                self._make_available(n, kube=False)
        if self.unified:
            # The ideal pool is one node to the ledger: a job is one allocation of its GPUs.
            self.ledger.observe(
                NodeAdded(self.t0, _POOL, self.fleet.gpus, Side.SLURM, "fleet", True)
            )
        if isinstance(self.policy, StaticSplit):
            self.kube_capacity = kube_blocks * self.fleet.nodes_per_block * g
            self.kube_capacity = min(self.kube_capacity, len(self.kube_home) * g)
            self.max_kube_nodes = len(self.kube_home)
        elif self.sharing is not None:
            self.max_kube_nodes = int(self.sharing.max_lent_share * self.fleet.nodes)
            self.kube_capacity = self.max_kube_nodes * g
        else:
            self.max_kube_nodes = self.kube_capacity = 0

    def _init_failures(self, seed: int) -> None:
        rate = self.failures.per_node_day * self.fleet.nodes / 86400.0
        if rate <= 0:
            return
        rng = random.Random(seed * 104729 + 3)  # same failures for every policy of a seed
        t = rng.expovariate(rate)
        while t < self.horizon:
            self._push(t, _FAIL, rng.randrange(self.fleet.nodes), 0)
            t += rng.expovariate(rate)

    def _push(self, t: float, kind: int, subject: int, epoch: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, subject, epoch))

    # --- main loop ------------------------------------------------------------------

    def loop(self) -> None:
        jobs, heap = self.jobs, self.heap
        ai, n_jobs = 0, len(jobs)
        handlers = {
            _SLURM_END: self._slurm_end,
            _SLURM_BOOTED: self._slurm_booted,
            _POD_END: self._pod_end,
            _HANDOVER: self._handover,
            _FAIL: self._fail,
            _REPAIR: self._repair,
            _TICK: self._tick,
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
                self._push(self.tick_at, _TICK, 0, 0)
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
        if job.side is Side.SLURM or self.unified:
            insort(self.pending, (-job.priority, job.submit, j))
            self.slurm_dirty = self.bf_dirty = True
        else:
            self.queues.setdefault(job.team, deque()).append(j)
            self.team_used.setdefault(job.team, 0)
            self.kube_dirty = True

    # --- Slurm side -----------------------------------------------------------------

    def _counts(self) -> list[int]:
        return list(self.count)

    def _make_available(self, n: int, *, kube: bool) -> None:
        b = self.block[n]
        group = self.avail_kube[b] if kube else self.avail_idle[b]
        if n not in group:
            group.add(n)
            self.count[b] += 1
            self.avail_version += 1

    def _make_unavailable(self, n: int) -> None:
        b = self.block[n]
        for group in (self.avail_idle[b], self.avail_kube[b]):
            if n in group:
                group.discard(n)
                self.count[b] -= 1
                self.avail_version += 1

    def _main_pass(self) -> None:
        self.slurm_dirty = False
        while self.pending:
            j = self.pending[0][2]
            if self.blocked_head == (j, self.avail_version):
                return  # nothing was freed since the head last failed to fit
            counts = self._counts()
            takes = self._choose(counts, j)
            if takes is None:
                self.blocked_head = (j, self.avail_version)
                return
            self.pending.pop(0)
            self._start_slurm(j, takes, counts)

    def _choose(self, counts: list[int], j: int) -> tuple[tuple[int, int], ...] | None:
        job = self.jobs[j]
        need = job.members
        if job.single_block:
            if max(counts) < need:
                return None
        elif sum(counts) < need:
            return None
        takes = choose_blocks(counts, need, single_block=job.single_block, affinity=self.leaf)
        if takes is None:
            return None
        return tuple((t.index, t.nodes) for t in takes)

    def _start_slurm(self, j: int, takes: tuple[tuple[int, int], ...], counts: list[int]) -> None:
        job = self.jobs[j]
        if len(takes) > 1:
            needed = 1 if job.single_block else min_blocks_needed(counts, job.members)
            if needed is not None and len(takes) > needed:
                self.extra_spans += 1
        nodes: list[int] = []
        resume = False
        for b, count in takes:
            idle, kube = self.avail_idle[b], self.avail_kube[b]
            self.count[b] -= count
            self.avail_version += 1
            for _ in range(count):
                if idle:
                    n = idle.pop()
                    self.state[n] = BUSY
                else:
                    n = kube.pop()
                    self._leave_kube(n)
                    self.state[n] = RESUMING
                    resume = True
                    self.ledger.observe(NodeTransferBegan(self.now, self.names[n], Side.SLURM))
                self.job_on[n] = j
                nodes.append(n)
        if self.sharing is not None:
            self.snapshot_dirty.update(nodes)
        if job.single_block and len({self.block[n] for n in nodes}) > 1:
            self.straddles += 1
        self.nodes_of[j] = nodes
        releases: dict[int, int] = {}
        for n in nodes:
            releases[self.block[n]] = releases.get(self.block[n], 0) + 1
        self.releases[j] = releases
        delay = self.sharing.slurmd_start_s if resume and self.sharing else 0.0
        self.est_end[j] = self.now + delay + max(job.estimate, self.remaining[j])
        insort(self.running_by_end, (self.est_end[j], j))
        if resume:
            self._push(self.now + delay, _SLURM_BOOTED, j, self.epoch[j])
        else:
            self._run_slurm(j)

    def _leave_kube(self, n: int) -> None:
        """An empty Kubernetes node is taken by Slurm."""
        self.free_bucket[self.g - self.kube_used[n]].discard(n)
        self.kube_nodes -= 1

    def _slurm_booted(self, j: int, epoch: int) -> None:
        if epoch != self.epoch[j]:
            return
        for n in self.nodes_of[j]:
            if self.state[n] == RESUMING:
                self.state[n] = BUSY
                self.ledger.observe(NodeTransferEnded(self.now, self.names[n], Side.SLURM))
        self._run_slurm(j)

    def _run_slurm(self, j: int) -> None:
        self.run_start[j] = self.now
        if self.unified:
            nodes: tuple[str, ...] = (_POOL,)
        else:
            nodes = tuple(self.names[n] for n in self.nodes_of[j])
        self.ledger.observe(JobStarted(self.now, self.jobs[j].name, nodes))
        self._push(self.now + self.remaining[j], _SLURM_END, j, self.epoch[j])

    def _slurm_end(self, j: int, epoch: int) -> None:
        if self._finished(j, epoch):
            self._release_slurm(j)

    def _finished(self, j: int, epoch: int) -> bool:
        """Record the end of job `j` unless the event is stale (the job was requeued since)."""
        if epoch != self.epoch[j]:
            return False
        self.ledger.observe(JobEnded(self.now, self.jobs[j].name))
        self.done += 1
        return True

    def _release_slurm(self, j: int) -> None:
        running = self.running_by_end
        del running[bisect_left(running, (self.est_end[j], j))]
        lend_delay = self.sharing.drain_s + self.sharing.pod_start_s if self.sharing else 0.0
        if self.sharing is not None:
            self.snapshot_dirty.update(self.nodes_of[j])
        for n in self.nodes_of[j]:
            self.job_on[n] = -1
            if self.state[n] == DRAINING:
                self.state[n] = LENDING
                self._push(self.now + lend_delay, _HANDOVER, n, 0)
            elif self.state[n] == RESUMING:
                # Never booted (preempted while resuming): it stays Slurm's, idle.
                self.ledger.observe(NodeTransferEnded(self.now, self.names[n], Side.SLURM))
                self.state[n] = IDLE
                self._make_available(n, kube=False)
            elif self.state[n] == BUSY:
                self.state[n] = IDLE
                self._make_available(n, kube=False)
        self.nodes_of[j] = []
        self.slurm_dirty = self.bf_dirty = self.kube_dirty = True

    def _tick(self, _subject: int, _epoch: int) -> None:
        self.tick_at = math.inf
        if not self.bf_dirty or not self.pending:
            return
        self.bf_dirty = False
        self._backfill()

    def _backfill(self) -> None:
        """EASY: plan the head at its shadow time, start later jobs that do not delay it."""
        self._main_pass()
        if not self.pending:
            self._set_planned(set())
            return
        head = self.pending[0][2]
        counts = self._counts()
        future = list(counts)
        shadow = math.inf
        head_takes: tuple[tuple[int, int], ...] | None = None
        need, single = self.jobs[head].members, self.jobs[head].single_block
        # Releases in time-limit order until the head fits; fit is tested on the running
        # total (or the fullest block) first, so choose_blocks runs once per pass.
        total, fullest = sum(future), max(future)
        for est_end, j in self.running_by_end:
            if single:
                for b, count in self.releases[j].items():
                    future[b] += count
                    fullest = max(fullest, future[b])
                if fullest < need:
                    continue
            else:
                for b, count in self.releases[j].items():
                    future[b] += count
                    total += count
                if total < need:
                    continue
            head_takes = self._choose(future, head)
            if head_takes is not None:
                shadow = est_end
                break
        extra = list(future)
        planned: set[int] = set()
        if head_takes is not None and self.sharing is not None:
            for b, count in head_takes:
                extra[b] -= count
                held = min(count, counts[b])
                planned.update(sorted(self.avail_idle[b])[:held])
        started: set[int] = set()
        failed_short = failed_long = 1 << 30
        failed_single_short = failed_single_long = 1 << 30
        limit = min(len(self.pending), BF_MAX_JOB_TEST)
        total = sum(counts)
        usable_long = [min(c, e) for c, e in zip(counts, extra, strict=True)]
        for i in range(1, limit):
            if total == 0:
                break
            j = self.pending[i][2]
            job = self.jobs[j]
            need = job.members
            if need > total:
                continue
            long = self.now + max(job.estimate, self.remaining[j]) > shadow
            if job.single_block:
                bound = failed_single_long if long else failed_single_short
            else:
                bound = failed_long if long else failed_short
            if need >= bound:
                continue
            usable = usable_long if long else counts
            takes = self._choose(usable, j)
            if takes is None:
                if job.single_block and long:
                    failed_single_long = need
                elif job.single_block:
                    failed_single_short = need
                elif long:
                    failed_long = need
                else:
                    failed_short = need
                continue
            self._start_slurm(j, takes, usable)
            started.add(j)
            planned -= set(self.nodes_of[j])
            for b, count in takes:
                counts[b] -= count
                total -= count
                if long:
                    extra[b] -= count
                usable_long[b] = min(counts[b], extra[b])
        if started:
            self.pending = [p for p in self.pending if p[2] not in started]
        self._set_planned(planned)

    def _set_planned(self, planned: set[int]) -> None:
        if self.sharing is not None:
            self.snapshot_dirty |= planned ^ self.planned
        self.planned = planned

    # --- Kubernetes side ------------------------------------------------------------

    def _kube_pass(self) -> None:
        self.kube_dirty = False
        blocked: set[str] = set()
        queues, used, weight = self.queues, self.team_used, self.team_weight
        while True:
            best: str | None = None
            best_ratio = math.inf
            for team, queue in queues.items():
                if queue and team not in blocked:
                    ratio = used[team] / weight.get(team, 1e-9)
                    if ratio < best_ratio:
                        best, best_ratio = team, ratio
            if best is None:
                return
            j = queues[best][0]
            if not self._admit_pod(j):
                blocked.add(best)
                continue
            queues[best].popleft()

    def _admit_pod(self, j: int) -> bool:
        job = self.jobs[j]
        need = job.gpus_per_member
        if self.kube_admitted + need > self.kube_capacity:
            return False
        node = self._best_fit(need)
        if node is not None:
            self._place_pod(j, node)
        else:
            node = next((n for n, s in self.spare.items() if s >= need), None)
            if node is None:
                node = self._lend(j)
                if node is None:
                    return False
            self.spare[node] -= need
            self.bound.setdefault(node, []).append(j)
        self.kube_admitted += need
        self.team_used[job.team] = self.team_used.get(job.team, 0) + need
        return True

    def _best_fit(self, need: int) -> int | None:
        buckets = self.free_bucket
        for free in range(need, self.g + 1):
            bucket = buckets[free]
            if bucket:
                for n in bucket:
                    return n
        return None

    def _place_pod(self, j: int, n: int) -> None:
        job = self.jobs[j]
        g, used = self.g, self.kube_used[n]
        self.free_bucket[g - used].discard(n)
        if used == 0 and self.sharing is not None:
            self._make_unavailable(n)
            self.snapshot_dirty.add(n)
        used += job.gpus_per_member
        self.kube_used[n] = used
        if used < g:
            self.free_bucket[g - used].add(n)
        self.pods_on[n].add(j)
        self.nodes_of[j] = [n]
        self.run_start[j] = self.now
        self.ledger.observe(JobStarted(self.now, job.name, (self.names[n],)))
        self._push(self.now + self.remaining[j], _POD_END, j, self.epoch[j])

    def _pod_end(self, j: int, epoch: int) -> None:
        if self._finished(j, epoch):
            self._release_pod(j)

    def _release_pod(self, j: int) -> None:
        job = self.jobs[j]
        n = self.nodes_of[j][0]
        self.nodes_of[j] = []
        self.pods_on[n].discard(j)
        g, used = self.g, self.kube_used[n]
        self.kube_admitted -= job.gpus_per_member
        self.team_used[job.team] -= job.gpus_per_member
        self.kube_dirty = True
        if self.state[n] != KUBE:
            return
        self.free_bucket[g - used].discard(n)
        used -= job.gpus_per_member
        self.kube_used[n] = used
        self.free_bucket[g - used].add(n)
        if used == 0 and self.sharing is not None:
            self._make_available(n, kube=True)
            self.snapshot_dirty.add(n)
            self.slurm_dirty = self.bf_dirty = True

    def _lend(self, j: int) -> int | None:
        sharing = self.sharing
        if sharing is None or self.snapshot is None or self.kube_nodes >= self.max_kube_nodes:
            return None
        job = self.jobs[j]
        started = time.perf_counter()
        if self.snapshot_dirty:
            self.snapshot = self.snapshot.with_nodes(
                self._placement_node(n) for n in self.snapshot_dirty
            )
            self.snapshot_dirty.clear()
        request = GangRequest(
            name=job.name,
            nodes=1,
            gpus_per_node=job.gpus_per_member,
            block_policy=BlockPolicy.MIN_BLOCKS,
            allow_busy=sharing.wait_for_idle,
        )
        decision = place(self.snapshot, request)
        self.lend_ms.append((time.perf_counter() - started) * 1000.0)
        if not decision.placed:
            return None
        n = self.index[decision.nodes[0]]
        self.lends += 1
        self.kube_nodes += 1
        self.snapshot_dirty.add(n)
        self.ledger.observe(NodeTransferBegan(self.now, self.names[n], Side.KUBERNETES))
        if self.state[n] == IDLE:
            self._make_unavailable(n)
            self.state[n] = LENDING
            self._push(self.now + sharing.drain_s + sharing.pod_start_s, _HANDOVER, n, 0)
        else:  # busy: reserved now, handed over when its job ends (WaitForIdle)
            self.state[n] = DRAINING
            self.releases[self.job_on[n]][self.block[n]] -= 1
        self.spare[n] = self.g
        self.planned.discard(n)
        return n

    def _placement_node(self, n: int) -> Node:
        s = self.state[n]
        if s == IDLE:
            state = NodeState.UNAVAILABLE if n in self.planned else NodeState.IDLE
        elif s == BUSY:
            state = NodeState.BUSY
        elif s == KUBE:
            state = NodeState.FREE if self.kube_used[n] == 0 else NodeState.LENT
        elif s in (DRAINING, LENDING):
            state = NodeState.LENT
        else:
            state = NodeState.UNAVAILABLE
        j = self.job_on[n]
        b = self.block[n]
        return Node(
            name=self.names[n],
            block=self.block_names[b],
            gpus=self.g,
            state=state,
            tier_path=self.tier_paths[b],
            busy_priority=self.jobs[j].priority if j >= 0 else 0,
            busy_until=self.est_end[j] if j >= 0 else 0.0,
        )

    def _handover(self, n: int, _epoch: int) -> None:
        if self.state[n] != LENDING:
            return  # failed while in flight
        self.state[n] = KUBE
        self.snapshot_dirty.add(n)
        self.ledger.observe(NodeTransferEnded(self.now, self.names[n], Side.KUBERNETES))
        self.spare.pop(n, None)
        self.kube_used[n] = 0
        self.free_bucket[self.g].add(n)
        for j in self.bound.pop(n, []):
            self._place_pod(j, n)
        if self.kube_used[n] == 0 and self.sharing is not None:
            self._make_available(n, kube=True)
        self.kube_dirty = True

    # --- failures -------------------------------------------------------------------

    def _fail(self, n: int, _epoch: int) -> None:
        s = self.state[n]
        if s == DOWN:
            return
        j = self.job_on[n]
        if j >= 0:
            self._preempt_slurm(j)
            s = self.state[n]
        for pod in sorted(self.pods_on[n]):
            self._preempt_pod(pod)
        for pod in self.bound.pop(n, []):
            self._requeue_pod(pod)
        self._make_unavailable(n)
        self.free_bucket[self.g - self.kube_used[n]].discard(n)
        self.spare.pop(n, None)
        if s in (KUBE, LENDING, DRAINING):
            self.kube_nodes -= 1
        if s in (LENDING, DRAINING):
            self.ledger.observe(NodeTransferEnded(self.now, self.names[n], Side.KUBERNETES))
        self.state[n] = DOWN
        self.kube_used[n] = 0
        self.planned.discard(n)
        self.snapshot_dirty.add(n)
        self.ledger.observe(NodeHealthChanged(self.now, self.names[n], Health.DOWN))
        self._push(self.now + self.failures.repair_s, _REPAIR, n, 0)
        self.slurm_dirty = self.bf_dirty = self.kube_dirty = True

    def _repair(self, n: int, _epoch: int) -> None:
        name = self.names[n]
        home_kube = n in self.kube_home and self.sharing is None
        owner = Side.KUBERNETES if home_kube else Side.SLURM
        self.ledger.observe(NodeTransferBegan(self.now, name, owner))
        self.ledger.observe(NodeTransferEnded(self.now, name, owner))
        self.ledger.observe(NodeHealthChanged(self.now, name, Health.UP))
        if home_kube:
            self.state[n] = KUBE
            self.free_bucket[self.g].add(n)
            self.kube_nodes += 1
        else:
            self.state[n] = IDLE
            self._make_available(n, kube=False)
        self.snapshot_dirty.add(n)
        self.slurm_dirty = self.bf_dirty = self.kube_dirty = True

    def _preempt_slurm(self, j: int) -> None:
        self.preemptions += 1
        job = self.jobs[j]
        self.ledger.observe(JobPreempted(self.now, job.name))
        if self.state[self.nodes_of[j][0]] != RESUMING and self.run_start[j] <= self.now:
            ran = self.now - self.run_start[j]
            self.remaining[j] = max(60.0, self.remaining[j] - ran) + self.failures.restart_penalty_s
        self.epoch[j] += 1
        self._release_slurm(j)
        insort(self.pending, (-job.priority, job.submit, j))

    def _preempt_pod(self, j: int) -> None:
        self.preemptions += 1
        ran = self.now - self.run_start[j]
        self.remaining[j] = max(1.0, self.remaining[j] - ran)
        self.ledger.observe(JobPreempted(self.now, self.jobs[j].name))
        self.epoch[j] += 1
        self._release_pod(j)
        self.queues[self.jobs[j].team].appendleft(j)

    def _requeue_pod(self, j: int) -> None:
        job = self.jobs[j]
        self.kube_admitted -= job.gpus_per_member
        self.team_used[job.team] -= job.gpus_per_member
        self.queues[job.team].appendleft(j)
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
        )
