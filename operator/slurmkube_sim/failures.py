"""Node failures and repairs: the jobs on a failed node are killed and requeued.

A killed job keeps its work up to its last checkpoint (`checkpoint_s`; 0: up
to the failure) and pays `restart_penalty_s` to reload it; a pod keeps its
work the same way, with no penalty. What is thrown away is counted
(`kills`, `lost_gpu_s`). The faults come from `faults.fault_schedule`.
"""

from __future__ import annotations

from bisect import insort

from slurmkube.goodput import (
    Health,
    JobPreempted,
    NodeHealthChanged,
    NodeTransferBegan,
    NodeTransferEnded,
    Side,
)
from slurmkube_sim.faults import Fault, FaultKind, fault_schedule
from slurmkube_sim.lending import LendingSide
from slurmkube_sim.state import (
    CLEAR,
    DOWN,
    DRAINING,
    FAIL,
    IDLE,
    KUBE,
    LENDING,
    REPAIR,
    RESUMING,
    SIGNAL,
)

_KINDS = {FaultKind.FAIL: FAIL, FaultKind.SIGNAL: SIGNAL, FaultKind.CLEAR: CLEAR}


class FailureSide(LendingSide):
    faults: tuple[Fault, ...] | None = None  # given ones (tests), else drawn for the seed

    def _init_failures(self, seed: int) -> None:
        if self.faults is None:
            self.faults = fault_schedule(
                self.failures, nodes=self.fleet.nodes, horizon=self.horizon, seed=seed
            )
        for i, fault in enumerate(self.faults):
            self._push(fault.t, _KINDS[fault.kind], fault.node, i)

    def _fail(self, n: int, _epoch: int) -> None:
        s = self.state[n]
        if s == DOWN:
            return
        j = self.job_on[n]
        if j >= 0:
            self._preempt_slurm(j, checkpointed=False)
            s = self.state[n]
        for pod in sorted(self.pods_on[n]):
            self._preempt_pod(pod, checkpointed=False)
        for pod in self.bound.pop(n, []):
            self._requeue_pod(pod)
        self._make_unavailable(n)
        self.free_bucket[self.g - self.kube_used[n]].discard(n)
        self.spare.pop(n, None)
        if s in (KUBE, LENDING, DRAINING):
            self._own(n, -1)
        if s in (LENDING, DRAINING):
            self.ledger.observe(NodeTransferEnded(self.now, self.names[n], Side.KUBERNETES))
        self.state[n] = DOWN
        self.down_in_block[self.block[n]] += 1
        self.cordoned.discard(n)
        self.kube_used[n] = 0
        self.planned.discard(n)
        self.snapshot_dirty.add(n)
        self.ledger.observe(NodeHealthChanged(self.now, self.names[n], Health.DOWN))
        self._push(self.now + self.failures.repair_s, REPAIR, n, 0)
        self.slurm_dirty = self.bf_dirty = self.kube_dirty = True

    def _repair(self, n: int, _epoch: int) -> None:
        name = self.names[n]
        home_kube = n in self.kube_home and self.sharing is None
        owner = Side.KUBERNETES if home_kube else Side.SLURM
        self.ledger.observe(NodeTransferBegan(self.now, name, owner))
        self.ledger.observe(NodeTransferEnded(self.now, name, owner))
        self.ledger.observe(NodeHealthChanged(self.now, name, Health.UP))
        self.down_in_block[self.block[n]] -= 1
        if home_kube:
            self.state[n] = KUBE
            self.free_bucket[self.g].add(n)
            self._own(n, 1)
        else:
            self.state[n] = IDLE
            self._make_available(n, kube=False)
        self.snapshot_dirty.add(n)
        self.slurm_dirty = self.bf_dirty = self.kube_dirty = True

    def _kept(self, ran: float, checkpointed: bool) -> float:
        """Run time a stopped job keeps: all of it when it checkpointed on the way out."""
        every = self.failures.checkpoint_s
        if checkpointed or every <= 0:
            return ran
        return ran - ran % every

    def _preempt_slurm(self, j: int, *, checkpointed: bool) -> None:
        self.preemptions += 1
        job = self.jobs[j]
        self.ledger.observe(JobPreempted(self.now, job.name))
        if self.state[self.nodes_of[j][0]] != RESUMING and self.run_start[j] <= self.now:
            ran = self.now - self.run_start[j]
            kept = self._kept(ran, checkpointed)
            penalty = self.failures.restart_penalty_s
            self.remaining[j] = max(60.0, self.remaining[j] - kept) + penalty
            self._count_stop(j, ran - kept + penalty, checkpointed)
        self.epoch[j] += 1
        self._release_slurm(j)
        insort(self.pending, (-job.priority, job.submit, j))

    def _preempt_pod(self, j: int, *, checkpointed: bool) -> None:
        self.preemptions += 1
        ran = self.now - self.run_start[j]
        kept = self._kept(ran, checkpointed)
        self.remaining[j] = max(1.0, self.remaining[j] - kept)
        self._count_stop(j, ran - kept, checkpointed)
        self.ledger.observe(JobPreempted(self.now, self.jobs[j].name))
        self.epoch[j] += 1
        self._release_pod(j)
        self.queues[self.jobs[j].team].appendleft(j)

    def _count_stop(self, j: int, lost_s: float, planned: bool) -> None:
        if planned:
            self.requeues += 1
        else:
            self.kills += 1
        self.lost_gpu_s += lost_s * self.jobs[j].gpus

    def _requeue_pod(self, j: int) -> None:
        job = self.jobs[j]
        self.kube_admitted -= job.gpus_per_member
        self.team_used[job.team] -= job.gpus_per_member
        self.queues[job.team].appendleft(j)
        self.kube_dirty = True
