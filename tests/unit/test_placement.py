"""Table-driven and property tests of slurmkube.placement (issue 7's placement rules)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.placement import (
    BlockPolicy,
    GangRequest,
    Node,
    NodeState,
    Snapshot,
    Verdict,
    choose_blocks,
    min_blocks_needed,
    place,
    refused_alike,
)

F, I, B, L, U = (  # noqa: E741 - one letter per state, as in the fleet strings
    NodeState.FREE,
    NodeState.IDLE,
    NodeState.BUSY,
    NodeState.LENT,
    NodeState.UNAVAILABLE,
)


def make_fleet(*blocks: str, gpus: int = 8) -> list[Node]:
    """One string per block, one letter per node: F free, I idle, B busy, L lent, U unavailable."""
    letters = {"F": F, "I": I, "B": B, "L": L, "U": U}
    nodes = []
    for b, states in enumerate(blocks):
        for n, letter in enumerate(states):
            nodes.append(
                Node(
                    name=f"b{b}-n{n:02d}",
                    block=f"b{b}",
                    gpus=gpus,
                    state=letters[letter],
                    tier_path=(f"leaf{b // 2}", "spine0"),
                    busy_priority=n,
                )
            )
    return nodes


def gang(nodes: int, gpus: int = 8, **kw: object) -> GangRequest:
    return GangRequest(name="wl", nodes=nodes, gpus_per_node=gpus, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    fleet: tuple[str, ...]
    request: GangRequest
    verdict: Verdict
    blocks: tuple[str, ...] = ()
    nodes: tuple[str, ...] | None = None


CASES = {
    "free kubernetes nodes before idle slurm nodes": Case(
        ("IIFF",), gang(2), Verdict.PLACED, ("b0",), ("b0-n02", "b0-n03")
    ),
    "idle slurm nodes before busy ones": Case(
        ("BBII",), gang(2, allow_busy=True), Verdict.PLACED, ("b0",), ("b0-n02", "b0-n03")
    ),
    "busy nodes only when allowed": Case(("BBBI",), gang(2), Verdict.DOES_NOT_FIT_NOW),
    "busy nodes lowest priority first": Case(
        ("BBBI",), gang(2, allow_busy=True), Verdict.PLACED, ("b0",), ("b0-n03", "b0-n00")
    ),
    "busy priority bound excludes higher priority jobs": Case(
        ("BBBI",), gang(3, allow_busy=True, busy_priority_below=1), Verdict.DOES_NOT_FIT_NOW
    ),
    "preferred busy nodes pick the block when the block count is the same": Case(
        ("IBB", "BBI"), gang(3, allow_busy=True, prefer_busy_below=2), Verdict.PLACED, ("b1",)
    ),
    "small gang goes to the fullest block that fits": Case(
        ("FFFF", "BBFF", "BFFF"), gang(2), Verdict.PLACED, ("b1",)
    ),
    "large gang takes a whole block": Case(
        ("BFFF", "FFFF", "FFFB"), gang(4), Verdict.PLACED, ("b1",)
    ),
    "gang that fits in one block never spans two": Case(
        ("FFUU", "FFFF"), gang(3), Verdict.PLACED, ("b1",)
    ),
    "spans the minimum number of blocks": Case(
        ("FFFF", "FFFF", "FFBB", "FBBB"), gang(6), Verdict.PLACED, ("b0", "b2")
    ),
    "idle nodes used when that saves a block": Case(
        ("FFII", "FFBB"), gang(4), Verdict.PLACED, ("b0",)
    ),
    "single block waits when only spread capacity exists": Case(
        ("FFBB", "FFBB"), gang(3, block_policy=BlockPolicy.SINGLE_BLOCK), Verdict.DOES_NOT_FIT_NOW
    ),
    "single block larger than any block can never fit": Case(
        ("FFFF", "FFFF"), gang(5, block_policy=BlockPolicy.SINGLE_BLOCK), Verdict.CAN_NEVER_FIT
    ),
    "more nodes than the pool can never fit": Case(("FFFF",), gang(5), Verdict.CAN_NEVER_FIT),
    "more gpus per node than any node can never fit": Case(
        ("FFFF",), gang(1, gpus=16), Verdict.CAN_NEVER_FIT
    ),
    "lent and unavailable nodes wait, not never": Case(
        ("LLUF",), gang(2), Verdict.DOES_NOT_FIT_NOW
    ),
    "empty request can never fit": Case(("FFFF",), gang(0), Verdict.CAN_NEVER_FIT),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_placement_table(case: Case) -> None:
    decision = place(Snapshot.of(make_fleet(*case.fleet)), case.request)
    assert decision.verdict is case.verdict, decision.message
    assert decision.message
    if case.verdict is Verdict.PLACED:
        assert decision.blocks == case.blocks
        assert len(decision.nodes) == case.request.nodes
        if case.nodes is not None:
            assert decision.nodes == case.nodes


def test_gang_never_uses_nodes_with_too_few_gpus() -> None:
    fleet = [*make_fleet("FFFF"), Node("big", "b9", 16, F), Node("big2", "b9", 16, F)]
    decision = place(Snapshot.of(fleet), gang(2, gpus=12))
    assert decision.placed and set(decision.nodes) == {"big", "big2"}


def test_message_explains_the_choice() -> None:
    decision = place(Snapshot.of(make_fleet("FFFF", "FFII")), gang(6))
    assert "2 NVLink block(s)" in decision.message
    assert "whole" in decision.message and "idle Slurm" in decision.message


def test_reserve_makes_the_next_decision_disjoint() -> None:
    snapshot = Snapshot.of(make_fleet("FFFF", "FFFF"))
    first = place(snapshot, gang(3))
    snapshot = snapshot.reserve(first)
    second = place(snapshot, gang(3))
    assert first.placed and second.placed
    assert not set(first.nodes) & set(second.nodes)
    assert first.blocks != second.blocks
    assert place(snapshot.reserve(second), gang(3)).verdict is Verdict.DOES_NOT_FIT_NOW


def test_with_nodes_recomputes_only_what_changed() -> None:
    snapshot = Snapshot.of(make_fleet("FFFF", "IIII"))
    moved = replace(snapshot.nodes["b0-n00"], block="b1", state=I)
    updated = snapshot.with_nodes([moved])
    assert updated.block("b0").size == 3 and updated.block("b1").size == 5
    assert updated.block("b1") is not snapshot.block("b1")
    assert snapshot.block("b0").size == 4  # the old snapshot is untouched


_NODE_CHANGES = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 11),  # which node (8 exist; 8-11 are new)
            st.sampled_from(["b0", "b1", "b2", "b3"]),
            st.sampled_from([F, I, B, L, U]),
            st.sampled_from([4, 8]),
        ),
        max_size=5,
    ),
    max_size=40,
)


@given(_NODE_CHANGES)
@settings(max_examples=60, deadline=None)
def test_a_snapshot_changed_step_by_step_is_the_snapshot_of_its_nodes(
    steps: list[list[tuple[int, str, NodeState, int]]],
) -> None:
    snapshot = Snapshot.of(make_fleet("FFIB", "IILU"))
    flat = dict(snapshot.nodes)
    for step in steps:
        changed = [Node(f"n{i:02d}", block, gpus, state) for i, block, state, gpus in step]
        snapshot = snapshot.with_nodes(changed)
        flat.update((n.name, n) for n in changed)
    rebuilt = Snapshot.of(flat.values())
    assert list(snapshot.nodes.items()) == list(flat.items())
    assert len(snapshot) == len(flat)
    assert snapshot.blocks == rebuilt.blocks
    assert snapshot.max_gpus_per_node == rebuilt.max_gpus_per_node
    assert all(snapshot.block(b.name) == b for b in rebuilt.blocks)


def test_duplicate_node_names_are_rejected() -> None:
    node = Node("n1", "b0", 8, F)
    with pytest.raises(ValueError, match="n1"):
        Snapshot.of([node, node])


@pytest.mark.parametrize(
    ("counts", "nodes", "expected"),
    [
        ([4, 4, 2], 11, None),
        ([4, 4, 2], 9, 3),
        ([4, 4, 2], 8, 2),
        ([1, 1, 1], 3, 3),
        ([], 1, None),
        ([5], 0, 0),
    ],
)
def test_min_blocks_needed(counts: list[int], nodes: int, expected: int | None) -> None:
    assert min_blocks_needed(counts, nodes) == expected


def test_choose_blocks_prefers_the_same_leaf_for_the_remainder() -> None:
    takes = choose_blocks([4, 2, 2], 6, single_block=False, affinity=["a", "b", "a"])
    assert takes is not None and [t.index for t in takes] == [0, 2]


# --- properties -------------------------------------------------------------------------

node_states = st.sampled_from([F, F, I, I, B, L, U])


@st.composite
def fleets(draw: st.DrawFn) -> list[Node]:
    blocks = draw(st.integers(1, 6))
    nodes = []
    for b in range(blocks):
        size = draw(st.integers(1, 6))
        for n in range(size):
            nodes.append(
                Node(
                    name=f"b{b}-n{n}",
                    block=f"b{b}",
                    gpus=draw(st.sampled_from([4, 8, 8])),
                    state=draw(node_states),
                    tier_path=(f"leaf{b % 2}",),
                    busy_priority=draw(st.integers(0, 3)),
                )
            )
    return nodes


requests = st.builds(
    GangRequest,
    name=st.just("g"),
    nodes=st.integers(1, 12),
    gpus_per_node=st.sampled_from([1, 4, 8]),
    block_policy=st.sampled_from(list(BlockPolicy)),
    allow_busy=st.booleans(),
    # A preference must never cost a block: the properties below hold with it too.
    prefer_busy_below=st.one_of(st.none(), st.integers(0, 4)),
)


def _usable_counts(snapshot: Snapshot, request: GangRequest, busy: bool) -> list[int]:
    states = {F, I, B} if busy else {F, I}
    return [
        sum(1 for n in snapshot if n.block == b.name and n.state in states and n.gpus >= g)
        for b in snapshot.blocks
        for g in [request.gpus_per_node]
    ]


@settings(max_examples=200, deadline=None)
@given(fleets(), requests)
def test_never_spans_more_blocks_than_needed(nodes: list[Node], request: GangRequest) -> None:
    snapshot = Snapshot.of(nodes)
    decision = place(snapshot, request)
    if not decision.placed:
        return
    chosen = [snapshot.nodes[n] for n in decision.nodes]
    assert len(set(decision.nodes)) == request.nodes
    assert all(n.gpus >= request.gpus_per_node for n in chosen)
    assert all(n.state in (F, I, B) for n in chosen)
    assert {n.block for n in chosen} == set(decision.blocks)
    used_busy = any(n.state is B for n in chosen)
    assert request.allow_busy or not used_busy
    # Brute-force minimum over the state set the engine was entitled to use.
    bound = min_blocks_needed(_usable_counts(snapshot, request, busy=used_busy), request.nodes)
    assert bound is not None and len(decision.blocks) == bound
    if request.block_policy is BlockPolicy.SINGLE_BLOCK:
        assert len(decision.blocks) == 1
    if not used_busy:
        return
    # Busy nodes are used only when free and idle nodes cannot hold the gang.
    calm = _usable_counts(snapshot, request, busy=False)
    if request.block_policy is BlockPolicy.SINGLE_BLOCK:
        assert max(calm) < request.nodes
    else:
        assert sum(calm) < request.nodes


@settings(max_examples=100, deadline=None)
@given(fleets(), st.lists(requests, min_size=1, max_size=5))
def test_sequential_reservations_are_disjoint(nodes: list[Node], batch: list[GangRequest]) -> None:
    snapshot = Snapshot.of(nodes)
    taken: set[str] = set()
    for request in batch:
        decision = place(snapshot, request)
        assert not taken & set(decision.nodes)
        taken.update(decision.nodes)
        snapshot = snapshot.reserve(decision)


@settings(max_examples=100, deadline=None)
@given(fleets(), requests, st.randoms(use_true_random=False))
def test_deterministic_under_node_order_permutation(
    nodes: list[Node], request: GangRequest, rnd: random.Random
) -> None:
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    assert place(Snapshot.of(nodes), request) == place(Snapshot.of(shuffled), request)


@settings(max_examples=100, deadline=None)
@given(fleets(), st.data())
def test_incremental_snapshot_equals_a_fresh_one(nodes: list[Node], data: st.DataObject) -> None:
    snapshot = Snapshot.of(nodes)
    changed = [
        replace(n, state=data.draw(node_states), block=data.draw(st.sampled_from(["b0", "b7"])))
        for n in data.draw(st.lists(st.sampled_from(nodes), max_size=4, unique_by=lambda n: n.name))
    ]
    incremental = snapshot.with_nodes(changed)
    fresh = Snapshot.of({**{n.name: n for n in nodes}, **{n.name: n for n in changed}}.values())
    assert incremental.blocks == fresh.blocks
    assert dict(incremental.nodes) == dict(fresh.nodes)


@given(fleets(), requests)
def test_a_refusal_holds_for_every_request_of_its_shape(
    nodes: list[Node], request: GangRequest
) -> None:
    snapshot = Snapshot.of(nodes)
    first = place(snapshot, replace(request, name="team-a/first"))
    if first.placed:
        return
    other = replace(request, name="team-b/other")
    assert refused_alike(first, other) == place(snapshot, other)


@settings(max_examples=200, deadline=None)
@given(fleets(), requests, st.data())
def test_a_cap_per_block_is_as_if_the_other_idle_nodes_were_unavailable(
    nodes: list[Node], request: GangRequest, data: st.DataObject
) -> None:
    """`place(..., within=caps)` takes at most caps[block] free and idle nodes of a
    block, and fits exactly when the snapshot without the nodes beyond the caps fits."""
    snapshot = Snapshot.of(nodes)
    caps = {b.name: data.draw(st.integers(0, 6)) for b in snapshot.blocks}
    decision = place(snapshot, request, caps)
    taken: dict[str, int] = {}
    for name in decision.nodes:
        node = snapshot.nodes[name]
        if node.state is not B:
            taken[node.block] = taken.get(node.block, 0) + 1
    assert all(count <= caps[block] for block, count in taken.items())
    left = dict(caps)
    trimmed = []
    for node in sorted(nodes, key=lambda n: (n.state is not F, n.name)):
        usable = node.state in (F, I) and node.gpus >= request.gpus_per_node
        if usable and left[node.block] == 0:
            trimmed.append(replace(node, state=U))
            continue
        if usable:
            left[node.block] -= 1
        trimmed.append(node)
    assert decision.placed == place(Snapshot.of(trimmed), request).placed
