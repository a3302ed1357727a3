"""What the bridge reads of Slurm's jobs for the sharing policy (pure folds of
`controllers.lending_observe`): the pending jobs that wait for nodes, in Slurm's order,
and when each busy node's jobs end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from slurmkube.controllers.lending_observe import running_jobs_by_node, slurm_queue
from slurmkube.lending.model import PendingJob
from slurmkube.slurm.models import Job

T0 = datetime(2026, 12, 5, tzinfo=UTC)


def job(job_id: int, state: str, *, priority: int = 100, node_count: int = 1, **kw: Any) -> Job:
    return Job(job_id, f"j{job_id}", "alice", frozenset({state}), "gpu", priority, node_count, **kw)


def test_the_queue_holds_jobs_waiting_for_nodes_in_slurms_order() -> None:
    listed = [
        job(1, "RUNNING", nodes=("n0",)),
        job(2, "PENDING", reason="Resources", node_count=4, priority=50),
        job(3, "PENDING", reason="Priority", node_count=2, priority=90),
        job(4, "PENDING", reason="Dependency", node_count=8),
        job(5, "PENDING", reason="JobHeldUser", node_count=8),
        job(6, "PENDING", reason="Resources", node_count=8, reservation="maint"),
        job(7, "PENDING", reason="None", node_count=0, priority=90),
    ]
    assert slurm_queue(listed) == (
        PendingJob(3, 2, 90),
        PendingJob(7, 1, 90),
        PendingJob(2, 4, 50),
    )


def test_a_node_ends_when_its_last_job_does_and_never_without_a_time_limit() -> None:
    limit = timedelta(hours=1)
    listed = [
        job(1, "RUNNING", nodes=("a", "b"), end_time=T0, time_limit=limit),
        job(2, "RUNNING", nodes=("b",), end_time=T0 + limit, time_limit=limit),
        job(3, "RUNNING", nodes=("c",), end_time=T0, time_limit=limit),
        job(4, "RUNNING", nodes=("c",)),
        job(5, "PENDING", reason="Resources"),
    ]
    jobs, ends = running_jobs_by_node(listed)
    assert ends == {"a": T0.timestamp(), "b": (T0 + limit).timestamp(), "c": 0.0}
    assert [j.job_id for j in jobs["c"]] == [3, 4]
