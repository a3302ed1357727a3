"""What a team may borrow on Kueue: quota its owner neither uses nor waits for."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from slurmkube.plan.policy import compile_kueue, plan_all_gates
from slurmkube.plan.policy.ledger import Observation
from slurmkube.plan.policy.shares import borrowable, kept_quota
from tests.unit.policy_builders import TeamBuilder, policy


def _obs(used: int = 0, pending: int = 0, smallest: int | None = None) -> Observation:
    least = (1 if pending else 0) if smallest is None else smallest
    return Observation(kueue_gpus=used, kueue_pending_gpus=pending, kueue_smallest_pending=least)


KEPT = {
    # nominal, used, pending, smallest pending -> kept
    "nothing waits": (8, 3, 0, 0, 0),
    "waiting work fits": (8, 6, 10, 1, 2),
    "waiting work smaller than the unused quota": (8, 3, 2, 1, 2),
    "smallest waiting workload does not fit": (8, 6, 10, 4, 0),
    "quota in use": (8, 8, 10, 1, 0),
    "above its quota (borrowing)": (8, 10, 10, 1, 0),
}


@pytest.mark.parametrize("case", KEPT)
def test_a_team_keeps_the_unused_quota_its_waiting_work_fits_in(case: str) -> None:
    nominal, used, pending, smallest, want = KEPT[case]
    assert kept_quota(nominal, _obs(used, pending, smallest)) == want


def _pair(borrowing_a: bool = True) -> Any:
    a = TeamBuilder("a").gpus(28).weight(2)
    return policy(
        (a.borrowing() if borrowing_a else a).obj(),
        TeamBuilder("b").gpus(28).weight(1).borrowing().obj(),
        kueueGPUs=12,
    )


BORROWABLE = {
    # observations of a and b -> what a and b may borrow
    "both saturate": ((7, 100), (5, 100), {"a": 0, "b": 0}),
    "a idle": ((0, 0), (4, 100), {"a": 0, "b": 8}),
    "a waits for part of its quota": ((5, 1), (4, 100), {"a": 0, "b": 2}),
    "b idle, a saturates": ((8, 100), (0, 0), {"a": 4, "b": 0}),
    "both idle": ((0, 0), (0, 0), {"a": 4, "b": 8}),
}


@pytest.mark.parametrize("case", BORROWABLE)
def test_only_quota_its_owner_neither_uses_nor_waits_for_is_borrowable(case: str) -> None:
    (ua, pa), (ub, pb), want = BORROWABLE[case]
    observations = {"a": _obs(ua, pa), "b": _obs(ub, pb)}
    assert borrowable(_pair(), {"a": 8, "b": 4}, observations) == want


def test_a_team_that_may_not_borrow_lends_nothing() -> None:
    observations = {"a": _obs(0, 0), "b": _obs(4, 100)}
    assert borrowable(_pair(borrowing_a=False), {"a": 8, "b": 4}, observations)["b"] == 0


def _gpu_quota(objects: list[dict[str, Any]], team: str) -> tuple[int, int]:
    for o in objects:
        if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == team:
            quota = o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
            return quota["nominalQuota"], quota["borrowingLimit"]
    raise AssertionError(team)


def test_two_saturating_teams_borrow_nothing_so_each_holds_its_share() -> None:
    # The fair-share bench's shape: 2:1 of 12 GPUs, b holding one of a's 8 while a waits.
    p = _pair()
    observations = {"a": _obs(7, 100), "b": _obs(5, 100)}
    objects = compile_kueue(p, {t: g.kueue for t, g in plan_all_gates(p, observations, {}).items()})
    assert _gpu_quota(objects, "a") == (8, 0)
    assert _gpu_quota(objects, "b") == (4, 0)


def test_idle_quota_is_lent_once_its_owner_stops_waiting() -> None:
    p = _pair()
    observations = {"a": _obs(2, 0), "b": _obs(4, 100)}
    objects = compile_kueue(p, {t: g.kueue for t, g in plan_all_gates(p, observations, {}).items()})
    assert _gpu_quota(objects, "b") == (4, 6)


@settings(max_examples=300, deadline=None)
@given(
    teams=st.lists(
        st.tuples(st.integers(0, 16), st.integers(0, 20), st.integers(0, 20), st.booleans()),
        min_size=1,
        max_size=5,
    )
)
def test_what_a_team_may_borrow_is_the_others_unused_quota_at_most(
    teams: list[tuple[int, int, int, bool]],
) -> None:
    p = policy(
        *(
            (
                TeamBuilder(f"t{i}").gpus(32).borrowing()
                if lends
                else TeamBuilder(f"t{i}").gpus(32)
            ).obj()
            for i, (_, _, _, lends) in enumerate(teams)
        )
    )
    nominal = {f"t{i}": q for i, (q, _, _, _) in enumerate(teams)}
    observations = {f"t{i}": _obs(u, w) for i, (_, u, w, _) in enumerate(teams)}
    got = borrowable(p, nominal, observations)
    for i in range(len(teams)):
        others = [t for j, t in enumerate(teams) if j != i]
        unused = sum(max(0, q - u) for q, u, _, lends in others if lends)
        assert 0 <= got[f"t{i}"] <= unused
        # Nothing is kept back from a team when no other team waits.
        if all(w == 0 for _, _, w, _ in others):
            assert got[f"t{i}"] == unused
