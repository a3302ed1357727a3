"""The bridge lends by the sharing policy (`slurmkube.lending.sharing`, as the simulator
does): Slurm's queue keeps the idle nodes it can use soon, Kubernetes gets its
entitlement whatever the queue, lends go to whole idle blocks before busy ones.

Fleets as in test_lending: one string per NVLink block, F free, I idle, B busy, D down;
P an idle node Slurm's backfill holds for its queue head (PLANNED)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmkube.lending import CheckState, LendingPolicy, LendingWorld, NodeView, plan_lending
from slurmkube.lending.model import PendingJob, RequeuePolicy
from slurmkube.lending.sharing import SharingPolicy
from tests.unit.test_lending import CHECK, NOW, WorkloadBuilder, fleet, only_check, world


def with_planned(*blocks: str) -> tuple[NodeView, ...]:
    """`fleet`, where P is an idle node held for Slurm's plan."""
    nodes = fleet(*(b.replace("P", "I") for b in blocks))
    held = {f"b{b}-n{n}" for b, s in enumerate(blocks) for n, c in enumerate(s) if c == "P"}
    return tuple(replace(n, planned=n.name in held) for n in nodes)


def queued(w: LendingWorld, *nodes: int, priority: int = 100) -> LendingWorld:
    """Pending Slurm jobs of `nodes` nodes each, queue head first."""
    queue = tuple(PendingJob(i + 1, n, priority - i) for i, n in enumerate(nodes))
    return replace(w, slurm_queue=queue)


def lent_nodes(w: LendingWorld) -> tuple[str, ...]:
    (lend,) = plan_lending(w).lends
    assert lend.create is not None, lend.check
    return lend.create.nodes


@pytest.mark.parametrize(
    ("blocks", "queue", "lent"),
    [
        # No Slurm queue: every idle node may be lent.
        (("IIII",), (), ("b0-n0", "b0-n1")),
        # The head wants 3 of the 4 idle nodes: only 1 is spare, the gang of 2 waits.
        (("IIII",), (3,), None),
        # The head wants 2 and a job ends soon enough? Not here: 2 spare, lent.
        (("IIII",), (2,), ("b0-n0", "b0-n1")),
        # Only the first `queue_depth` (4) pending jobs are protected.
        (("IIII", "IIII"), (1, 1, 1, 1, 8), ("b0-n0", "b0-n1")),
    ],
)
def test_slurm_keeps_the_idle_nodes_its_queue_head_can_use(
    blocks: tuple[str, ...], queue: tuple[int, ...], lent: tuple[str, ...] | None
) -> None:
    w = queued(world(fleet(*blocks), WorkloadBuilder().obj()), *queue)
    if lent is not None:
        assert lent_nodes(w) == lent
        return
    state, message = only_check(plan_lending(w))
    assert state is CheckState.RETRY
    assert "Slurm's queue counts on its idle nodes" in message
    assert "first 1 pending jobs want 3 nodes" in message


def test_kubernetes_gets_its_entitlement_whatever_slurm_waits_for() -> None:
    entitled = LendingPolicy(CHECK, entitled_nodes=2)
    w = queued(world(fleet("IIII"), WorkloadBuilder().obj(), policy=entitled), 4)
    assert lent_nodes(w) == ("b0-n0", "b0-n1")
    # Beyond the entitlement, the queue keeps its nodes.
    beyond = queued(world(fleet("IIII"), WorkloadBuilder().pods(3).obj(), policy=entitled), 4)
    assert only_check(plan_lending(beyond))[0] is CheckState.RETRY


def test_a_node_held_for_slurms_plan_is_never_lent() -> None:
    w = world(with_planned("PPII"), WorkloadBuilder().pods(3).obj())
    assert only_check(plan_lending(w))[0] is CheckState.RETRY
    # Held for the queue head: the refusal names Slurm's queue.
    state, message = only_check(plan_lending(queued(w, 2)))
    assert state is CheckState.RETRY and "Slurm's queue counts on its idle nodes" in message
    assert lent_nodes(world(with_planned("PPII"), WorkloadBuilder().obj())) == ("b0-n2", "b0-n3")


def test_a_running_job_ending_within_the_horizon_counts_for_slurms_queue() -> None:
    nodes = tuple(
        replace(n, busy_until=NOW + 600) if n.slurm.name == "BUSY" else n for n in fleet("BBII")
    )
    # The head wants 3: 2 idle + 2 ending within 30 min give it 4, so one idle is spare.
    w = queued(world(nodes, WorkloadBuilder().pods(1).obj()), 3)
    assert lent_nodes(w) == ("b0-n2",)
    # With a horizon shorter than the jobs' ends, the head counts on both idle nodes.
    short = LendingPolicy(CHECK, sharing=SharingPolicy(horizon_s=60.0))
    w = queued(world(nodes, WorkloadBuilder().pods(1).obj(), policy=short), 3)
    assert only_check(plan_lending(w))[0] is CheckState.RETRY


def test_a_lend_takes_a_whole_idle_block_before_part_of_a_busy_one() -> None:
    # Best fit alone would take the busy block's one idle node (the tightest fit) and
    # break that block for Slurm's single-block gangs for as long as the pods run.
    w = world(fleet("BBBI", "IIII"), WorkloadBuilder().pods(1).obj())
    assert lent_nodes(w) == ("b1-n0",)


def test_a_gang_still_takes_the_fewest_blocks() -> None:
    # Kubernetes already holds a node of b0 (lent, slurm-free): the policy ranks b0
    # first, but a gang of 4 fits whole in b1 and spans one block.
    nodes = tuple(
        replace(n, lease="other") if n.name == "b0-n0" else n for n in fleet("II", "IIII")
    )
    w = world(nodes, WorkloadBuilder().pods(4).obj())
    assert lent_nodes(w) == ("b1-n0", "b1-n1", "b1-n2", "b1-n3")


def test_busy_nodes_are_not_reserved_while_slurms_queue_counts_on_nodes() -> None:
    # WaitForIdle would reserve the busy nodes; Slurm's head wants them once they end.
    nodes = tuple(
        replace(n, busy_until=NOW + 600) if n.slurm.name == "BUSY" else n for n in fleet("BBBB")
    )
    w = queued(world(nodes, WorkloadBuilder().obj()), 2)
    state, message = only_check(plan_lending(w))
    assert state is CheckState.RETRY and "Slurm's queue counts on its idle nodes" in message
    # With no queue, the busy nodes are reserved and waited for, as before.
    (lend,) = plan_lending(world(nodes, WorkloadBuilder().obj())).lends
    assert lend.create is not None and lend.waiting


def test_under_requeue_jobs_below_its_priority_give_way() -> None:
    requeue = LendingPolicy(CHECK, requeue=RequeuePolicy(below_priority=50))
    low = queued(world(fleet("IIII"), WorkloadBuilder().obj(), policy=requeue), 4, priority=40)
    assert lent_nodes(low) == ("b0-n0", "b0-n1")
    high = queued(world(fleet("IIII"), WorkloadBuilder().obj(), policy=requeue), 4, priority=60)
    assert only_check(plan_lending(high))[0] is CheckState.RETRY


def test_protecting_no_jobs_lends_as_before() -> None:
    off = LendingPolicy(CHECK, sharing=SharingPolicy(queue_depth=0))
    w = queued(world(fleet("IIII"), WorkloadBuilder().obj(), policy=off), 4)
    assert lent_nodes(w) == ("b0-n0", "b0-n1")
