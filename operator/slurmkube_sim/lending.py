"""Kueue-like admission and the bridge: pods admitted by fair share, nodes lent to them.

A pod that fits no Kubernetes node gets a node lent by the bridge: where
`slurmkube.lending.sharing` says, from per-block counts of this run's
state, or (`Sharing(lending=None)`) the node `slurmkube.placement.place`
finds on a live snapshot. The policy's `reclaim` runs at every backfill tick:
lent nodes of the blocks it names take no new pods (`cordoned`).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from slurmkube.goodput import NodeTransferBegan, NodeTransferEnded, Side
from slurmkube.lending.sharing import (
    BlockView,
    Demand,
    SharingPolicy,
    choose_lends,
    expected,
    headroom_lends,
    reclaim,
)
from slurmkube.placement import BlockPolicy, GangRequest, Node, NodeState, place
from slurmkube_sim.pods import PodSide
from slurmkube_sim.state import BUSY, DRAINING, HANDOVER, IDLE, KUBE, LENDING, WINDOW_START
from slurmkube_sim.workload import SimJob

# Headroom is topped up in rounds, as the bridge would (not on every pod event).
HEADROOM_ROUND_S = 30.0


class LendingSide(PodSide):
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
                if self.cordoned and not self.pending:
                    self.cordoned = set()  # Slurm waits for nothing: lent nodes stay
                self._keep_headroom()
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

    def _lend(self, j: int) -> int | None:
        sharing = self.sharing
        if sharing is None or self.kube_nodes >= self.max_kube_nodes:
            return None
        if sharing.lending is not None:
            return self._lend_by_policy(sharing.lending)
        return self._lend_by_placement(j)

    def _lend_by_policy(self, policy: SharingPolicy) -> int | None:
        started = time.perf_counter()
        takes = choose_lends(self._block_views(policy), 1, self._demand(policy), policy)
        self.lend_ms.append((time.perf_counter() - started) * 1000.0)
        if not takes:
            return None
        b = self.block_index[takes[0][0]]
        n = min(self.avail_idle[b] - self.planned)
        self._begin_lend(n)
        return n

    def _block_views(self, policy: SharingPolicy) -> list[BlockView]:
        # Refused lends repeat at one instant for every blocked team: build the views once.
        key = (self.now, self.avail_version, self.kube_nodes, id(self.planned), len(self.planned))
        if self.views_key != key:
            self.views_key, self.views = key, self._build_block_views(policy)
        return self.views

    def _build_block_views(self, policy: SharingPolicy) -> list[BlockView]:
        held = [0] * self.n_blocks
        for n in self.planned:
            if n in self.avail_idle[self.block[n]]:
                held[self.block[n]] += 1
        soon = [0] * self.n_blocks
        until = self.now + policy.horizon_s
        for est_end, j in self.running_by_end:
            if est_end > until:
                break
            for b, count in self.releases[j].items():
                soon[b] += count
        views = []
        for b in range(self.n_blocks):
            idle = len(self.avail_idle[b])
            lent = self.kube_in_block[b]
            busy = self.block_size[b] - idle - lent - self.down_in_block[b]
            views.append(
                BlockView(
                    name=self.block_names[b],
                    size=self.block_size[b],
                    idle=idle - held[b],
                    held=held[b],
                    busy=busy,
                    ending_soon=min(busy, soon[b]),
                    lent=lent,
                )
            )
        return views

    def _demand(self, policy: SharingPolicy) -> Demand:
        head = self.pending[: policy.queue_depth]
        return Demand(
            slurm_waiting=tuple(self.jobs[j].members for _, _, j in head),
            kubernetes_lent=self.kube_nodes,
            kubernetes_entitled=self.kube_entitled,
            slurm_expected=expected(
                self.slurm_rate, self.now, policy.horizon_s, policy.rate_half_life_s
            ),
        )

    def _learn(self, job: SimJob) -> None:
        """Arrivals feed each side's rate (jobs running when the window opens do not)."""
        sharing = self.sharing
        if sharing is None or sharing.lending is None or job.submit < WINDOW_START:
            return
        half_life = sharing.lending.rate_half_life_s
        if job.side is Side.SLURM:
            self.slurm_rate = self.slurm_rate.observe(self.now, job.members, half_life)
        else:
            self.kube_rate = self.kube_rate.observe(self.now, job.gpus, half_life)

    def _keep_headroom(self) -> None:
        """Lend ahead of demand what Kubernetes' arrivals need during one lend's delay."""
        sharing = self.sharing
        if sharing is None or sharing.lending is None or self.kube_nodes >= self.max_kube_nodes:
            return
        if self.now < self.headroom_at + HEADROOM_ROUND_S:
            return
        self.headroom_at = self.now
        policy = sharing.lending
        delay = sharing.drain_s + sharing.pod_start_s
        want = expected(self.kube_rate, self.now, delay, policy.rate_half_life_s)
        if want <= 0:
            return
        free = sum(k * len(nodes) for k, nodes in enumerate(self.free_bucket))
        free -= sum(self.g - self.kube_used[n] for n in self.cordoned)
        free += sum(self.spare.values())
        views = self._block_views(policy)
        demand = replace(self._demand(policy), kubernetes_entitled=0)
        count = headroom_lends(
            views, demand, policy, free_gpus=free, expected_gpus=want, gpus_per_node=self.g
        )
        for name, nodes in choose_lends(views, count, demand, policy):
            b = self.block_index[name]
            for n in sorted(self.avail_idle[b] - self.planned)[:nodes]:
                self._begin_lend(n)

    def _tick(self, subject: int, epoch: int) -> None:
        super()._tick(subject, epoch)
        if self.sharing is not None and self.sharing.lending is not None:
            self._cordon(self.sharing.lending)

    def _cordon(self, policy: SharingPolicy) -> None:
        """Lent nodes of the blocks the policy takes back get no new pods."""
        back = {
            self.block_index[name]
            for name in reclaim(self._block_views(policy), self._demand(policy), policy)
        }
        self.cordoned = {n for n in self.cordoned if self.block[n] in back}
        for b in back:
            self.cordoned.update(n for n in self.nodes_in_block[b] if self.state[n] == KUBE)

    def _lend_by_placement(self, j: int) -> int | None:
        sharing = self.sharing
        if sharing is None or self.snapshot is None:
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
        self._begin_lend(n)
        return n

    def _begin_lend(self, n: int) -> None:
        assert self.sharing is not None
        self.lends += 1
        self._own(n, 1)
        self.snapshot_dirty.add(n)
        self.ledger.observe(NodeTransferBegan(self.now, self.names[n], Side.KUBERNETES))
        if self.state[n] == IDLE:
            self._make_unavailable(n)
            self.state[n] = LENDING
            self._push(self.now + self._lend_delay(), HANDOVER, n, 0)
        else:  # busy: reserved now, handed over when its job ends (WaitForIdle)
            self.state[n] = DRAINING
            self.releases[self.job_on[n]][self.block[n]] -= 1
        self.spare[n] = self.g
        self.planned.discard(n)

    def _lend_delay(self) -> float:
        """Drain and pod start of an idle node lent now; none before the window opens.

        The pods running when it opens stand for a fleet that has been sharing for a
        while: their nodes were lent long before, not at the warm-up instant.
        """
        assert self.sharing is not None
        if self.now < WINDOW_START:
            return 0.0
        return self.sharing.drain_s + self.sharing.pod_start_s

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
        if n in self.withheld:
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
