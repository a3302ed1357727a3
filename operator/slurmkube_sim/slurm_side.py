"""The Slurm side of a run: priority/FIFO main scheduler and EASY backfill.

See `engine`'s docstring for the model and its sources.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort

from slurmkube.goodput import JobStarted, NodeTransferBegan, NodeTransferEnded, Side
from slurmkube.placement import choose_blocks, min_blocks_needed
from slurmkube_sim.state import (
    BF_MAX_JOB_TEST,
    BUSY,
    DRAINING,
    HANDOVER,
    IDEAL_POOL,
    IDLE,
    LENDING,
    RESUMING,
    SLURM_BOOTED,
    SLURM_END,
    RunState,
)


class SlurmSide(RunState):
    def _main_pass(self) -> None:
        self.slurm_dirty = False
        while self.pending:
            j = self.pending[0][2]
            if self.blocked_head == (j, self.avail_version):
                return  # nothing was freed since the head last failed to fit
            counts = self._counts()
            takes = self._choose_weighted(counts, j)
            if takes is None:
                self.blocked_head = (j, self.avail_version)
                return
            self.pending.pop(0)
            self._start_slurm(j, takes, counts)

    def _choose_weighted(self, counts: list[int], j: int) -> tuple[tuple[int, int], ...] | None:
        """Like `_choose`, but empty Kubernetes nodes only when idle Slurm nodes cannot hold
        the job in as few blocks (Slurm node `Weight`: returned nodes are used last), so
        the blocks Kubernetes holds stay its own while Slurm has other room."""
        if self.sharing is None or self.sharing.lending is None or not any(self.avail_kube):
            return self._choose(counts, j)
        takes = self._choose([len(idle) for idle in self.avail_idle], j)
        if takes is not None:
            job = self.jobs[j]
            needed = 1 if job.single_block else min_blocks_needed(counts, job.members)
            if needed is not None and len(takes) <= needed:
                return takes
        return self._choose(counts, j)

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
            self._push(self.now + delay, SLURM_BOOTED, j, self.epoch[j])
        else:
            self._run_slurm(j)

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
            nodes: tuple[str, ...] = (IDEAL_POOL,)
        else:
            nodes = tuple(self.names[n] for n in self.nodes_of[j])
        self.ledger.observe(JobStarted(self.now, self.jobs[j].name, nodes))
        self._push(self.now + self.remaining[j], SLURM_END, j, self.epoch[j])

    def _slurm_end(self, j: int, epoch: int) -> None:
        if self._finished(j, epoch):
            self._release_slurm(j)

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
                self._push(self.now + lend_delay, HANDOVER, n, 0)
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
        # Long jobs get only what the head does not need at its shadow time (every
        # policy: this is EASY's reservation); under sharing the head's idle nodes are
        # also held from the bridge (`planned`).
        extra = list(future)
        planned: set[int] = set()
        for b, count in head_takes or ():
            extra[b] -= count
            if self.sharing is not None:
                planned.update(sorted(self.avail_idle[b])[: min(count, counts[b])])
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
