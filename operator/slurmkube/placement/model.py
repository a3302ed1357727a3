"""The vocabulary of gang placement: nodes as the placer sees them, requests, decisions.

Kept apart from the algorithm so that the Kueue bridge (issue 7) and the fleet
simulator (issue 9) build the same frozen values from their own observations.
The shape follows the Kubernetes scheduler framework
(`pkg/scheduler/framework/interface.go`): a request is filtered and scored
against a frozen snapshot, and the outcome is a status that tells "does not fit
now" (`Unschedulable`, retry later) from "can never fit"
(`UnschedulableAndUnresolvable`, reject).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class NodeState(enum.Enum):
    """Who owns a node now, and whether the placer may take it.

    The order of the first three members is the order of preference (issue 7):
    free Kubernetes-owned nodes first, then idle Slurm nodes, then busy Slurm
    nodes, the last only when the request's policy allows it.
    """

    FREE = "free"  # owned by Kubernetes, no workload on it
    IDLE = "idle"  # owned by Slurm (slurmd running), no job on it
    BUSY = "busy"  # owned by Slurm, running a job; usable only as policy allows
    LENT = "lent"  # leased to a Kubernetes workload (or a reservation is in flight)
    UNAVAILABLE = "unavailable"  # down, drained by an admin, or held for a Slurm plan


USABLE_STATES = (NodeState.FREE, NodeState.IDLE, NodeState.BUSY)


@dataclass(frozen=True, slots=True)
class Node:
    """One GPU node at the moment of the snapshot.

    `tier_path` lists the network switches above the NVLink block, lowest
    first, e.g. ("leaf-03", "spine-1"); it is only used to keep the blocks of a
    multi-block gang close together. `busy_priority` says how costly a busy node
    is to take (the simulator: its job's priority; the bridge: the priority a
    Requeue threshold must exceed to free it) and `busy_until` the time (any
    clock, e.g. Slurm's EndTime) the node is expected to be idle; both only order
    busy nodes, cheapest first.
    """

    name: str
    block: str
    gpus: int
    state: NodeState
    tier_path: tuple[str, ...] = ()
    busy_priority: int = 0
    busy_until: float = 0.0


class BlockPolicy(enum.Enum):
    """How a gang may use NVLink blocks (Slurm `topology/block`, `--segment`)."""

    SINGLE_BLOCK = "single-block"  # every member in one NVLink block
    MIN_BLOCKS = "min-blocks"  # as few blocks as the current free state allows


@dataclass(frozen=True, slots=True)
class GangRequest:
    """A gang: `nodes` members, each needing a whole node with `gpus_per_node` GPUs.

    `allow_busy` lets the placer choose busy Slurm nodes when free and idle ones
    cannot hold the gang (the bridge's `WaitForIdle`/`Requeue` policies);
    `busy_priority_below`, when set, restricts that to nodes whose `busy_priority`
    is below it; `prefer_busy_below` only prefers them: busy nodes below it are
    taken before the other busy nodes whenever that spans no more blocks
    (`Requeue`: nodes whose jobs may be requeued before those waited for).
    """

    name: str
    nodes: int
    gpus_per_node: int
    block_policy: BlockPolicy = BlockPolicy.MIN_BLOCKS
    allow_busy: bool = False
    busy_priority_below: int | None = None
    prefer_busy_below: int | None = None


class Verdict(enum.Enum):
    """Outcome of a decision, in the scheduler framework's terms."""

    PLACED = "placed"
    DOES_NOT_FIT_NOW = "does-not-fit-now"  # retry later (Kueue check: Retry)
    CAN_NEVER_FIT = "can-never-fit"  # no state of this fleet fits it (Kueue check: Rejected)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the placer chose and why; `message` is meant for the check's message."""

    request: GangRequest
    verdict: Verdict
    nodes: tuple[str, ...]
    blocks: tuple[str, ...]
    message: str
    busy_nodes: tuple[str, ...] = ()

    @property
    def placed(self) -> bool:
        return self.verdict is Verdict.PLACED
