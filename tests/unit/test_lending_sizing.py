"""Packing a workload's GPU pods onto lent nodes (slurmkube.lending.sizing): tables, the
planner's use of it, and the property that kube-scheduler can always place every pod."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.lending import CheckState, LendingPolicy, PodSetView, plan_lending, size_lend
from tests.unit.test_lending import CHECK, WorkloadBuilder, fleet, only_check, world


@dataclass(frozen=True)
class Sizing:
    pod_sets: tuple[tuple[int, int], ...]  # (count, GPUs per pod)
    pool: tuple[int, ...]  # GPUs of the pool's nodes
    nodes: int
    pods_per_node: int
    gpus_per_node: int


SIZINGS = {
    "8 pods x 1 GPU on 4-GPU nodes: 2 nodes": Sizing(((8, 1),), (4,), 2, 4, 4),
    "4 pods x 2 GPUs on 4-GPU nodes: 2 nodes": Sizing(((4, 2),), (4,), 2, 2, 4),
    "a pod that takes a whole node: one per node": Sizing(((2, 8),), (8,), 2, 1, 8),
    "a remainder takes one more node": Sizing(((5, 1),), (4,), 2, 4, 4),
    "3-GPU pods on 4-GPU nodes: one per node, a GPU spare": Sizing(((3, 3),), (4,), 3, 1, 3),
    "a launcher without GPUs rides along": Sizing(((2, 4), (1, 0)), (4,), 2, 1, 4),
    "mixed sizes count as the largest": Sizing(((2, 2), (2, 1)), (4,), 2, 2, 4),
    "empty pod sets are not counted": Sizing(((0, 8), (3, 2)), (8,), 1, 4, 8),
    "mixed pool: its smallest node that holds the largest pod": Sizing(
        ((8, 1),), (8, 2, 4), 4, 2, 2
    ),
    "mixed pool: nodes too small for the pod do not count": Sizing(((4, 3),), (2, 8, 4), 4, 1, 3),
    "no node holds the pod: one per node (the placer rejects it)": Sizing(
        ((1, 16),), (8,), 1, 1, 16
    ),
}


@pytest.mark.parametrize("case", SIZINGS.values(), ids=SIZINGS.keys())
def test_gpu_pods_are_packed_by_the_pools_gpus_per_node(case: Sizing) -> None:
    pod_sets = [PodSetView(f"ps{i}", count, gpus) for i, (count, gpus) in enumerate(case.pod_sets)]
    sizing = size_lend(pod_sets, case.pool)
    assert sizing is not None
    assert (sizing.nodes, sizing.pods_per_node, sizing.gpus_per_node) == (
        case.nodes,
        case.pods_per_node,
        case.gpus_per_node,
    )


def test_a_workload_without_gpu_pods_has_no_size() -> None:
    assert size_lend([PodSetView("launcher", 1, 0), PodSetView("gpu", 0, 4)], (4,)) is None


def test_eight_one_gpu_pods_borrow_two_four_gpu_nodes_and_say_so() -> None:
    plan = plan_lending(world(fleet("IIII", gpus=4), WorkloadBuilder().pods(8, gpus=1).obj()))
    (lend,) = plan.lends
    assert lend.create is not None and len(lend.create.nodes) == 2
    state, message = only_check(plan)
    assert state is CheckState.PENDING
    assert "8 pods x 1 GPU, 4 per node: 2 nodes" in message


def test_max_nodes_judges_the_packed_node_count() -> None:
    policy = LendingPolicy(CHECK, max_nodes=2)  # 8 nodes before pods were packed
    plan = plan_lending(
        world(fleet("IIII", gpus=4), WorkloadBuilder().pods(8, gpus=1).obj(), policy=policy)
    )
    assert plan.lends[0].create is not None


# --- property: never under-provisioned ---------------------------------------------------


def any_fit(pods: list[int], nodes: list[int], rng: random.Random) -> bool:
    """kube-scheduler as an adversary: pods bound in any order, each to any node with room."""
    free = list(nodes)
    for gpus in rng.sample(pods, len(pods)):
        room = [i for i, f in enumerate(free) if f >= gpus]
        if not room:
            return False
        free[rng.choice(room)] -= gpus
    return True


pod_sets_strategy = st.lists(
    st.tuples(st.integers(0, 12), st.sampled_from([0, 1, 1, 2, 3, 4, 8])), min_size=1, max_size=4
)
pool_strategy = st.one_of(
    st.sampled_from([4, 8]).map(lambda g: (g,)),  # the usual: one node shape
    st.lists(st.sampled_from([1, 2, 4, 6, 8]), min_size=1, max_size=3).map(tuple),
)


@settings(max_examples=300, deadline=None)
@given(
    pod_sets=pod_sets_strategy,
    shapes=pool_strategy,
    blocks=st.integers(1, 3),
    seed=st.integers(0, 2**32),
)
def test_lent_nodes_always_hold_every_pod_in_any_binding_order(
    pod_sets: list[tuple[int, int]], shapes: tuple[int, ...], blocks: int, seed: int
) -> None:
    # Each block holds 4 nodes of every shape of the pool.
    nodes = tuple(
        replace(n, name=f"{n.name}-g{g}", gpus=g)
        for g in sorted(set(shapes))
        for n in fleet(*["IIII"] * blocks, gpus=g)
    )
    builder = WorkloadBuilder()
    builder.pod_sets = [PodSetView(f"ps{i}", c, g) for i, (c, g) in enumerate(pod_sets)]
    plan = plan_lending(world(nodes, builder.obj()))
    create = plan.lends[0].create if plan.lends else None
    if create is None:
        return
    gpus_of = {n.name: n.gpus for n in nodes}
    lent = [gpus_of[name] for name in create.nodes]
    pods = [g for c, g in pod_sets for _ in range(c) if g > 0]
    assert sum(lent) >= sum(pods)
    assert any_fit(pods, lent, random.Random(seed))
