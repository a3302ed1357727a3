"""busyNodes policies: what happens to Slurm jobs still running on reserved nodes (pure).

WaitForIdle waits for every job. Requeue stops a workload from waiting behind
low-priority batch work: once `graceSeconds` have passed since the reservation,
running jobs below `requeueBelowPriority` are requeued. A job at or above that
priority, or one Slurm cannot requeue (`--no-requeue`, not a batch job:
`_job_requeue_op` in src/slurmctld/job_mgr.c refuses both), is waited for as
under WaitForIdle, within the same timeout.

Jobs are requeued only when that frees every busy reserved node at once: while
a protected job holds one of them the workload waits anyway, and stopping the
others would throw away their work for nothing. Once the protected jobs end,
the next round requeues the rest.

Requeue, never cancel: `scontrol requeue` puts the job back to PENDING under the
same id (Restarts counts it), and the reservation keeps Slurm from starting it
on the reserved nodes again, so it runs elsewhere or after they are returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurmkube.lending.model import JobRequeue, NodeView, RequeuePolicy, RunningJob

# Above every Slurm job priority (uint32): a job Slurm cannot requeue protects its node
# from any threshold.
UNREQUEUEABLE = 1 << 32


def protecting_priority(node: NodeView) -> int:
    """What a Requeue threshold must exceed to free the node: the priority of its
    highest-priority job, one Slurm cannot requeue counting above every threshold.
    The placer takes busy nodes in this order, the cheapest to free first."""
    return max((_rank(j) for j in node.jobs), default=0)


def _rank(job: RunningJob) -> int:
    return job.priority if job.requeueable else UNREQUEUEABLE


@dataclass(frozen=True, slots=True)
class BusyVerdict:
    """What to do about a reservation's busy nodes now, and what the check says."""

    requeue: tuple[JobRequeue, ...]
    message: str


def judge_busy_nodes(
    busy: Sequence[NodeView], policy: RequeuePolicy | None, waited: float
) -> BusyVerdict:
    """`busy`: the reserved nodes that still run jobs; `waited`: seconds since the
    reservation was made."""
    waits = f"waits for Slurm jobs on {', '.join(n.name for n in busy)} to end"
    if policy is None:
        return BusyVerdict((), f"{waits} (WaitForIdle)")
    jobs = _jobs_by_id(busy)
    protected = [
        _protected_reason(job, nodes, policy)
        for job, nodes in jobs
        if _rank(job) >= policy.below_priority
    ]
    if protected:
        return BusyVerdict((), f"{waits} (Requeue: {'; '.join(protected)})")
    left = policy.grace_seconds - waited
    if left > 0:
        return BusyVerdict(
            (),
            f"{waits}; jobs below priority {policy.below_priority} are requeued in "
            f"{left:.0f}s (Requeue grace {policy.grace_seconds:.0f}s)",
        )
    requeue = tuple(
        JobRequeue(job.job_id, job.priority, policy.below_priority, nodes) for job, nodes in jobs
    )
    if not requeue:  # the jobs are completing already (or were just requeued)
        return BusyVerdict((), f"{waits} (Requeue: no job left running there)")
    return BusyVerdict(requeue, f"{'; '.join(r.reason for r in requeue)}; {waits}")


def _jobs_by_id(nodes: Iterable[NodeView]) -> list[tuple[RunningJob, tuple[str, ...]]]:
    """Each job once, with the given nodes it runs on (a job may span several)."""
    found: dict[int, tuple[RunningJob, list[str]]] = {}
    for node in nodes:
        for job in node.jobs:
            found.setdefault(job.job_id, (job, []))[1].append(node.name)
    return [(job, tuple(sorted(names))) for job, names in (found[i] for i in sorted(found))]


def _protected_reason(job: RunningJob, nodes: tuple[str, ...], policy: RequeuePolicy) -> str:
    why = (
        f"priority {job.priority} >= {policy.below_priority}"
        if job.requeueable
        else "Slurm cannot requeue it: --no-requeue or not a batch job"
    )
    return f"job {job.job_id} ({why}) on {', '.join(nodes)} is waited for"
