"""Gang placement: Filter -> Score -> Reserve over a frozen snapshot.

One decision, in the Kubernetes scheduler framework's phases
(`pkg/scheduler/framework/interface.go`):

- Filter: per block, count the nodes of each usable state with enough GPUs.
  If no state of the fleet could hold the request (too many GPUs per node,
  more nodes than the pool, or than any block for a single-block gang) the
  verdict is CAN_NEVER_FIT; if only the current state is short, DOES_NOT_FIT_NOW.
- Score: the fewest blocks `k` the free state allows is fixed first, using free
  Kubernetes nodes and idle Slurm nodes; busy nodes count only when those two
  cannot hold the gang and the request allows them (issue 7's order). Within
  `k` blocks, the narrowest set of states that still achieves `k` is used (so
  Slurm is disturbed only when that saves a block; among busy nodes, the
  preferred ones first), then `choose_blocks` takes whole blocks for the bulk
  and the best-fitting block for the rest.
- Reserve: `Snapshot.reserve(decision)` marks the chosen nodes LENT, so a second
  decision on the returned snapshot is disjoint from the first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from slurmkube.placement.blocks import BlockTake, choose_blocks, min_blocks_needed
from slurmkube.placement.model import (
    BlockPolicy,
    Decision,
    GangRequest,
    Node,
    NodeState,
    Verdict,
)
from slurmkube.placement.snapshot import BlockAggregate, Snapshot

_FREE_ONLY = (NodeState.FREE,)
_NOT_BUSY = (NodeState.FREE, NodeState.IDLE)
_ANY_USABLE = (NodeState.FREE, NodeState.IDLE, NodeState.BUSY)


def place(
    snapshot: Snapshot, request: GangRequest, within: Mapping[str, int] | None = None
) -> Decision:
    """Decide where `request` goes on `snapshot` (pure; nothing is reserved).

    `within`, when given, caps the free and idle nodes the gang may take in each
    block (a block not named gives none): the lender's say over which of its idle
    nodes it can spare (`lending.sharing`). Busy nodes are not capped."""
    if request.nodes < 1 or request.gpus_per_node < 1:
        return _refuse(
            request,
            Verdict.CAN_NEVER_FIT,
            f"gang {request.name!r} asks for {request.nodes} nodes with "
            f"{request.gpus_per_node} GPUs each; both must be at least 1",
        )
    never = _never_fits(snapshot, request)
    if never is not None:
        return _refuse(request, Verdict.CAN_NEVER_FIT, never)

    single = request.block_policy is BlockPolicy.SINGLE_BLOCK
    blocks = snapshot.blocks
    g = request.gpus_per_node
    below = request.busy_priority_below
    free = snapshot.counts(NodeState.FREE, g, below)
    idle = snapshot.counts(NodeState.IDLE, g, below)
    if within is not None:
        free, idle = _capped(snapshot, free, idle, within)
    not_busy = [f + i for f, i in zip(free, idle, strict=True)]
    widest: tuple[NodeState, ...] = _NOT_BUSY
    widest_counts = not_busy
    target = _blocks_for(not_busy, request.nodes, single)
    if target is None and request.allow_busy:
        busy = snapshot.counts(NodeState.BUSY, g, below)
        widest = _ANY_USABLE
        widest_counts = [n + b for n, b in zip(not_busy, busy, strict=True)]
        target = _blocks_for(widest_counts, request.nodes, single)
    if target is None:
        return _refuse(request, Verdict.DOES_NOT_FIT_NOW, _short_message(snapshot, request))

    # Narrowest states that still reach the minimum block count.
    # (When busy nodes were needed, free and idle ones alone could not fit at all.)
    candidates: list[tuple[tuple[NodeState, ...], Sequence[int]]] = []
    if widest is _NOT_BUSY:
        candidates.append((_FREE_ONLY, free))
    elif request.prefer_busy_below is not None:
        # Busy nodes are taken cheapest first within a block (`_busy_order`), so
        # counting only the preferred ones makes the picks preferred ones only.
        bound = (
            request.prefer_busy_below if below is None else min(below, request.prefer_busy_below)
        )
        preferred = snapshot.counts(NodeState.BUSY, g, bound)
        candidates.append((widest, [n + p for n, p in zip(not_busy, preferred, strict=True)]))
    candidates.append((widest, widest_counts))
    order = list(range(len(blocks)))  # blocks are sorted by name in the snapshot
    leaves = [b.leaf for b in blocks]
    for states, counts in candidates:
        if _blocks_for(counts, request.nodes, single) != target:
            continue
        takes = choose_blocks(
            counts, request.nodes, single_block=single, order=order, affinity=leaves
        )
        if takes is not None:
            return _decide(snapshot, request, states, takes, target, within=within)
    raise AssertionError("the widest state set fits, so choose_blocks must succeed")


def _capped(
    snapshot: Snapshot, free: Sequence[int], idle: Sequence[int], within: Mapping[str, int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Free then idle nodes of each block, at most `within[block]` of both together
    (the picks take free nodes first, then idle, so they stay within the cap)."""
    caps = [within.get(b.name, 0) for b in snapshot.blocks]
    capped_free = tuple(min(f, c) for f, c in zip(free, caps, strict=True))
    capped_idle = tuple(min(i, c - f) for i, c, f in zip(idle, caps, capped_free, strict=True))
    return capped_free, capped_idle


def _blocks_for(counts: Sequence[int], nodes: int, single: bool) -> int | None:
    if single:
        return 1 if max(counts, default=0) >= nodes else None
    return min_blocks_needed(counts, nodes)


def _never_fits(snapshot: Snapshot, request: GangRequest) -> str | None:
    g = request.gpus_per_node
    if g > snapshot.max_gpus_per_node:
        return (
            f"gang {request.name!r} needs {g} GPUs per node; the largest node in the "
            f"pool has {snapshot.max_gpus_per_node}"
        )
    capacities = snapshot.counts(None, g)
    if request.block_policy is BlockPolicy.SINGLE_BLOCK:
        largest = max(capacities, default=0)
        if request.nodes > largest:
            return (
                f"gang {request.name!r} needs {request.nodes} nodes with {g}+ GPUs in one "
                f"NVLink block; the largest block has {largest} such nodes"
            )
    elif request.nodes > sum(capacities):
        return (
            f"gang {request.name!r} needs {request.nodes} nodes with {g}+ GPUs; "
            f"the pool has {sum(capacities)} such nodes"
        )
    return None


def _short_message(snapshot: Snapshot, request: GangRequest) -> str:
    g = request.gpus_per_node
    below = request.busy_priority_below
    usable = [
        f + i
        for f, i in zip(
            snapshot.counts(NodeState.FREE, g, below),
            snapshot.counts(NodeState.IDLE, g, below),
            strict=True,
        )
    ]
    where = "in one NVLink block" if request.block_policy is BlockPolicy.SINGLE_BLOCK else "in all"
    have = (
        max(usable, default=0) if request.block_policy is BlockPolicy.SINGLE_BLOCK else sum(usable)
    )
    busy_note = "" if request.allow_busy else "; busy Slurm nodes are not allowed by policy"
    return (
        f"gang {request.name!r} waits: needs {request.nodes} nodes with {g}+ GPUs {where}, "
        f"{have} are free or idle now{busy_note}"
    )


def _decide(
    snapshot: Snapshot,
    request: GangRequest,
    states: tuple[NodeState, ...],
    takes: tuple[BlockTake, ...],
    target: int,
    *,
    within: Mapping[str, int] | None = None,
) -> Decision:
    g = request.gpus_per_node
    below = request.busy_priority_below
    chosen: list[Node] = []
    parts: list[str] = []
    for take in takes:
        block = snapshot.blocks[take.index]
        cap = None if within is None else within.get(block.name, 0)
        picked = _pick_in_block(block, states, take.nodes, g, below, not_busy_cap=cap)
        chosen.extend(picked)
        whole = "whole" if take.nodes == block.size else f"{take.nodes}/{block.size}"
        parts.append(f"{block.name} {whole}")
    by_state = {s: sum(1 for n in chosen if n.state is s) for s in _ANY_USABLE}
    minimum = "the minimum for the current free state" if target > 1 else "one block"
    message = (
        f"gang {request.name!r}: {request.nodes} nodes x {g} GPUs in {len(takes)} NVLink "
        f"block(s) [{', '.join(parts)}] ({minimum}); {by_state[NodeState.FREE]} free "
        f"Kubernetes, {by_state[NodeState.IDLE]} idle Slurm, {by_state[NodeState.BUSY]} busy Slurm"
    )
    return Decision(
        request=request,
        verdict=Verdict.PLACED,
        nodes=tuple(n.name for n in chosen),
        blocks=tuple(snapshot.blocks[t.index].name for t in takes),
        message=message,
        busy_nodes=tuple(n.name for n in chosen if n.state is NodeState.BUSY),
    )


def _pick_in_block(
    block: BlockAggregate,
    states: tuple[NodeState, ...],
    wanted: int,
    min_gpus: int,
    busy_priority_below: int | None,
    *,
    not_busy_cap: int | None = None,
) -> list[Node]:
    picked: list[Node] = []
    not_busy = 0
    for state in states:
        for node in block.nodes_in(state):
            if node.gpus < min_gpus:
                continue
            if state is not NodeState.BUSY:
                if not_busy_cap is not None and not_busy >= not_busy_cap:
                    continue
                not_busy += 1
            if (
                state is NodeState.BUSY
                and busy_priority_below is not None
                and node.busy_priority >= busy_priority_below
            ):
                continue
            picked.append(node)
            if len(picked) == wanted:
                return picked
    raise AssertionError(f"block {block.name} counted more usable nodes than it holds")


def refused_alike(refusal: Decision, request: GangRequest) -> Decision:
    """`refusal`, made for a request of the same shape on the same snapshot, as
    `place` would answer `request`: every refusal message names the gang first,
    and nothing else in it depends on the name."""
    assert not refusal.placed, "only a refusal is the same for every request of its shape"
    named = f"gang {refusal.request.name!r}"
    assert refusal.message.startswith(named)
    message = f"gang {request.name!r}" + refusal.message[len(named) :]
    return replace(refusal, request=request, message=message)


def _refuse(request: GangRequest, verdict: Verdict, message: str) -> Decision:
    return Decision(request=request, verdict=verdict, nodes=(), blocks=(), message=message)
