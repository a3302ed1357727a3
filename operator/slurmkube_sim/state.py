"""The state of one simulated run: per-node lists, per-block sets, the event heap.

The engine's working memory, kept in flat lists so 100k jobs on 2,000 nodes
run in seconds. The behaviour that changes it is layered on top, one concern a
module: `slurm_side` (main scheduler and EASY backfill), `pods` (Kubernetes pods
on nodes), `lending` (Kueue admission and the bridge), `failures`, and
`engine` (the event loop).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurmkube.goodput import GoodputLedger, JobEnded, NodeAdded, Side
from slurmkube.lending.sharing import ArrivalRate, BlockView
from slurmkube.placement import Snapshot
from slurmkube_sim.fleet import FleetSpec
from slurmkube_sim.policy import Policy, Sharing, StaticSplit, UpperBound
from slurmkube_sim.workload import SimJob

# Node states.
IDLE, BUSY, DRAINING, LENDING, KUBE, RESUMING, DOWN = range(7)
# Event kinds (heap entries are (time, seq, kind, subject, epoch)).
SLURM_END, SLURM_BOOTED, POD_END, HANDOVER, FAIL, REPAIR, TICK, SIGNAL, CLEAR, RETURN = range(10)
BF_INTERVAL_S = 30.0
# The metrics cover [WINDOW_START, horizon); jobs submitted before it are already running.
WINDOW_START = 0.0
IDEAL_POOL = "ideal-pool"
BF_MAX_JOB_TEST = 500


@dataclass(frozen=True, slots=True)
class FailureModel:
    """The world's faults (the same for every policy of a seed); see `faults`."""

    # 419 unexpected interruptions / (54 days * 2,048 nodes), Llama 3 §3.3.4.
    per_node_day: float = 419 / (54 * 2048)
    repair_s: float = 4 * 3600.0  # our assumption: diagnose, swap, burn-in
    restart_penalty_s: float = 600.0  # reload the last checkpoint
    # A killed job keeps its work up to its last checkpoint, taken every this many
    # seconds of run time (0: up to the failure itself).
    checkpoint_s: float = 0.0
    # Share of failures a health signal announces first (the node turns sick, then dies).
    signalled_share: float = 0.0
    # Mean time from a failure's first signal to the failure (exponential).
    signal_lead_s: float = 2 * 3600.0
    # Signals that never turn into a failure, per signal that does.
    false_signals_per_failure: float = 0.0
    # Mean time until such a signal clears by itself (exponential).
    signal_clear_s: float = 3600.0


NO_FAILURES = FailureModel(per_node_day=0.0)
DEFAULT_FAILURES = FailureModel()


@dataclass(frozen=True, slots=True)
class HealthAware:
    """Placement that acts on health signals, as `slurmkube.plan.health` decides live.

    A sick node is drained at its first signal: it takes no new job or pod and its
    running jobs finish (`requeue_on_signal`: they are requeued at once, after a
    checkpoint, as the health rule's `fatal` severity does). It returns once its
    signal cleared and an active check of `check_s` passed. A domain with at least
    `domain_out_share` of its nodes out (down or drained) is withheld from gangs of
    the block size or more (`rackEscalation.domainSickShare`; live, the planner
    reports such a domain but nothing withholds it yet).
    """

    requeue_on_signal: bool = False
    check_s: float = 600.0
    domain_out_share: float = 0.5

    @property
    def label(self) -> str:
        return "health-aware-requeue" if self.requeue_on_signal else "health-aware-drain"


def kubernetes_entitled(
    teams: Mapping[str, float], kube_teams: Iterable[str], nodes: int, sharing: Sharing
) -> int:
    """Nodes Kubernetes is entitled to: `sharing.kubernetes_share` of them, else the
    Kubernetes teams' share of the teams' weights."""
    share = sharing.kubernetes_share
    if share is None:
        kube = set(kube_teams)
        total = sum(teams.values()) or 1.0
        share = sum(w for t, w in teams.items() if t in kube) / total
    return int(share * nodes)


class RunState:
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
        health: HealthAware | None = None,
    ) -> None:
        self.fleet = fleet
        self.health = health
        self.policy = policy
        self.sharing = policy if isinstance(policy, Sharing) else None
        self.unified = isinstance(policy, UpperBound)
        self.failures = failures
        self.seed = seed
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
        self.kube_in_block = [0] * self.n_blocks  # the same, per block
        self.down_in_block = [0] * self.n_blocks
        # Health: nodes signalling (either placement), nodes drained for it (health-aware).
        self.sick: set[int] = set()
        self.signals: dict[int, set[int]] = {}  # sick node -> its active signals (fault index)
        self.down: set[int] = set()
        self.withheld: set[int] = set()
        self.withheld_in_block = [0] * self.n_blocks
        self.escalated: set[int] = set()  # blocks withheld from block-size gangs
        self.unreleased: set[int] = set()  # withheld under a job: not in its releases
        self.node_episode = [0] * n_nodes  # bumped by every signal and failure
        self.kills = self.requeues = self.escalations = 0
        self.placed_on_down = self.placed_on_sick = 0  # decisions checked: must stay 0
        self.lost_gpu_s = 0.0
        self.block_size = [0] * self.n_blocks
        for b in self.block:
            self.block_size[b] += 1
        self.cordoned: set[int] = set()  # lent nodes taking no new pods (going back to Slurm)
        self.block_index = {name: b for b, name in enumerate(self.block_names)}
        self.nodes_in_block: list[list[int]] = [[] for _ in range(self.n_blocks)]
        for n, b in enumerate(self.block):
            self.nodes_in_block[b].append(n)
        self.kube_entitled = self._kube_entitled(teams)
        self.views_key: tuple[float, int, int, int, int] | None = None
        self.views: list[BlockView] = []
        # Arrivals since the window opened (Slurm in nodes, Kubernetes in GPUs), learnt.
        self.slurm_rate = self.kube_rate = ArrivalRate()
        self.headroom_at = -math.inf
        self.slurm_dirty = self.kube_dirty = self.bf_dirty = False
        self.tick_at = math.inf
        self.planned: set[int] = set()
        self.straddles = self.extra_spans = self.lends = 0
        self.lend_ms: list[float] = []
        self.ledger = GoodputLedger((WINDOW_START, horizon), teams)
        self._init_nodes()
        self.snapshot_dirty: set[int] = set()
        # The placer's view of the fleet (sharing only), built by the lending layer.
        self.snapshot: Snapshot | None = None

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
                self._own(n, 1)
            else:
                self._make_available(n, kube=False)
        if self.unified:
            # The ideal pool is one node to the ledger: a job is one allocation of its GPUs.
            self.ledger.observe(
                NodeAdded(self.t0, IDEAL_POOL, self.fleet.gpus, Side.SLURM, "fleet", True)
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

    def _kube_entitled(self, teams: Mapping[str, float]) -> int:
        """Nodes Kubernetes is entitled to under sharing: its share, else its teams' weights."""
        if self.sharing is None:
            return 0
        kube_teams = {j.team for j in self.jobs if j.side is Side.KUBERNETES}
        return kubernetes_entitled(teams, kube_teams, self.fleet.nodes, self.sharing)

    def _push(self, t: float, kind: int, subject: int, epoch: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, subject, epoch))

    def _counts(self) -> list[int]:
        return list(self.count)

    def _make_available(self, n: int, *, kube: bool) -> None:
        if n in self.withheld:
            return  # drained for health: back only through its check
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

    def _leave_kube(self, n: int) -> None:
        """An empty Kubernetes node is taken by Slurm."""
        self.free_bucket[self.g - self.kube_used[n]].discard(n)
        self.cordoned.discard(n)
        self._own(n, -1)

    def _own(self, n: int, delta: int) -> None:
        """Node `n` joins (+1) or leaves (-1) the nodes Kubernetes holds."""
        self.kube_nodes += delta
        self.kube_in_block[self.block[n]] += delta

    def _finished(self, j: int, epoch: int) -> bool:
        """Record the end of job `j` unless the event is stale (the job was requeued since)."""
        if epoch != self.epoch[j]:
            return False
        self.ledger.observe(JobEnded(self.now, self.jobs[j].name))
        self.done += 1
        return True
