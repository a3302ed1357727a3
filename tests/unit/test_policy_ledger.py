"""The ledger over both schedulers and the admission gates it gives each one."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from slurmkube.plan.policy import BudgetLevel, Observation, TeamUsage, accrue, plan_gates
from slurmkube.plan.policy.gates import split_headroom
from slurmkube.plan.policy.ledger import (
    budget_level,
    carry_over,
    decay,
    entitlement,
    hard_limit_gpu_minutes,
)
from slurmkube.plan.policy.usage import JobUse, slurm_gpu_seconds
from tests.unit.policy_builders import TeamBuilder, policy

HOUR = 3600.0
WEEK = 7 * 24 * HOUR

gpus = st.integers(min_value=0, max_value=512)
seconds = st.floats(min_value=0.0, max_value=30 * 24 * HOUR, allow_nan=False)
observations = st.builds(
    Observation,
    slurm_gpus=gpus,
    kueue_gpus=gpus,
    lent_gpus_in_slurm=st.integers(min_value=0, max_value=64),
    slurm_pending_gpus=gpus,
    kueue_pending_gpus=gpus,
)


@given(value=st.floats(min_value=0, max_value=1e12), a=seconds, b=seconds)
def test_decay_is_monotone_and_halves_every_half_life(value: float, a: float, b: float) -> None:
    early, late = sorted((a, b))
    assert decay(value, late, WEEK) <= decay(value, early, WEEK) <= value
    assert decay(value, WEEK, WEEK) == pytest.approx(value / 2)


@given(obs=observations, steps=st.lists(seconds, max_size=6))
def test_usage_is_the_sum_over_both_schedulers(obs: Observation, steps: list[float]) -> None:
    usage = TeamUsage()
    for dt in steps:
        usage = accrue(usage, dt, obs, WEEK)
    assert usage.period_gpu_seconds == pytest.approx(
        usage.slurm_period_gpu_seconds + usage.kueue_period_gpu_seconds
    )
    assert usage.period_gpu_seconds == pytest.approx(obs.used * sum(steps))
    # Decayed usage never exceeds undecayed usage.
    assert usage.decayed_gpu_seconds <= usage.period_gpu_seconds * (1 + 1e-9) + 1e-6


@given(obs=observations)
def test_a_lent_node_is_counted_once(obs: Observation) -> None:
    assert obs.used == max(0, obs.slurm_gpus - obs.lent_gpus_in_slurm) + obs.kueue_gpus


@given(obs=observations, a=seconds, b=seconds)
def test_decayed_usage_grows_with_use_and_not_with_idle_time(
    obs: Observation, a: float, b: float
) -> None:
    busy = accrue(TeamUsage(), a, obs, WEEK)
    idle = accrue(busy, b, Observation(), WEEK)
    assert idle.decayed_gpu_seconds <= busy.decayed_gpu_seconds + 1e-6
    assert idle.period_gpu_seconds == busy.period_gpu_seconds


@given(
    base=st.floats(min_value=1, max_value=1e6),
    a=st.floats(min_value=0, max_value=1e7),
    b=st.floats(min_value=0, max_value=1e7),
)
def test_thresholds_are_ordered(base: float, a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert budget_level(low * HOUR, base) <= budget_level(high * HOUR, base)


@pytest.mark.parametrize(
    ("used_hours", "level"),
    [
        (0, BudgetLevel.OK),
        (79.9, BudgetLevel.OK),
        (80, BudgetLevel.NOTIFY),
        (100, BudgetLevel.LOWER_TIER),
        (119.9, BudgetLevel.LOWER_TIER),
        (120, BudgetLevel.HOLD),
    ],
)
def test_waldur_thresholds_at_80_100_120_percent(used_hours: float, level: BudgetLevel) -> None:
    assert budget_level(used_hours * HOUR, 100) == level


@given(base=st.floats(min_value=0, max_value=1e6), used=st.floats(min_value=0, max_value=1e7))
def test_carry_over_is_at_most_half_the_base(base: float, used: float) -> None:
    carried = carry_over(base, used)
    assert 0 <= carried <= base / 2
    assert entitlement(base, carried) <= 1.5 * base + 1e-6
    assert hard_limit_gpu_minutes(entitlement(base, carried)) <= 1.2 * 1.5 * base * 60 + 1


def test_a_zero_budget_holds_new_work() -> None:
    assert budget_level(0, 0) == BudgetLevel.HOLD


@given(h=st.integers(min_value=-5, max_value=10_000), s=gpus, k=gpus)
def test_headroom_split_adds_up(h: int, s: int, k: int) -> None:
    slurm, kueue = split_headroom(h, s, k)
    assert slurm >= 0 and kueue >= 0
    assert slurm + kueue == max(0, h)


@given(
    h=st.integers(min_value=1, max_value=64),
    s=gpus,
    k=gpus,
    smallest=st.tuples(st.integers(min_value=0, max_value=16), st.integers(0, 16)),
    used=st.tuples(gpus, gpus),
)
def test_headroom_split_starts_something_whenever_a_waiting_request_fits(
    h: int, s: int, k: int, smallest: tuple[int, int], used: tuple[int, int]
) -> None:
    need_s, need_k = smallest
    slurm, kueue = split_headroom(h, s, k, smallest, used)
    assert slurm >= 0 and kueue >= 0 and slurm + kueue == h
    fits = [need for need in (need_s, need_k) if need and need <= h]
    if fits:  # some side gets at least its smallest waiting request
        assert (need_s and slurm >= need_s) or (need_k and kueue >= need_k)
    if need_s and need_k and need_s + need_k <= h:  # room for both: both start
        assert slurm >= need_s and kueue >= need_k


@pytest.mark.parametrize(
    ("headroom", "smallest", "used", "split"),
    [
        pytest.param(4, (4, 4), (0, 0), (4, 0), id="equal and idle: Slurm first"),
        pytest.param(4, (4, 4), (4, 0), (0, 4), id="the side running less takes its turn"),
        pytest.param(4, (4, 4), (0, 4), (4, 0), id="and back"),
        pytest.param(6, (4, 2), (0, 0), (4, 2), id="both fit when moved to whole requests"),
        pytest.param(8, (4, 4), (0, 0), (4, 4), id="the demand split already fits"),
    ],
)
def test_headroom_goes_to_whole_waiting_requests(
    headroom: int, smallest: tuple[int, int], used: tuple[int, int], split: tuple[int, int]
) -> None:
    # 16 GPUs wait on each side, as 4-GPU requests: 2 + 2 would start nothing.
    assert split_headroom(headroom, 16, 16, smallest, used) == split


TEAM = TeamBuilder("team-a").gpus(8).budget(100).tier("high").obj()
POLICY = policy(TEAM)
(ALLOCATION,) = POLICY.teams


@settings(max_examples=300)
@given(obs=observations, used_hours=st.floats(min_value=0, max_value=200))
def test_gates_never_fall_below_what_runs(obs: Observation, used_hours: float) -> None:
    gates = plan_gates(POLICY, ALLOCATION, obs, TeamUsage(period_gpu_seconds=used_hours * HOUR))
    assert gates.slurm.grp_tres_gpus >= obs.slurm_used
    assert gates.kueue.max_gpus >= obs.kueue_gpus


@settings(max_examples=300)
@given(
    obs=observations,
    slurm_starts=st.integers(min_value=0, max_value=64),
    kueue_starts=st.integers(min_value=0, max_value=64),
)
def test_combined_use_never_exceeds_the_quota_when_each_scheduler_keeps_its_gate(
    obs: Observation, slurm_starts: int, kueue_starts: int
) -> None:
    gates = plan_gates(POLICY, ALLOCATION, obs, TeamUsage())
    # Both schedulers admit at once, each up to its own gate and no further.
    slurm_after = min(obs.slurm_used + slurm_starts, gates.slurm.grp_tres_gpus)
    kueue_after = min(obs.kueue_gpus + kueue_starts, gates.kueue.max_gpus)
    # Nothing is killed: above the quota already, the gates hold at current use.
    assert slurm_after + kueue_after <= max(ALLOCATION.gpus, obs.used)
    if obs.used <= ALLOCATION.gpus:
        assert slurm_after + kueue_after <= ALLOCATION.gpus


def test_as_kueue_use_rises_slurm_headroom_falls() -> None:
    caps = [
        plan_gates(
            POLICY, ALLOCATION, Observation(kueue_gpus=k, slurm_pending_gpus=8), TeamUsage()
        ).slurm.grp_tres_gpus
        for k in range(9)
    ]
    assert caps == [8, 7, 6, 5, 4, 3, 2, 1, 0]


@pytest.mark.parametrize(
    ("used_hours", "tier", "stop", "reason"),
    [
        (10, "high", "None", ""),
        (85, "high", "None", "notice: 80% of the budget used"),
        (100, "normal", "None", "new work runs at tier normal"),
        (130, "normal", "Hold", "120% of the budget used: new work is held"),
    ],
)
def test_budget_thresholds_reach_both_schedulers_with_a_reason_naming_the_allocation(
    used_hours: float, tier: str, stop: str, reason: str
) -> None:
    obs = Observation(slurm_gpus=2, kueue_gpus=1, slurm_pending_gpus=4, kueue_pending_gpus=4)
    gates = plan_gates(POLICY, ALLOCATION, obs, TeamUsage(period_gpu_seconds=used_hours * HOUR))
    assert (gates.slurm.tier, gates.kueue.priority_class, gates.kueue.stop_policy) == (
        tier,
        tier,
        stop,
    )
    assert reason in gates.reason
    if reason:
        assert gates.reason.startswith("allocation team-a (AllocationSource fleet)")
    if stop == "Hold":
        assert (gates.slurm.grp_tres_gpus, gates.kueue.max_gpus) == (2, 1)


jobs = st.lists(
    st.builds(
        lambda start, length, running, g: JobUse(
            "team-a", running, g, start=start, end=None if running else start + length
        ),
        start=st.floats(min_value=0, max_value=1_000),
        length=st.floats(min_value=0, max_value=1_000),
        running=st.booleans(),
        g=st.integers(min_value=1, max_value=8),
    ),
    max_size=8,
)


@given(jobs=jobs, cuts=st.lists(st.floats(min_value=0, max_value=2_000), max_size=5))
def test_slurm_usage_from_job_times_adds_up_over_any_syncs(
    jobs: list[JobUse], cuts: list[float]
) -> None:
    """However the syncs fall, the intervals' GPU-seconds sum to the jobs' own."""
    until = 2_000.0
    edges = [0.0, *sorted(cuts), until]
    summed = sum(
        slurm_gpu_seconds(jobs, a, b).get("team-a", 0.0) for a, b in itertools.pairwise(edges)
    )
    own = sum(j.gpus * ((until if j.end is None else j.end) - (j.start or 0.0)) for j in jobs)
    assert summed == pytest.approx(own, abs=1e-6)


def test_a_job_shorter_than_a_sync_counts_and_a_pending_one_does_not() -> None:
    used = slurm_gpu_seconds(
        [
            JobUse("team-a", False, 4, start=103.0, end=106.0),  # ran 3 s between syncs
            # Started mid-interval; a running job's end_time is its time limit's.
            JobUse("team-a", True, 2, start=105.0, end=9_999.0),
            JobUse("team-b", False, 8, start=50.0, end=95.0),  # ended before it
            JobUse("team-b", False, 8, pending=True, start=120.0),  # an estimated start
        ],
        since=100.0,
        until=110.0,
    )
    assert used == {"team-a": 4 * 3 + 2 * 5}


@given(obs=observations, dt=st.floats(min_value=1.0, max_value=HOUR))
def test_exact_slurm_usage_of_jobs_running_throughout_is_the_sample(
    obs: Observation, dt: float
) -> None:
    sampled = accrue(TeamUsage(), dt, obs, WEEK)
    exact = accrue(TeamUsage(), dt, obs, WEEK, slurm_gpu_seconds=obs.slurm_gpus * dt)
    assert exact.period_gpu_seconds == pytest.approx(sampled.period_gpu_seconds)
    assert exact.decayed_gpu_seconds == pytest.approx(sampled.decayed_gpu_seconds)
