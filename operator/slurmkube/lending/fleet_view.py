"""The lendable fleet as the placer sees it (pure): each NodeView's state in the
placer's terms, a check's snapshot of the nodes it lends from, and that snapshot
in the sharing policy's per-block counts (`lending.sharing`)."""

from __future__ import annotations

from collections.abc import Iterable

from slurmkube.api import well_known as wk
from slurmkube.lending.model import LendingPolicy, NodeView, SlurmState
from slurmkube.lending.requeue import protecting_priority
from slurmkube.lending.sharing import BlockView
from slurmkube.placement import Node, NodeState, Snapshot


def pool(nodes: Iterable[NodeView], policy: LendingPolicy) -> Iterable[NodeView]:
    return (n for n in nodes if policy.lends_from(n.node_set))


def fleet_snapshot(
    nodes: Iterable[NodeView], policy: LendingPolicy, large: bool = False
) -> Snapshot:
    """`large`: for a gang of `LendingWorld.escalation_gang_nodes` nodes or more, which
    sees the nodes of escalated NVLink domains as unavailable."""
    return Snapshot.of(
        Node(
            name=n.name,
            block=n.block,
            gpus=n.gpus,
            state=NodeState.UNAVAILABLE if large and n.escalated else placement_state(n),
            busy_priority=protecting_priority(n),
            busy_until=n.busy_until,
        )
        for n in pool(nodes, policy)
    )


def placement_state(node: NodeView) -> NodeState:
    """Who owns the node now, in the placer's terms. A node Slurm's backfill holds
    for a pending job (PLANNED) is never lent: it is the queue head's."""
    if node.lease or node.slurm_reservation.startswith(wk.RESERVATION_PREFIX):
        return NodeState.LENT
    if node.cordoned or node.slurm_reservation or node.sickness is not None:
        return NodeState.UNAVAILABLE
    if node.slurm is SlurmState.ABSENT and not node.has_slurmd_pod:
        return NodeState.FREE
    if node.slurm is SlurmState.IDLE:
        return NodeState.UNAVAILABLE if node.planned else NodeState.IDLE
    if node.slurm is SlurmState.BUSY:
        return NodeState.BUSY
    return NodeState.UNAVAILABLE


def block_view(
    snapshot: Snapshot, name: str, planned: frozenset[str], horizon_end: float
) -> BlockView:
    """A block of the snapshot as the sharing policy counts it. Idle Slurm nodes and
    nodes without a slurmd pod (Slurm resumes those for its queue) are `idle`; a
    busy node whose jobs' time limits end by `horizon_end` is `ending_soon`."""
    block = snapshot.block(name)
    members = [snapshot.nodes[n] for n in block.members]
    return BlockView(
        name=name,
        size=block.size,
        idle=len(block.free) + len(block.idle),
        held=sum(1 for n in members if n.name in planned and n.state is NodeState.UNAVAILABLE),
        busy=len(block.busy),
        ending_soon=sum(1 for n in block.busy if 0 < n.busy_until <= horizon_end),
        lent=sum(1 for n in members if n.state is NodeState.LENT),
    )
