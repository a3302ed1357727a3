"""Goodput metrics on small logs whose numbers are computed by hand in the comments."""

from __future__ import annotations

import math

import pytest

from slurmkube.goodput import (
    Event,
    GoodputLedger,
    Health,
    JobEnded,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeAdded,
    NodeHealthChanged,
    NodeTransferBegan,
    NodeTransferEnded,
    Side,
    jain_index,
    percentile,
    size_bucket,
    water_fill,
)

S, K = Side.SLURM, Side.KUBERNETES


def nodes(*names: str, owner: Side = S, transferable: bool = False) -> list[Event]:
    return [NodeAdded(0, n, 8, owner, transferable=transferable) for n in names]


def job(
    t: float, name: str, *, members: int = 1, gpus: int = 8, side: Side = S, team: str = "a"
) -> JobSubmitted:
    return JobSubmitted(t, name, team, side, members, gpus)


def run(events: list[Event], window: tuple[float, float] = (0, 100), **kw: object):
    ledger = GoodputLedger(window, kw.pop("teams", {"a": 1.0}), **kw)  # type: ignore[arg-type]
    ledger.observe_all(events)
    ledger.advance_to(window[1])
    return ledger.report()


def test_occupancy_and_waste_of_one_job_on_one_node() -> None:
    # alloc 8*50=400; queued and free 0-10 -> fragmentation 80; nobody waits 60-100 -> idle 320.
    r = run([*nodes("n1"), job(0, "j"), JobStarted(10, "j", ("n1",)), JobEnded(60, "j")])
    assert r.occupancy == pytest.approx(0.5)
    assert r.waste.fragmentation == pytest.approx(0.1)
    assert r.waste.idle_healthy == pytest.approx(0.4)
    assert r.waste.drained_down == r.waste.reserved_unused == 0


def test_gang_whose_members_start_at_different_times() -> None:
    # Member 1 at 10, member 2 at 30, end at 80, on 2 nodes (1600 GPU-s):
    # alloc 8*70 + 8*50 = 960; waiting 0-30 with 16 then 8 free -> 160 + 160 = 320;
    # idle 80-100: 320. The gang is placed at 30: tts 30, goodput (80-30)/80.
    r = run(
        [
            *nodes("n1", "n2"),
            job(0, "g", members=2),
            JobStarted(10, "g", ("n1",)),
            JobStarted(30, "g", ("n2",)),
            JobEnded(80, "g"),
        ]
    )
    assert r.occupancy == pytest.approx(0.6)
    assert r.waste.fragmentation == pytest.approx(0.2)
    assert r.waste.idle_healthy == pytest.approx(0.2)
    assert r.time_to_start["8-63"].p50_s == 30
    assert r.gang_goodput_mean == pytest.approx(50 / 80)


def test_drained_node_is_waste_and_not_healthy() -> None:
    # n2 drained 20-70: 8*50 = 400 of 1600 GPU-s; a job holds n1 all along: 800 / 1200 healthy.
    r = run(
        [
            *nodes("n1", "n2"),
            job(0, "j"),
            JobStarted(0, "j", ("n1",)),
            NodeHealthChanged(20, "n2", Health.DRAINED),
            NodeHealthChanged(70, "n2", Health.UP),
        ]
    )
    assert r.waste.drained_down == pytest.approx(0.25)
    assert r.occupancy == pytest.approx(800 / 1200)
    assert r.healthy_gpu_s == pytest.approx(1200)


def test_lent_node_counts_reserved_until_the_pod_runs() -> None:
    # A Kubernetes pod (4 GPUs) submitted at 5; the Slurm node is lent 10-40, the pod runs
    # 40-90. Reserved 8*30 = 240; alloc 4*50 = 200; free empty node wanted by the queued
    # pod 5-10 -> fragmentation 40; idle 0-5 (40) + 40-90 half node (200) + 90-100 (80).
    r = run(
        [
            *nodes("n1", transferable=True),
            job(5, "pod", gpus=4, side=K),
            NodeTransferBegan(10, "n1", K),
            NodeTransferEnded(40, "n1", K),
            JobStarted(40, "pod", ("n1",)),
            JobEnded(90, "pod"),
        ]
    )
    assert r.waste.reserved_unused == pytest.approx(0.3)
    assert r.occupancy == pytest.approx(0.25)
    assert r.waste.fragmentation == pytest.approx(0.05)
    assert r.waste.idle_healthy == pytest.approx(0.4)
    assert r.time_to_start["1-7"].p50_s == 35


def test_static_pool_does_not_count_the_other_sides_queue() -> None:
    # Same as above without transfer: the Slurm node's free GPUs are idle, not fragmentation.
    r = run([*nodes("n1"), job(5, "pod", gpus=4, side=K)])
    assert r.waste.fragmentation == 0
    assert r.waste.idle_healthy == pytest.approx(1.0)


def test_preempted_gang_goodput_counts_only_placed_time() -> None:
    r = run(
        [
            *nodes("n1"),
            job(0, "j"),
            JobStarted(10, "j", ("n1",)),
            JobPreempted(30, "j"),
            JobStarted(50, "j", ("n1",)),
            JobEnded(70, "j"),
        ]
    )
    assert r.gang_goodput_mean == pytest.approx(40 / 70)
    assert r.time_to_start["8-63"].p50_s == 10  # the first start counts
    assert r.occupancy == pytest.approx(320 / 800)


def test_fairness_against_demand_capped_entitlement() -> None:
    # Both teams want 16 GPUs of 16; team a gets them all: entitled 8/8, used 16/0.
    events = [*nodes("n1", "n2"), job(0, "a1", members=2), job(0, "b1", members=2, team="b")]
    events.append(JobStarted(0, "a1", ("n1", "n2")))
    r = run(events, teams={"a": 1.0, "b": 1.0})
    assert r.fairness["a"].ratio == pytest.approx(2.0)
    assert r.fairness["b"].ratio == 0
    assert r.jain_index == pytest.approx(0.5)


def test_fairness_team_without_demand_is_not_owed() -> None:
    r = run(
        [*nodes("n1", "n2"), job(0, "a1", members=2), JobStarted(0, "a1", ("n1", "n2"))],
        teams={"a": 1.0, "b": 3.0},
    )
    assert set(r.fairness) == {"a"} and r.fairness["a"].ratio == pytest.approx(1.0)
    assert r.jain_index == pytest.approx(1.0)


def test_fairness_window_decays_old_usage() -> None:
    # Half-life 10 s: 2**(t/10) integrates to 10/ln2 over 0-10 and 20/ln2 over 10-20.
    events = [
        *nodes("n1"),
        job(0, "a1", team="a"),
        job(0, "b1", team="b"),
        JobStarted(0, "a1", ("n1",)),
        JobEnded(10, "a1"),
        JobStarted(10, "b1", ("n1",)),
    ]
    r = run(events, window=(0, 20), teams={"a": 1.0, "b": 1.0}, half_life_s=10.0)
    assert r.fairness["a"].usage_share == pytest.approx(1 / 3)
    assert r.fairness["b"].usage_share == pytest.approx(2 / 3)


def test_time_to_start_by_gang_size_bucket() -> None:
    events: list[Event] = [NodeAdded(0, f"n{i}", 8, S) for i in range(64)]
    for i, (members, gpus, wait) in enumerate([(1, 1, 1), (1, 8, 2), (8, 8, 3), (64, 8, 4)]):
        events.append(job(0, f"j{i}", members=members, gpus=gpus))
        events.append(JobStarted(wait, f"j{i}", tuple(f"n{k}" for k in range(members))))
        events.append(JobEnded(wait + 0.5, f"j{i}"))
    r = run(sorted(events, key=lambda e: e.t))
    assert {b: s.p50_s for b, s in r.time_to_start.items()} == {
        "1-7": 1,
        "8-63": 2,
        "64-511": 3,
        "512+": 4,
    }
    assert r.tts_p95_s_64plus == 4


def test_events_out_of_order_are_refused() -> None:
    ledger = GoodputLedger((0, 10), {})
    ledger.observe(NodeAdded(5, "n1", 8, S))
    with pytest.raises(ValueError, match="arrived after"):
        ledger.observe(NodeAdded(1, "n2", 8, S))


def test_overcommitted_node_is_refused() -> None:
    ledger = GoodputLedger((0, 10), {}).observe_all([*nodes("n1"), job(0, "j", members=2)])
    with pytest.raises(ValueError, match="GPUs in use"):
        ledger.observe(JobStarted(1, "j", ("n1", "n1")))


def test_occupancy_series_has_one_point_per_step() -> None:
    r = run(
        [*nodes("n1"), job(0, "j"), JobStarted(0, "j", ("n1",)), JobEnded(50, "j")],
        series_step_s=25.0,
    )
    assert [round(o, 3) for _, o in r.occupancy_series] == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [([1, 2, 3, 4], 50, 2), ([1, 2, 3, 4], 95, 4), ([5], 99, 5), ([3, 1, 2], 0, 1)],
)
def test_percentile_is_nearest_rank(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == expected


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 50))


@pytest.mark.parametrize(("xs", "expected"), [([1, 1, 1], 1.0), ([1, 0], 0.5), ([0, 0], 1.0)])
def test_jain_index(xs: list[float], expected: float) -> None:
    assert jain_index(xs) == pytest.approx(expected)


def test_water_fill_gives_unused_share_to_others_by_weight() -> None:
    shares = water_fill(12, {"a": 1, "b": 1, "c": 2}, {"a": 1, "b": 100, "c": 100})
    assert shares == pytest.approx({"a": 1, "b": 11 / 3, "c": 22 / 3})


@pytest.mark.parametrize(
    ("gpus", "bucket"),
    [(1, "1-7"), (7, "1-7"), (8, "8-63"), (64, "64-511"), (511, "64-511"), (512, "512+")],
)
def test_size_bucket(gpus: int, bucket: str) -> None:
    assert size_bucket(gpus) == bucket


def test_usage_before_the_window_is_not_counted() -> None:
    # A job running from -50 to 50 inside window 0-100 on one node: 400 of 800 GPU-s.
    events = [
        NodeAdded(-50, "n1", 8, S),
        job(-50, "j"),
        JobStarted(-50, "j", ("n1",)),
        JobEnded(50, "j"),
    ]
    r = run(events)
    assert r.occupancy == pytest.approx(0.5)
    assert r.time_to_start["8-63"].count == 0  # submitted before the window
    assert r.fairness["a"].usage_share == pytest.approx(1.0)
