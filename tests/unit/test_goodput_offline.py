"""Goodput recomputed from final records (`goodput/offline.py`, `slurmkube goodput`):
the figures by hand for a small window, and the same figures as the live
translator's tick-by-tick counting of the same history."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.cli import main
from slurmkube.goodput import GoodputLedger, JobEnded, JobStarted, JobSubmitted, NodeAdded, Side
from slurmkube.goodput.events import Event
from slurmkube.goodput.live import LiveGang, LiveNode, LiveTranslator
from slurmkube.goodput.offline import recompute, window_events
from tests.unit.goodput_world import ObservedWorld, snapshots

S = Side.SLURM
NODES = (LiveNode("n0", 4), LiveNode("n1", 4))


def gang(
    key: str,
    submitted: float,
    started: float | None,
    ended: float | None,
    *,
    nodes: tuple[str, ...] = ("n0",),
    gpus: int = 4,
) -> LiveGang:
    return LiveGang(
        key, "team", S, len(nodes), gpus, submitted, started, nodes if started else (), ended
    )


def test_a_window_by_hand() -> None:
    found = recompute(
        NODES,
        [
            gang("a", 0.0, 10.0, 50.0),  # 40 s x 4 GPUs, waited 10 s
            gang("b", 20.0, 30.0, None, nodes=("n1",)),  # still running at the end: 70 s x 4
            gang("c", 30.0, None, None, nodes=("n0", "n1")),  # never started
            gang("d", 150.0, 150.0, 160.0),  # after the window: not counted
        ],
        (0.0, 100.0),
    )
    report = found.report
    assert report.capacity_gpu_s == 800.0
    assert report.allocated_gpu_s == 160.0 + 280.0
    assert report.occupancy == pytest.approx(440.0 / 800.0)
    assert found.gpu_seconds["allocated"] == report.allocated_gpu_s
    assert sum(found.gpu_seconds.values()) == pytest.approx(800.0)
    assert report.waits_by_bucket["1-7"] == (10.0, 10.0)


def test_a_gang_started_and_ended_at_once_holds_nothing() -> None:
    events = window_events(NODES, [gang("a", 0.0, 5.0, 5.0)], (0.0, 10.0))
    assert [type(e) for e in events] == [NodeAdded, NodeAdded, JobSubmitted, JobEnded]


def test_nodes_join_before_the_first_gang_and_the_window() -> None:
    events = window_events(NODES, [gang("a", -30.0, -20.0, 5.0)], (0.0, 10.0))
    assert {e.t for e in events if isinstance(e, NodeAdded)} == {-30.0}
    assert (
        recompute(NODES, [gang("a", -30.0, -20.0, 5.0)], (0.0, 10.0)).report.allocated_gpu_s == 20
    )


def test_a_window_ending_before_it_starts_is_refused() -> None:
    with pytest.raises(ValueError, match="window ends before it starts"):
        recompute(NODES, [], (10.0, 0.0))


def _history(rng: random.Random) -> list[Event]:
    """Slurm-only jobs on four 4-GPU nodes: submitted, started where GPUs are free,
    ended; whole seconds, as Slurm reports them."""
    events: list[Event] = [NodeAdded(0.0, f"n{i}", 4, S) for i in range(4)]
    free = {f"n{i}": 4 for i in range(4)}
    running: dict[str, tuple[float, str, int]] = {}
    queued: list[tuple[str, int]] = []
    t = 0.0
    for i in range(40):
        t += float(rng.choice([0, 1, 2, 5]))
        for job, (end, node, gpus) in sorted(running.items()):
            if end <= t:
                events.append(JobEnded(end, job))
                free[node] += gpus
                del running[job]
        if rng.random() < 0.5:
            gpus = rng.choice([1, 2, 4])
            queued.append((f"j{i}", gpus))
            events.append(JobSubmitted(t, f"j{i}", rng.choice("ab"), S, 1, gpus))
        while queued:
            job, gpus = queued[0]
            node = next((n for n, g in sorted(free.items()) if g >= gpus), None)
            if node is None:
                break
            queued.pop(0)
            free[node] -= gpus
            running[job] = (t + float(rng.randint(1, 20)), node, gpus)
            events.append(JobStarted(t, job, (node,)))
    events.sort(key=lambda e: (e.t, 0 if isinstance(e, NodeAdded) else 1))
    return sorted(events, key=lambda e: e.t)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), start=st.sampled_from([0.0, 5.0, 17.0]))
def test_live_ticks_and_the_offline_recompute_agree(seed: int, start: float) -> None:
    """The exporter's path (snapshots through the translator, tick by tick, ended jobs
    leaving the list after three) and a recompute from the final records (every job
    still listed, as within MinJobAge) give the same window's figures."""
    events = _history(random.Random(seed))
    end = max(e.t for e in events) + 3.0
    window = (start, end)
    shots = list(snapshots(events))
    translator = LiveTranslator(start=0.0)
    live = GoodputLedger(window, {"a": 1.0, "b": 1.0})
    for shot in shots:
        live.observe_all(translator.translate(shot))
        live.advance_to(shot.t)
    live.advance_to(end)
    *_, last = snapshots(events, ObservedWorld(keep_ended=10**6))
    offline = recompute(last.nodes, last.gangs, window, {"a": 1.0, "b": 1.0}).report
    got = live.report()
    assert got.capacity_gpu_s == pytest.approx(offline.capacity_gpu_s)
    assert got.allocated_gpu_s == pytest.approx(offline.allocated_gpu_s)
    assert got.waste.as_dict() == pytest.approx(offline.waste.as_dict())
    assert got.waits_by_bucket == offline.waits_by_bucket


def _slurm_doc(key: str, items: list[dict[str, object]]) -> str:
    return json.dumps({key: items, "meta": {}, "errors": [], "warnings": []})


def test_the_cli_reads_slurms_json_and_names_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "cli"
    jobs, nodes = recorded / "show-job.json", recorded / "show-node.json"
    assert main(["goodput", "--jobs", str(jobs), "--nodes", str(nodes), "--to", "2e9"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["gpu_seconds"]) == {
        "allocated",
        "idle",
        "fragmentation",
        "reserved_in_transfer",
        "drained_down",
    }
    bad = tmp_path / "bad.json"
    bad.write_text(_slurm_doc("nodes", []))
    assert main(["goodput", "--jobs", str(bad), "--nodes", str(nodes)]) == 2
    assert f"--jobs {bad}: no 'jobs' list" in capsys.readouterr().err


def test_the_cli_counts_slurmdbds_node_events_and_names_a_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "cli"
    argv = ["goodput", "--jobs", str(recorded / "show-job.json")]
    argv += ["--nodes", str(recorded / "show-node.json")]
    argv += ["--from", "1800000000", "--to", "1800000100"]
    events = tmp_path / "events.txt"
    events.write_text("gb200-003|1800000010|1800000030|IDLE+DRAIN|bad\nelsewhere|1|2|DOWN|x\n")
    assert main([*argv, "--node-events", str(events)]) == 0
    drained = json.loads(capsys.readouterr().out)["gpu_seconds"]["drained_down"]
    assert drained == 20.0 * 4  # gb200-003's 4 GPUs for 20 s; a node not listed is not
    events.write_text("gb200-003|yesterday|Unknown|DOWN|x\n")
    assert main([*argv, "--node-events", str(events)]) == 2
    assert f"--node-events {events} line 1: TimeStart 'yesterday'" in capsys.readouterr().err
