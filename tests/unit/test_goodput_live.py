"""The live translator: observed snapshots -> the ledger's events, and the same figures
as the simulator's own ledger when fed the simulator's recorded run."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.goodput import (
    Event,
    GoodputLedger,
    GoodputReport,
    Health,
    JobEnded,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeAdded,
    NodeHealthChanged,
    NodeRemoved,
    NodeTransferBegan,
    NodeTransferEnded,
    Side,
)
from slurmkube.goodput.live import LiveSnapshot, LiveTranslator
from slurmkube.goodput.live_ledger import LiveLedger
from slurmkube_sim import (
    SCENARIOS,
    Sharing,
    StaticSplit,
    UpperBound,
    build_workload,
    simulate,
    state,
)
from slurmkube_sim.alibaba import load_pods
from slurmkube_sim.engine import FailureModel
from tests.unit.goodput_world import RecordingLedger, gang, node, snapshots

S, K = Side.SLURM, Side.KUBERNETES
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "alibaba_gpu_v2023_pods_sample.csv"


def shot(t: float, nodes: Sequence[object] = (), gangs: Sequence[object] = ()) -> LiveSnapshot:
    return LiveSnapshot(t, tuple(nodes), tuple(gangs))  # type: ignore[arg-type]


def kinds(events: Sequence[Event]) -> list[tuple[str, float]]:
    return [(type(e).__name__, e.t) for e in events]


# --- table: one change, its events ---------------------------------------------------


CASES: dict[str, tuple[list[LiveSnapshot], list[tuple[str, float]]]] = {
    "a node joins at the snapshot's time": (
        [shot(5, [node("n1")])],
        [("NodeAdded", 5)],
    ),
    "a running job's node joins before the job started": (
        [shot(100, [node("n1")], [gang("slurm/1", 10, started=40, nodes=("n1",))])],
        [("NodeAdded", 10), ("JobSubmitted", 10), ("JobStarted", 40)],
    ),
    "a job seen queued, running, then ended keeps Slurm's times": (
        [
            shot(5, [node("n1")], [gang("slurm/1", 3)]),
            shot(20, [node("n1")], [gang("slurm/1", 3, started=12, nodes=("n1",))]),
            shot(40, [node("n1")], [gang("slurm/1", 3, started=12, nodes=("n1",), ended=33)]),
        ],
        [("NodeAdded", 3), ("JobSubmitted", 3), ("JobStarted", 12), ("JobEnded", 33)],
    ),
    "a job gone from the list ends at the snapshot's time": (
        [
            shot(5, [node("n1")], [gang("slurm/1", 5, started=5, nodes=("n1",))]),
            shot(30, [node("n1")]),
        ],
        [("NodeAdded", 5), ("JobSubmitted", 5), ("JobStarted", 5), ("JobEnded", 30)],
    ),
    "a requeued job is preempted when seen queued again": (
        [
            shot(5, [node("n1")], [gang("slurm/1", 5, started=5, nodes=("n1",))]),
            shot(30, [node("n1")], [gang("slurm/1", 5)]),
            shot(50, [node("n1")], [gang("slurm/1", 5, started=45, nodes=("n1",))]),
        ],
        [
            ("NodeAdded", 5),
            ("JobSubmitted", 5),
            ("JobStarted", 5),
            ("JobPreempted", 30),
            ("JobStarted", 45),
        ],
    ),
    "a restart between two snapshots is a preemption and a start": (
        [
            shot(5, [node("n1")], [gang("slurm/1", 5, started=5, nodes=("n1",))]),
            shot(50, [node("n1")], [gang("slurm/1", 5, started=45, nodes=("n1",))]),
        ],
        [
            ("NodeAdded", 5),
            ("JobSubmitted", 5),
            ("JobStarted", 5),
            ("JobPreempted", 45),
            ("JobStarted", 45),
        ],
    ),
    "a report older than the last snapshot comes at its time": (
        [
            shot(5, [node("n1")], [gang("slurm/1", 5, started=5, nodes=("n1",))]),
            shot(30, [node("n1")], [gang("slurm/1", 5, started=5, nodes=("n1",))]),
            shot(40, [node("n1")], [gang("slurm/1", 5, started=5, nodes=("n1",), ended=20)]),
        ],
        [("NodeAdded", 5), ("JobSubmitted", 5), ("JobStarted", 5), ("JobEnded", 30)],
    ),
    "a node lent, then settled, then back": (
        [
            shot(5, [node("n1")]),
            shot(10, [node("n1", moving_to=K)]),
            shot(20, [node("n1", owner=K)]),
            shot(30, [node("n1", moving_to=S, owner=K)]),
            shot(40, [node("n1")]),
        ],
        [
            ("NodeAdded", 5),
            ("NodeTransferBegan", 10),
            ("NodeTransferEnded", 20),
            ("NodeTransferBegan", 30),
            ("NodeTransferEnded", 40),
        ],
    ),
    "a node changing owner between snapshots begins and ends its transfer at once": (
        [shot(5, [node("n1")]), shot(10, [node("n1", owner=K)])],
        [("NodeAdded", 5), ("NodeTransferBegan", 10), ("NodeTransferEnded", 10)],
    ),
    "a node drained then gone": (
        [
            shot(5, [node("n1")]),
            shot(10, [node("n1", health=Health.DRAINED)]),
            shot(20, []),
        ],
        [("NodeAdded", 5), ("NodeHealthChanged", 10), ("NodeRemoved", 20)],
    ),
    "a node holding a job leaves only after the job": (
        [
            shot(5, [node("n1")], [gang("slurm/1", 5, started=5, nodes=("n1",))]),
            shot(10, [], [gang("slurm/1", 5, started=5, nodes=("n1",))]),
            shot(20, [], [gang("slurm/1", 5, started=5, nodes=("n1",), ended=15)]),
        ],
        [
            ("NodeAdded", 5),
            ("JobSubmitted", 5),
            ("JobStarted", 5),
            ("JobEnded", 15),
            ("NodeRemoved", 20),
        ],
    ),
    "a member on an unknown node or past its GPUs stays unplaced": (
        [
            shot(
                5,
                [node("n1")],
                [
                    gang("slurm/1", 1, members=2, per=8, started=2, nodes=("n1", "ghost")),
                    gang("slurm/2", 1, per=4, started=3, nodes=("n1",)),
                ],
            )
        ],
        [
            ("NodeAdded", 1),
            ("JobSubmitted", 1),
            ("JobSubmitted", 1),
            ("JobStarted", 2),
        ],
    ),
    "a gang started on nodes not known yet is placed once they are": (
        [
            shot(5, [node("n1")], [gang("kueue/w", 1, started=3, nodes=())]),
            shot(10, [node("n1")], [gang("kueue/w", 1, started=3, nodes=("n1",))]),
        ],
        [("NodeAdded", 1), ("JobSubmitted", 1), ("JobStarted", 10)],
    ),
    "a job started and ended in the same instant places nothing": (
        [shot(5, [node("n1")], [gang("slurm/1", 1, started=3, nodes=("n1",), ended=3)])],
        [("NodeAdded", 1), ("JobSubmitted", 1), ("JobEnded", 3)],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_snapshots_become_events(name: str) -> None:
    snapshots_, expected = CASES[name]
    translator = LiveTranslator(start=0.0)
    ledger = LiveLedger(0.0)
    got: list[Event] = []
    for snapshot in snapshots_:
        events = translator.translate(snapshot)
        ledger.observe_all(events)  # never invalid, never out of order
        ledger.advance_to(snapshot.t)
        got += events
    assert kinds(got) == expected


def test_the_same_snapshot_twice_is_told_once() -> None:
    translator = LiveTranslator(start=0.0)
    snapshot = shot(9, [node("n1")], [gang("slurm/1", 1, started=2, nodes=("n1",), ended=8)])
    assert len(translator.translate(snapshot)) == 4
    assert translator.translate(snapshot) == []
    assert translator.translate(shot(12, [node("n1")])) == []  # purged after MinJobAge


def test_first_whole_start_is_reported_once_inside_the_window() -> None:
    translator = LiveTranslator(start=10.0)
    running = gang("slurm/old", 1, started=2, nodes=("n1",))
    translator.translate(shot(10, [node("n1"), node("n2")], [running, gang("slurm/new", 12)]))
    translator.translate(
        shot(
            30,
            [node("n1"), node("n2")],
            [running, gang("slurm/new", 12, started=25, nodes=("n2",))],
        )
    )
    assert [(s.side, s.gpus, s.wait_s) for s in translator.starts] == [(S, 8, 13.0)]


def test_lending_view_follows_the_lease_and_slurm() -> None:
    translator = LiveTranslator(start=0.0)
    view = translator.lending_view
    assert view("n1", lent=False, admitted=False, slurm=Health.DRAINED, ready=True) == (
        Health.DRAINED,
        S,
        None,
    )
    assert view("n1", lent=True, admitted=False, slurm=Health.DOWN, ready=True) == (Health.UP, K, K)
    translator.translate(shot(5, [node("n1", owner=K)]))
    assert view("n1", lent=False, admitted=False, slurm=Health.DOWN, ready=True) == (
        Health.UP,
        S,
        S,
    )
    assert view("n1", lent=False, admitted=False, slurm=Health.UP, ready=False) == (
        Health.DOWN,
        S,
        None,
    )


# --- properties -------------------------------------------------------------------------


def _figures(report: GoodputReport) -> dict[str, float]:
    out = {
        "capacity": report.capacity_gpu_s,
        "healthy": report.healthy_gpu_s,
        "allocated": report.allocated_gpu_s,
        "occupancy": report.occupancy,
        **{f"waste.{k}": v for k, v in report.waste.as_dict().items()},
        "tts_p95_64plus": report.tts_p95_s_64plus,
        "goodput_mean": report.gang_goodput_mean,
        "goodput_gpu": report.gang_goodput_gpu_weighted,
        "jain": report.jain_index,
        "gangs_finished": float(report.gangs_finished),
    }
    for bucket, times in report.time_to_start.items():
        out[f"tts.{bucket}.count"] = float(times.count)
        out[f"tts.{bucket}.p50"] = times.p50_s
        out[f"tts.{bucket}.p95"] = times.p95_s
    for team, share in report.fairness.items():
        out[f"fair.{team}"] = share.ratio
    return out


def _assert_same(live: GoodputReport, offline: GoodputReport) -> None:
    a, b = _figures(live), _figures(offline)
    assert a.keys() == b.keys()
    for key in a:
        if math.isnan(b[key]):
            assert math.isnan(a[key]), key
        else:
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-9), key


def _live_report(
    events: Sequence[Event], window: tuple[float, float], teams: dict[str, float]
) -> GoodputReport:
    translator = LiveTranslator(start=window[0])
    ledger = GoodputLedger(window, teams)
    for snapshot in snapshots(events):
        ledger.observe_all(translator.translate(snapshot))
        ledger.advance_to(snapshot.t)
    ledger.advance_to(max(window[1], ledger_now(events)))
    return ledger.report()


def ledger_now(events: Sequence[Event]) -> float:
    return max((e.t for e in events), default=0.0)


def _offline_report(
    events: Sequence[Event], window: tuple[float, float], teams: dict[str, float]
) -> GoodputReport:
    ledger = GoodputLedger(window, teams).observe_all(events)
    ledger.advance_to(max(window[1], ledger_now(events)))
    return ledger.report()


SMALL = SCENARIOS["small"]()
# Nodes failing every half day and repaired in 10 minutes: health changes, requeues and
# transfers cut short in every run.
FAILING = FailureModel(per_node_day=2.0, repair_s=600.0)
POLICIES = {"static": StaticSplit(1), "sharing": Sharing(), "upper": UpperBound()}


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(1, 1000), policy=st.sampled_from(sorted(POLICIES)))
def test_the_simulators_run_observed_live_gives_its_figures(seed: int, policy: str) -> None:
    workload = build_workload(SMALL, load_pods(FIXTURE), 500, seed=seed)
    RecordingLedger.recorded.clear()
    original = state.GoodputLedger
    state.GoodputLedger = RecordingLedger  # type: ignore[misc]
    try:
        outcome = simulate(
            SMALL.fleet,
            workload.jobs,
            POLICIES[policy],
            teams=SMALL.teams(),
            horizon=workload.horizon_s,
            seed=seed,
            failures=FAILING,
        )
    finally:
        state.GoodputLedger = original  # type: ignore[misc]
    (events,) = RecordingLedger.recorded
    window = (0.0, workload.horizon_s)
    _assert_same(_live_report(events, window, SMALL.teams()), outcome.report)


def _random_log(rng: random.Random) -> list[Event]:
    """A small valid event log: 4 nodes, jobs that queue, start, get preempted and end.
    No job is released in the instant it started: no observer can see that."""
    events: list[Event] = [
        NodeAdded(0.0, f"n{i}", 8, S if i < 3 else K, transferable=True) for i in range(4)
    ]
    t = 0.0
    free = {f"n{i}": 8 for i in range(4)}
    running: dict[str, tuple[str, ...]] = {}
    started: dict[str, float] = {}
    queued: list[str] = []
    for i in range(30):
        t += rng.choice([0.0, 1.0, 2.5, 7.0])
        action = rng.random()
        if action < 0.4:
            job = f"j{i}"
            events.append(JobSubmitted(t, job, rng.choice("ab"), rng.choice([S, K]), 1, 4))
            queued.append(job)
        elif action < 0.7 and queued:
            node_ = next((n for n, g in free.items() if g >= 4), None)
            if node_ is not None:
                job = queued.pop(0)
                free[node_] -= 4
                running[job] = (node_,)
                started[job] = t
                events.append(JobStarted(t, job, (node_,)))
        elif action < 0.85 and any(started[j] < t for j in running):
            job = rng.choice(sorted(j for j in running if started[j] < t))
            for n in running.pop(job):
                free[n] += 4
            if rng.random() < 0.5:
                events.append(JobEnded(t, job))
            else:
                events.append(JobPreempted(t, job))
                queued.append(job)
        else:
            n = rng.choice(sorted(free))
            events.append(
                rng.choice(
                    [
                        NodeHealthChanged(t, n, rng.choice(list(Health))),
                        NodeTransferBegan(t, n, rng.choice([S, K])),
                        NodeTransferEnded(t, n, rng.choice([S, K])),
                    ]
                )
            )
    return events


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), repeats=st.integers(1, 3))
def test_repeated_snapshots_never_count_twice(seed: int, repeats: int) -> None:
    events = _random_log(random.Random(seed))
    window = (0.0, 200.0)
    teams = {"a": 1.0, "b": 2.0}
    translator = LiveTranslator(start=0.0)
    ledger = GoodputLedger(window, teams)
    for snapshot in snapshots(events):
        for _ in range(repeats):
            ledger.observe_all(translator.translate(snapshot))
        ledger.advance_to(snapshot.t)
    ledger.advance_to(window[1])
    _assert_same(ledger.report(), _offline_report(events, window, teams))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), lag=st.integers(1, 4))
def test_late_snapshots_count_every_gpu_second_once(seed: int, lag: int) -> None:
    """Seeing only every `lag`-th instant (changes reported late, some never seen
    in between) moves events later, never doubles them: allocated GPU-seconds
    never exceed the offline ledger's by more than the lag allows, and the
    capacity is the same."""
    events = _random_log(random.Random(seed))
    window = (0.0, 200.0)
    shots = list(snapshots(events))
    translator = LiveTranslator(start=0.0)
    ledger = GoodputLedger(window, {"a": 1.0})
    for snapshot in shots[::lag] + shots[-1:]:
        ledger.observe_all(translator.translate(snapshot))
        ledger.advance_to(snapshot.t)
    ledger.advance_to(window[1])
    live, offline = ledger.report(), _offline_report(events, window, {"a": 1.0})
    assert live.capacity_gpu_s == pytest.approx(offline.capacity_gpu_s)
    assert live.allocated_gpu_s <= live.healthy_gpu_s + 1e-9
    assert 0.0 <= live.occupancy <= 1.0


def test_removed_node_leaves_the_capacity() -> None:
    ledger = GoodputLedger((0.0, 100.0), {})
    ledger.observe_all(
        [NodeAdded(0.0, "n1", 8, S), NodeAdded(0.0, "n2", 8, S), NodeRemoved(50.0, "n2")]
    )
    ledger.advance_to(100.0)
    assert ledger.report().capacity_gpu_s == pytest.approx(8 * 100 + 8 * 50)


def test_removing_a_busy_node_is_refused() -> None:
    ledger = GoodputLedger((0.0, 100.0), {})
    ledger.observe_all(
        [
            NodeAdded(0.0, "n1", 8, S),
            JobSubmitted(0.0, "j", "a", S, 1, 8),
            JobStarted(1.0, "j", ("n1",)),
        ]
    )
    with pytest.raises(ValueError, match="n1"):
        ledger.observe(NodeRemoved(2.0, "n1"))
