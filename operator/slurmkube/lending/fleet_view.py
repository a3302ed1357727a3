"""The lendable fleet as the placer sees it (pure): each NodeView's state in the
placer's terms, and a check's snapshot of the nodes it lends from."""

from __future__ import annotations

from collections.abc import Iterable

from slurmkube.api import well_known as wk
from slurmkube.lending.model import LendingPolicy, NodeView, SlurmState
from slurmkube.lending.requeue import protecting_priority
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
    """Who owns the node now, in the placer's terms."""
    if node.lease or node.slurm_reservation.startswith(wk.RESERVATION_PREFIX):
        return NodeState.LENT
    if node.cordoned or node.slurm_reservation or node.sickness is not None:
        return NodeState.UNAVAILABLE
    if node.slurm is SlurmState.ABSENT and not node.has_slurmd_pod:
        return NodeState.FREE
    if node.slurm is SlurmState.IDLE:
        return NodeState.IDLE
    if node.slurm is SlurmState.BUSY:
        return NodeState.BUSY
    return NodeState.UNAVAILABLE
