"""Kubernetes pods on nodes: best fit over free GPUs, start, end."""

from __future__ import annotations

from slurmkube.goodput import JobStarted
from slurmkube_sim.slurm_side import SlurmSide
from slurmkube_sim.state import KUBE, POD_END


class PodSide(SlurmSide):
    def _best_fit(self, need: int) -> int | None:
        buckets, cordoned, withheld = self.free_bucket, self.cordoned, self.withheld
        for free in range(need, self.g + 1):
            bucket = buckets[free]
            if bucket:
                for n in bucket:
                    # Going back to Slurm, or drained for health: no new pods.
                    if n not in cordoned and n not in withheld:
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
        self._push(self.now + self.remaining[j], POD_END, j, self.epoch[j])

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
