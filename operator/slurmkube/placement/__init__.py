"""Topology-aware gang placement over a frozen fleet snapshot (pure).

One engine for the Kueue AdmissionCheck bridge (issue 7) and the fleet
simulator (issue 9). The call a caller makes::

    snapshot = Snapshot.of(nodes)              # per-block aggregates, once
    decision = place(snapshot, GangRequest(...))
    if decision.placed:
        snapshot = snapshot.reserve(decision)  # next decision is disjoint
    elif decision.verdict is Verdict.CAN_NEVER_FIT:
        ...                                    # Kueue check state Rejected
    else:
        ...                                    # Retry; decision.message says why
"""

from slurmkube.placement.blocks import BlockTake, choose_blocks, min_blocks_needed
from slurmkube.placement.engine import place, refused_alike
from slurmkube.placement.model import (
    USABLE_STATES,
    BlockPolicy,
    Decision,
    GangRequest,
    Node,
    NodeState,
    Verdict,
)
from slurmkube.placement.snapshot import BlockAggregate, Snapshot

__all__ = [
    "USABLE_STATES",
    "BlockAggregate",
    "BlockPolicy",
    "BlockTake",
    "Decision",
    "GangRequest",
    "Node",
    "NodeState",
    "Snapshot",
    "Verdict",
    "choose_blocks",
    "min_blocks_needed",
    "place",
    "refused_alike",
]
