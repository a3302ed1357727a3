"""busyNodes.policy Requeue: which Slurm jobs the lending planner requeues, and when.

Fleets as in test_lending (one string per NVLink block, one letter per node);
`jobs` puts running Slurm jobs on named nodes. Priorities are Slurm's (uint32).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from slurmkube.api.models import BusyNodePolicy
from slurmkube.lending import (
    CheckState,
    LendingPolicy,
    NodeView,
    RequeuePolicy,
    RunningJob,
    judge_busy_nodes,
    plan_lending,
)
from slurmkube.render import plan_config, render_files
from slurmkube_local.builders import bundle, nvl_fleet
from tests.unit.test_lending import CHECK, WorkloadBuilder, fleet, only_check, reservation, world

THRESHOLD = 1000
REQUEUE = LendingPolicy(CHECK, requeue=RequeuePolicy(below_priority=THRESHOLD, grace_seconds=60))


def low(job_id: int, priority: int = 100) -> RunningJob:
    return RunningJob(job_id, priority, requeueable=True)


def high(job_id: int, priority: int = 5000) -> RunningJob:
    return RunningJob(job_id, priority, requeueable=True)


def unrequeueable(job_id: int, priority: int = 1) -> RunningJob:
    return RunningJob(job_id, priority, requeueable=False)


def jobs(nodes: tuple[NodeView, ...], **on: tuple[RunningJob, ...]) -> tuple[NodeView, ...]:
    """Put jobs on nodes; keyword names are node names with '_' for '-'."""
    by_name = {k.replace("_", "-"): v for k, v in on.items()}
    return tuple(replace(n, jobs=by_name.get(n.name, n.jobs)) for n in nodes)


@dataclass(frozen=True)
class Busy:
    """A reserved pair b0-n0, b0-n1 (both in the reservation) some seconds old."""

    nodes: tuple[NodeView, ...]
    age: float
    requeued: tuple[int, ...]
    says: str
    policy: LendingPolicy = field(default_factory=lambda: REQUEUE)


BUSY = {
    "jobs below the threshold are requeued once the grace period has passed": Busy(
        jobs(fleet("BB"), b0_n0=(low(12),), b0_n1=(low(13, 999),)),
        age=61,
        requeued=(12, 13),
        says="requeued job 12 (priority 100 < 1000) on node b0-n0; "
        "requeued job 13 (priority 999 < 1000) on node b0-n1",
    ),
    "nothing is requeued before the grace period ends": Busy(
        jobs(fleet("BI"), b0_n0=(low(12),)),
        age=20,
        requeued=(),
        says="jobs below priority 1000 are requeued in 40s",
    ),
    "a job at the threshold is waited for, not requeued": Busy(
        jobs(fleet("BI"), b0_n0=(high(12, THRESHOLD),)),
        age=600,
        requeued=(),
        says="job 12 (priority 1000 >= 1000) on b0-n0 is waited for",
    ),
    "a job Slurm cannot requeue is waited for whatever its priority": Busy(
        jobs(fleet("BI"), b0_n0=(unrequeueable(12),)),
        age=600,
        requeued=(),
        says="job 12 (Slurm cannot requeue it",
    ),
    "low jobs keep running while a protected job holds another reserved node": Busy(
        jobs(fleet("BB"), b0_n0=(low(12),), b0_n1=(high(13),)),
        age=600,
        requeued=(),
        says="job 13 (priority 5000 >= 1000) on b0-n1 is waited for",
    ),
    "a low job sharing a node with a protected one keeps running": Busy(
        jobs(fleet("BI"), b0_n0=(low(12), high(13))),
        age=600,
        requeued=(),
        says="job 13 (priority 5000 >= 1000) on b0-n0 is waited for",
    ),
    "a job spanning both reserved nodes is requeued once": Busy(
        jobs(fleet("BB"), b0_n0=(low(12),), b0_n1=(low(12),)),
        age=61,
        requeued=(12,),
        says="requeued job 12 (priority 100 < 1000) on node b0-n0, b0-n1",
    ),
    "busy nodes with no job left running are waited for": Busy(
        fleet("BB"), age=61, requeued=(), says="no job left running"
    ),
    "WaitForIdle never requeues": Busy(
        jobs(fleet("BI"), b0_n0=(low(12),)),
        age=600,
        requeued=(),
        says="waits for Slurm jobs on b0-n0 to end (WaitForIdle)",
        policy=LendingPolicy(CHECK),
    ),
}


@pytest.mark.parametrize("case", BUSY.values(), ids=BUSY.keys())
def test_requeue_of_jobs_on_reserved_busy_nodes(case: Busy) -> None:
    plan = plan_lending(
        world(
            case.nodes,
            WorkloadBuilder().obj(),
            reservations=(reservation("uid-1", "b0-n0", "b0-n1", age=case.age),),
            policy=case.policy,
        )
    )
    (lend,) = plan.lends
    assert tuple(r.job_id for r in lend.requeue) == case.requeued
    state, message = only_check(plan)
    assert state is CheckState.PENDING
    assert case.says in message
    # The nodes are labelled only once Slurm says they are idle, requeue or not.
    assert lend.label == () and lend.waiting


def test_the_requeue_timeout_answers_retry_and_returns_the_nodes() -> None:
    nodes = jobs(fleet("BI"), b0_n0=(high(12),))
    plan = plan_lending(
        world(
            nodes,
            WorkloadBuilder().obj(),
            reservations=(reservation("uid-1", "b0-n0", "b0-n1", age=4000),),
            policy=REQUEUE,
        )
    )
    (release,) = plan.releases
    assert release.check is not None and release.check.state is CheckState.RETRY
    assert "busyNodes timeout 3600s" in release.check.message
    assert plan.lends == ()


def test_without_a_grace_period_jobs_are_requeued_with_the_new_reservation() -> None:
    policy = LendingPolicy(CHECK, requeue=RequeuePolicy(below_priority=THRESHOLD))
    nodes = jobs(fleet("BB"), b0_n0=(low(12),), b0_n1=(low(13),))
    (lend,) = plan_lending(world(nodes, WorkloadBuilder().obj(), policy=policy)).lends
    assert lend.create is not None and lend.create.nodes == ("b0-n0", "b0-n1")
    assert [r.job_id for r in lend.requeue] == [12, 13]


PLACEMENT = {
    "a block whose jobs can be requeued before a block of protected jobs": (
        ("BB", "BB"),
        {"b0-n0": high(1), "b0-n1": high(2), "b1-n0": low(3), "b1-n1": low(4)},
        ("b1-n0", "b1-n1"),
    ),
    "within a block, nodes whose jobs can be requeued first": (
        ("BBB",),
        {"b0-n0": high(1), "b0-n1": low(2), "b0-n2": low(3, 500)},
        ("b0-n1", "b0-n2"),
    ),
    "nodes of jobs Slurm cannot requeue last": (
        ("BBB",),
        {"b0-n0": unrequeueable(1), "b0-n1": high(2), "b0-n2": low(3)},
        ("b0-n2", "b0-n1"),
    ),
    "protected nodes when that saves an NVLink block": (
        ("BB", "B", "B"),
        {"b0-n0": high(1), "b0-n1": low(2), "b1-n0": low(3), "b2-n0": low(4)},
        ("b0-n1", "b0-n0"),
    ),
}


@pytest.mark.parametrize(("blocks", "running", "chosen"), PLACEMENT.values(), ids=PLACEMENT.keys())
def test_placement_under_requeue_prefers_nodes_whose_jobs_can_be_requeued(
    blocks: tuple[str, ...], running: dict[str, RunningJob], chosen: tuple[str, ...]
) -> None:
    nodes = tuple(replace(n, jobs=(running[n.name],)) for n in fleet(*blocks))
    (lend,) = plan_lending(world(nodes, WorkloadBuilder().obj(), policy=REQUEUE)).lends
    assert lend.create is not None
    assert set(lend.create.nodes) == set(chosen)
    assert lend.placed  # the placer's explanation reaches the NodesReserved event


# --- properties --------------------------------------------------------------------------


@st.composite
def busy_nodes(draw: st.DrawFn) -> list[NodeView]:
    """Busy nodes sharing a pool of jobs: a job is the same wherever it runs."""
    pool = draw(
        st.lists(
            st.builds(
                RunningJob,
                job_id=st.integers(1, 10**6),
                priority=st.integers(0, 2 * THRESHOLD),
                requeueable=st.booleans(),
            ),
            min_size=1,
            max_size=6,
            unique_by=lambda j: j.job_id,
        )
    )
    on_nodes = draw(st.lists(st.lists(st.sampled_from(pool), max_size=3, unique=True), min_size=1))
    return [replace(fleet("B")[0], name=f"n{i}", jobs=tuple(js)) for i, js in enumerate(on_nodes)]


@settings(max_examples=300, deadline=None)
@given(busy=busy_nodes(), grace=st.floats(0, 120), waited=st.floats(0, 240))
def test_requeue_never_touches_protected_jobs_and_never_comes_early(
    busy: list[NodeView], grace: float, waited: float
) -> None:
    verdict = judge_busy_nodes(busy, RequeuePolicy(THRESHOLD, grace), waited)
    if not verdict.requeue:
        return
    assert waited >= grace
    every_job = [j for n in busy for j in n.jobs]
    # Requeueing happens only when it frees every busy node: nothing protected is left.
    assert all(j.requeueable and j.priority < THRESHOLD for j in every_job)
    assert {r.job_id for r in verdict.requeue} == {j.job_id for j in every_job}
    assert len(verdict.requeue) == len({r.job_id for r in verdict.requeue})


# --- the CRD's rules, as the model enforces them -----------------------------------------

POLICIES = {
    "grace without Requeue": ({"graceSeconds": 60}, "apply only to policy Requeue"),
    "threshold without Requeue": (
        {"policy": "WaitForIdle", "requeueBelowPriority": 10},
        "apply only to policy Requeue",
    ),
    "Requeue without a threshold": ({"policy": "Requeue"}, "needs requeueBelowPriority"),
    "grace as long as the timeout": (
        {"policy": "Requeue", "requeueBelowPriority": 10, "graceSeconds": 60, "timeoutSeconds": 60},
        "graceSeconds must be less than timeoutSeconds",
    ),
    "threshold beyond Slurm's priorities": (
        {"policy": "Requeue", "requeueBelowPriority": 1 << 32},
        "requeueBelowPriority",
    ),
}


@pytest.mark.parametrize(("spec", "says"), POLICIES.values(), ids=POLICIES.keys())
def test_busy_node_policies_that_cannot_work_are_refused(
    spec: dict[str, object], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        BusyNodePolicy.model_validate(spec)


def test_a_requeue_policy_reads_its_threshold_and_grace() -> None:
    policy = BusyNodePolicy.model_validate(
        {"policy": "Requeue", "requeueBelowPriority": 1000, "graceSeconds": 30}
    )
    assert (policy.requeue_below_priority, policy.grace_seconds, policy.timeout_seconds) == (
        1000,
        30,
        3600,
    )


def test_rendered_slurm_conf_keeps_batch_jobs_requeueable() -> None:
    # slurm.conf(5) JobRequeue defaults to 1: sbatch jobs may be requeued unless
    # submitted with --no-requeue. slurmkube never sets it (an admin's extraConfig may).
    slurm_conf = render_files(plan_config(bundle(), nvl_fleet(1, 2))).files["slurm.conf"]
    assert "JobRequeue=" not in slurm_conf
