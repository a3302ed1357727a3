"""The lending policy: what Slurm can spare, where lends go, which blocks go back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.lending.sharing import (
    ArrivalRate,
    BlockView,
    Demand,
    SharingPolicy,
    choose_lends,
    expected,
    headroom_lends,
    lend_rank,
    lendable,
    reclaim,
    slurm_spare,
)

POLICY = SharingPolicy(horizon_s=1800.0, queue_depth=2)


def block(
    name: str,
    *,
    idle: int = 0,
    held: int = 0,
    busy: int = 0,
    ending_soon: int = 0,
    lent: int = 0,
    size: int = 16,
) -> BlockView:
    return BlockView(name, size, idle, held, busy, ending_soon, lent)


# --- how much Slurm can spare -------------------------------------------------------------

SPARE_CASES = {
    "no queue: every idle node": ([block("a", idle=5, busy=11)], (), 5),
    "head takes the idle nodes": ([block("a", idle=5, busy=11)], (5,), 0),
    "ends soon cover the head": ([block("a", idle=5, busy=11, ending_soon=4)], (8,), 1),
    "held nodes count for the head": ([block("a", idle=3, held=4, busy=9)], (4,), 3),
    "only queue_depth jobs are protected": ([block("a", idle=6, busy=10)], (1, 1, 100), 4),
    "never more than idle": ([block("a", idle=2, busy=14, ending_soon=14)], (1,), 2),
}


@pytest.mark.parametrize("case", sorted(SPARE_CASES))
def test_slurm_spares_what_its_queue_cannot_use_soon(case: str) -> None:
    blocks, waiting, spare = SPARE_CASES[case]
    assert slurm_spare(blocks, Demand(slurm_waiting=waiting), POLICY) == spare


def test_kubernetes_below_its_entitlement_is_lent_whatever_slurm_waits_for() -> None:
    blocks = [block("a", idle=6, busy=10)]
    owed = Demand(slurm_waiting=(16,), kubernetes_lent=10, kubernetes_entitled=14)
    assert lendable(blocks, owed, POLICY) == 4
    full = Demand(slurm_waiting=(16,), kubernetes_lent=14, kubernetes_entitled=14)
    assert lendable(blocks, full, POLICY) == 0


# --- where lends go -----------------------------------------------------------------------


def test_lends_go_to_kubernetes_blocks_then_whole_idle_blocks_then_busy_ones() -> None:
    blocks = [
        block("busy", idle=4, busy=12),
        block("mixed", idle=2, busy=10, lent=4),
        block("whole", idle=16),
        block("kube", idle=3, lent=13),
    ]
    takes = choose_lends(blocks, 25, Demand(), POLICY)
    assert takes == (("kube", 3), ("whole", 16), ("mixed", 2), ("busy", 4))


def test_block_view_refuses_counts_beyond_its_size() -> None:
    with pytest.raises(ValueError, match="exceed its size"):
        block("a", idle=10, busy=10)
    with pytest.raises(ValueError, match="negative"):
        block("a", idle=-1)
    with pytest.raises(ValueError, match="horizon_s"):
        SharingPolicy(horizon_s=-1.0)


@st.composite
def fleets(draw: st.DrawFn) -> list[BlockView]:
    blocks = []
    for i in range(draw(st.integers(1, 8))):
        size = draw(st.integers(1, 8))
        busy = draw(st.integers(0, size))
        lent = draw(st.integers(0, size - busy))
        held = draw(st.integers(0, size - busy - lent))
        idle = draw(st.integers(0, size - busy - lent - held))
        soon = draw(st.integers(0, busy))
        blocks.append(
            block(f"b{i}", idle=idle, held=held, busy=busy, ending_soon=soon, lent=lent, size=size)
        )
    return blocks


demands = st.builds(
    Demand,
    slurm_waiting=st.lists(st.integers(1, 20), max_size=4).map(tuple),
    kubernetes_lent=st.integers(0, 20),
    kubernetes_entitled=st.integers(0, 20),
)


@given(fleets(), st.integers(0, 40), demands)
def test_never_lends_what_slurms_queue_needs_within_the_horizon(
    blocks: list[BlockView], wanted: int, demand: Demand
) -> None:
    taken = sum(n for _, n in choose_lends(blocks, wanted, demand, POLICY))
    assert taken <= wanted
    owed = max(0, demand.kubernetes_entitled - demand.kubernetes_lent)
    soon = sum(b.idle + b.held + b.ending_soon for b in blocks)
    protected = sum(demand.slurm_waiting[: POLICY.queue_depth])
    # Beyond what Kubernetes is owed, what is left soon still covers Slurm's queue head.
    assert taken <= owed or soon - taken >= protected


@given(fleets(), st.integers(1, 40))
def test_never_lends_part_of_a_busy_block_while_a_whole_idle_block_exists(
    blocks: list[BlockView], wanted: int
) -> None:
    takes = dict(choose_lends(blocks, wanted, Demand(), POLICY))
    by_name = {b.name: b for b in blocks}
    whole_idle_left = [b for b in blocks if b.idle == b.size and takes.get(b.name, 0) < b.idle]
    if whole_idle_left:
        assert not any(by_name[name].busy for name in takes)


@given(fleets(), st.integers(1, 40))
def test_lends_never_exceed_a_blocks_idle_nodes(blocks: list[BlockView], wanted: int) -> None:
    by_name = {b.name: b for b in blocks}
    for name, count in choose_lends(blocks, wanted, Demand(), POLICY):
        assert 0 < count <= by_name[name].idle


def test_lend_rank_orders_by_kind_then_fullest_kubernetes_block() -> None:
    assert lend_rank(block("x", idle=1, lent=9)) < lend_rank(block("y", idle=1, lent=2))


# --- what goes back -----------------------------------------------------------------------


def test_reclaims_the_blocks_kubernetes_holds_least_of_while_slurm_waits() -> None:
    blocks = [
        block("few", idle=0, busy=14, lent=2),
        block("many", idle=0, busy=4, lent=12),
        block("some", idle=0, busy=11, lent=5),
    ]
    demand = Demand(slurm_waiting=(6,), kubernetes_lent=19, kubernetes_entitled=10)
    assert reclaim(blocks, demand, POLICY) == ("few", "some")


@given(fleets(), demands)
def test_reclaim_never_goes_below_the_entitlement_nor_acts_without_slurm_demand(
    blocks: list[BlockView], demand: Demand
) -> None:
    back = set(reclaim(blocks, demand, POLICY))
    lent_back = sum(b.lent for b in blocks if b.name in back)
    assert (
        demand.kubernetes_lent - lent_back
        >= min(demand.kubernetes_entitled, demand.kubernetes_lent)
        or not back
    )
    if sum(demand.slurm_waiting[: POLICY.queue_depth]) <= sum(
        b.idle + b.held + b.ending_soon for b in blocks
    ):
        assert not back


# --- learnt demand ------------------------------------------------------------------------


def test_a_steady_stream_reads_as_its_rate_and_decays_without_arrivals() -> None:
    rate = ArrivalRate()
    for second in range(20_000):
        rate = rate.observe(float(second), 2.0, 600.0)
    assert rate.at_time(20_000.0, 600.0) == pytest.approx(2.0, rel=0.01)
    assert rate.at_time(20_600.0, 600.0) == pytest.approx(1.0, rel=0.01)
    assert expected(rate, 20_000.0, 90.0, 600.0) == 180
    assert ArrivalRate().observe(0.0, 5.0, 0.0) == ArrivalRate()  # learning off


HEADROOM_CASES = {
    "enough free GPUs": (40, 30, [block("a", idle=8, busy=8)], (), 0),
    "short by 9 GPUs: two nodes": (21, 30, [block("a", idle=8, busy=8)], (), 2),
    "Slurm's head needs the idle nodes": (0, 30, [block("a", idle=8, busy=8)], (8,), 0),
}


@pytest.mark.parametrize("case", sorted(HEADROOM_CASES))
def test_headroom_is_lent_only_from_what_slurm_spares(case: str) -> None:
    free, want, blocks, waiting, nodes = HEADROOM_CASES[case]
    got = headroom_lends(
        blocks,
        Demand(slurm_waiting=waiting),
        POLICY,
        free_gpus=free,
        expected_gpus=want,
        gpus_per_node=8,
    )
    assert got == nodes


def test_slurms_expected_arrivals_are_protected_like_its_queue() -> None:
    blocks = [block("a", idle=6, busy=10)]
    assert slurm_spare(blocks, Demand(slurm_expected=4), POLICY) == 2
