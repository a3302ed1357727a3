"""Sick nodes, and the placement's answer to them: health-aware or naive.

A node turns sick at its first health signal (`faults`) and is well again
when all its signals cleared, or once it failed (the repair returns a
healthy node). Naive placement (`health=None`) ignores signals: it keeps
placing on a sick node until the node fails. Health-aware placement
(`state.HealthAware`) is what `slurmkube.plan.health` does live: the node is
drained at its first signal (the ledger sees it drained; its jobs finish, or
are requeued after a checkpoint with `requeue_on_signal`), nothing new lands
on it, and it returns only after its signals cleared and an active check
passed. A domain with `domain_out_share` of its nodes down or drained is
withheld from gangs of the block size or more.

Every placement decision is checked: on a down node (never allowed), on a
sick node (never allowed under health-aware placement); and a failure must
leave nothing on its node.
"""

from __future__ import annotations

from slurmkube.goodput import Health, NodeHealthChanged
from slurmkube_sim.failures import FailureSide
from slurmkube_sim.state import BUSY, DOWN, IDLE, KUBE, RESUMING, RETURN


class HealthSide(FailureSide):
    def _signal(self, n: int, i: int) -> None:
        if self.state[n] == DOWN:
            return  # a dead node signals nothing; its repair brings a healthy one
        active = self.signals.setdefault(n, set())
        active.add(i)
        self.sick.add(n)
        self.node_episode[n] += 1  # a check under way no longer proves anything
        if self.health is not None and n not in self.withheld:
            self._withhold(n)

    def _clear(self, n: int, i: int) -> None:
        active = self.signals.get(n)
        assert self.faults is not None
        key = self.faults[i].signal
        if active is None or key not in active:
            return  # its signal came while the node was down, or the node failed since
        active.discard(key)
        if active:
            return
        del self.signals[n]
        self.sick.discard(n)
        if self.health is not None and n in self.withheld:
            self._push(self.now + self.health.check_s, RETURN, n, self.node_episode[n])

    def _return(self, n: int, episode: int) -> None:
        """The active check passed: the node takes work again."""
        if episode != self.node_episode[n] or n not in self.withheld:
            return
        b = self.block[n]
        self.withheld.discard(n)
        self.withheld_in_block[b] -= 1
        self.ledger.observe(NodeHealthChanged(self.now, self.names[n], Health.UP))
        s, j = self.state[n], self.job_on[n]
        if s == IDLE:
            self._make_available(n, kube=False)
        elif s == KUBE and self.kube_used[n] == 0 and self.sharing is not None:
            self._make_available(n, kube=True)
        elif n in self.unreleased and j >= 0:
            self.releases[j][b] = self.releases[j].get(b, 0) + 1
        self.unreleased.discard(n)
        self.snapshot_dirty.add(n)
        self._update_escalation(b)
        self.slurm_dirty = self.bf_dirty = self.kube_dirty = True

    def _withhold(self, n: int) -> None:
        """Drain `n`: no new work; its jobs finish, or are requeued when the rule says so."""
        assert self.health is not None
        b = self.block[n]
        self.withheld.add(n)
        self.withheld_in_block[b] += 1
        self._make_unavailable(n)
        self.planned.discard(n)
        self.snapshot_dirty.add(n)
        self.ledger.observe(NodeHealthChanged(self.now, self.names[n], Health.DRAINED))
        for pod in self.bound.pop(n, []):  # waiting for this lent node: placed elsewhere
            self._requeue_pod(pod)
        self.spare.pop(n, None)
        j = self.job_on[n]
        if self.health.requeue_on_signal:
            if j >= 0:
                self._preempt_slurm(j, checkpointed=True)
            for pod in sorted(self.pods_on[n]):
                self._preempt_pod(pod, checkpointed=True)
        elif j >= 0 and self.state[n] in (BUSY, RESUMING):
            # Its job's end no longer frees it: the EASY plan must not count on it.
            self.releases[j][b] -= 1
            self.unreleased.add(n)
        self._update_escalation(b)
        self.slurm_dirty = self.bf_dirty = self.kube_dirty = True

    def _fail(self, n: int, epoch: int) -> None:
        if self.state[n] == DOWN:
            return
        self.node_episode[n] += 1
        self.signals.pop(n, None)
        self.sick.discard(n)
        self.unreleased.discard(n)
        if n in self.withheld:
            self.withheld.discard(n)
            self.withheld_in_block[self.block[n]] -= 1
        super()._fail(n, epoch)
        if self.job_on[n] >= 0 or self.pods_on[n] or n in self.bound:
            self.placed_on_down += 1  # work left on a dead node breaks the same rule
        self.down.add(n)
        self._update_escalation(self.block[n])

    def _repair(self, n: int, epoch: int) -> None:
        super()._repair(n, epoch)
        self.down.discard(n)
        self._update_escalation(self.block[n])

    def _update_escalation(self, b: int) -> None:
        if self.health is None:
            return
        out = self.down_in_block[b] + self.withheld_in_block[b]
        escalate = out > 0 and out >= self.health.domain_out_share * self.block_size[b] - 1e-9
        if escalate == (b in self.escalated):
            return
        if escalate:
            self.escalated.add(b)
            self.escalations += 1
        else:
            self.escalated.discard(b)
        self.avail_version += 1  # the queue head may fit (or not) now

    # --- placement: escalated domains, and every decision checked -------------------

    def _for_job(self, counts: list[int], j: int) -> list[int]:
        """`counts` as job `j` may use them: escalated domains hidden from block-size gangs."""
        if not self.escalated or self.jobs[j].members < self.fleet.nodes_per_block:
            return counts
        return [0 if b in self.escalated else c for b, c in enumerate(counts)]

    def _choose(self, counts: list[int], j: int) -> tuple[tuple[int, int], ...] | None:
        return super()._choose(self._for_job(counts, j), j)

    def _start_slurm(self, j: int, takes: tuple[tuple[int, int], ...], counts: list[int]) -> None:
        super()._start_slurm(j, takes, self._for_job(counts, j))
        self._check_placed(self.nodes_of[j])

    def _place_pod(self, j: int, n: int) -> None:
        self._check_placed([n])
        super()._place_pod(j, n)

    def _check_placed(self, nodes: list[int]) -> None:
        if any(n in self.down for n in nodes):
            self.placed_on_down += 1
        if any(n in self.sick for n in nodes):
            self.placed_on_sick += 1
