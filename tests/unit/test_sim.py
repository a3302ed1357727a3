"""The fleet simulator: inputs, determinism, invariants over whole runs, and its outputs."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from slurmkube.goodput import Side
from slurmkube.lending.sharing import SharingPolicy
from slurmkube_sim import (
    SCENARIOS,
    FailureModel,
    FleetSpec,
    Sharing,
    SimJob,
    StaticSplit,
    UpperBound,
    build_workload,
    compare,
    simulate,
)
from slurmkube_sim.alibaba import load_pods
from slurmkube_sim.cli import main
from slurmkube_sim.engine import NO_FAILURES
from slurmkube_sim.workload import SlurmWorkloadModel, generate_slurm_jobs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "alibaba_gpu_v2023_pods_sample.csv"
SMALL_JOBS = 900  # the small scenario's steady state already holds a few hundred


def pod(name: str, t: float, gpus: int, duration: float, team: str = "serving") -> SimJob:
    return SimJob(name, Side.KUBERNETES, team, t, 1, gpus, duration, duration)


def gang(name: str, t: float, nodes: int, duration: float, *, single: bool = False) -> SimJob:
    return SimJob(name, Side.SLURM, "train-a", t, nodes, 8, duration, duration, 1, single)


TEAMS = {"train-a": 0.5, "serving": 0.5}
TWO_BLOCKS = FleetSpec(nodes=32, gpus_per_node=8, nodes_per_block=16, blocks_per_leaf=2)


# --- inputs ---------------------------------------------------------------------------


def test_loader_keeps_gpu_pods_that_ran() -> None:
    pods = load_pods(FIXTURE)
    assert len(pods) == 150  # the 5 CPU-only and 5 never-scheduled rows are skipped
    assert all(p.gpus >= 1 and p.runtime > 0 for p in pods)
    assert {p.team for p in pods} <= {"serving", "batch", "platform"}


def test_loader_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--trace"):
        load_pods(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("name,num_gpu\nx,1\n")
    with pytest.raises(ValueError, match="missing columns"):
        load_pods(bad)


def test_slurm_generator_is_seeded_and_respects_blocks() -> None:
    model = SlurmWorkloadModel()

    def jobs(seed: int) -> list[SimJob]:
        return generate_slurm_jobs(
            random.Random(seed),
            count=300,
            horizon=86400.0,
            model=model,
            gpus_per_node=8,
            nodes_per_block=16,
        )

    first = jobs(5)
    assert first == jobs(5) and first != jobs(6)
    assert len(first) == 300
    assert all(j.members in model.gang_nodes for j in first)
    assert all(j.members <= 16 for j in first if j.single_block)
    assert all(j.duration <= j.estimate <= model.max_time_s for j in first)
    assert all(0 <= j.submit <= 86400.0 for j in first)


def test_workload_starts_in_steady_state_and_keeps_the_budget() -> None:
    scenario = SCENARIOS["small"]()
    workload = build_workload(scenario, load_pods(FIXTURE), SMALL_JOBS, seed=3)
    assert len(workload.jobs) == SMALL_JOBS
    assert any(j.submit < 0 for j in workload.jobs)  # already running when the window opens
    with pytest.raises(ValueError, match="too few"):
        build_workload(scenario, load_pods(FIXTURE), 10, seed=3)


def test_fleet_description_is_validated() -> None:
    assert FleetSpec.from_mapping({"nodes": 36, "nodes_per_block": 18}).blocks == 2
    with pytest.raises(ValueError, match="unknown keys"):
        FleetSpec.from_mapping({"nodes": 36, "racks": 2})
    with pytest.raises(ValueError, match=r"fleet\.nodes"):
        FleetSpec(nodes=0)


# --- behaviour of one run ---------------------------------------------------------------


def test_single_block_gang_waits_for_one_block() -> None:
    # Two blocks of 16; a 12-node gang holds block 0, so a 10-node single-block gang
    # cannot start at t=0 although 20 nodes are free, and starts when the first ends.
    jobs = [gang("big", 0, 12, 1000), gang("next", 1, 10, 100, single=True), gang("fill", 2, 8, 50)]
    out = simulate(
        TWO_BLOCKS, jobs, StaticSplit(0), teams=TEAMS, horizon=5000, seed=1, failures=NO_FAILURES
    )
    assert out.single_block_straddles == 0 and out.extra_block_spans == 0
    assert out.jobs_finished == 3
    assert out.report.time_to_start["64-511"].p50_s == pytest.approx(0.0, abs=1.0)


@pytest.mark.parametrize("policy", [StaticSplit(0), Sharing(), UpperBound()], ids=str)
def test_backfill_never_delays_the_queue_head(policy: StaticSplit | Sharing | UpperBound) -> None:
    # EASY under every policy: 24 of 32 nodes run until t=1000, the head wants all 32,
    # so the 8 idle nodes are the head's at its shadow time; a job running past it
    # (8 nodes of 1 GPU, 2,000 s) waits until the head is done instead of starting on them.
    long_job = replace(gang("long", 2, 8, 2000), gpus_per_member=1)
    jobs = [gang("running", 0, 24, 1000), gang("head", 1, 32, 100), long_job]
    out = simulate(
        TWO_BLOCKS, jobs, policy, teams=TEAMS, horizon=5000, seed=1, failures=NO_FAILURES
    )
    assert sorted(out.report.waits_by_bucket["64-511"]) == pytest.approx([0, 999])
    assert out.report.waits_by_bucket["8-63"] == pytest.approx([1098])


def test_static_split_keeps_pods_on_kubernetes_blocks() -> None:
    # One of two blocks is Kubernetes': 16 nodes for 20 whole-node pods, 4 wait.
    jobs = [pod(f"p{i}", 0, 8, 100) for i in range(20)]
    out = simulate(
        TWO_BLOCKS, jobs, StaticSplit(1), teams=TEAMS, horizon=1000, seed=1, failures=NO_FAILURES
    )
    waits = out.report.waits_by_bucket["8-63"]
    assert sum(1 for w in waits if w > 0) == 4 and max(waits) == pytest.approx(100)
    assert out.lends == 0


def test_sharing_lends_idle_slurm_nodes_after_the_delays() -> None:
    sharing = Sharing(drain_s=60, pod_start_s=30, max_lent_share=1.0)
    jobs = [pod(f"p{i}", 0, 8, 100) for i in range(20)]
    out = simulate(
        TWO_BLOCKS, jobs, sharing, teams=TEAMS, horizon=1000, seed=1, failures=NO_FAILURES
    )
    waits = out.report.waits_by_bucket["8-63"]
    assert out.lends == 20
    assert min(waits) == pytest.approx(90)  # reservation, drain, pod start
    assert out.report.waste.reserved_unused > 0


@pytest.mark.parametrize(
    "sharing",
    [Sharing(max_lent_share=1.0), Sharing(max_lent_share=1.0, lending=None)],
    ids=["policy", "placement"],
)
def test_pods_running_at_the_start_hold_lent_nodes_and_later_lends_pay_the_delays(
    sharing: Sharing,
) -> None:
    # Ten whole-node pods already running when the window opens (submitted at -1 s, as
    # the steady start's are) and one submitted inside it, all on nodes lent from Slurm.
    jobs = [pod(f"resident-{i}", -1.0, 8, 5000) for i in range(10)] + [pod("p", 100, 8, 200)]
    out = simulate(
        TWO_BLOCKS, jobs, sharing, teams=TEAMS, horizon=1000, seed=1, failures=NO_FAILURES
    )
    capacity = TWO_BLOCKS.gpus * 1000.0
    assert out.lends == 11
    # The resident pods hold their GPUs from the window's first second.
    assert out.report.occupancy == pytest.approx((10 * 8 * 1000 + 8 * 200) / capacity)
    # Only the lend made inside the window pays drain and pod start (60 s + 30 s).
    assert out.report.waits_by_bucket["8-63"] == (90.0,)
    assert out.report.waste.reserved_unused == pytest.approx(8 * 90 / capacity)


def test_sharing_waits_for_busy_nodes_when_allowed() -> None:
    sharing = Sharing(drain_s=10, pod_start_s=10, max_lent_share=1.0)
    jobs = [gang("all", 0, 32, 500), pod("p", 1, 8, 100)]
    waiting = simulate(
        TWO_BLOCKS, jobs, sharing, teams=TEAMS, horizon=2000, seed=1, failures=NO_FAILURES
    )
    assert waiting.report.time_to_start["8-63"].p50_s == pytest.approx(519)  # 500 - 1 + 20
    never = replace(sharing, wait_for_idle=False)
    patient = simulate(
        TWO_BLOCKS, jobs, never, teams=TEAMS, horizon=2000, seed=1, failures=NO_FAILURES
    )
    assert patient.report.time_to_start["8-63"].p50_s == pytest.approx(519)
    assert patient.lends == waiting.lends == 1


def test_failures_requeue_jobs_and_count_as_down() -> None:
    often = FailureModel(per_node_day=40.0, repair_s=600.0, restart_penalty_s=60.0)
    jobs = [gang(f"g{i}", i * 10.0, 4, 3000) for i in range(6)] + [
        pod(f"p{i}", i * 5.0, 2, 2000) for i in range(20)
    ]
    out = simulate(TWO_BLOCKS, jobs, Sharing(), teams=TEAMS, horizon=10_000, seed=2, failures=often)
    assert out.preemptions > 0
    assert out.jobs_finished == len(jobs)
    assert out.report.waste.drained_down > 0


def test_upper_bound_ignores_nodes_and_blocks() -> None:
    # 4 pods of 3 GPUs fit in 12 GPUs of one ideal pool but not on one 8-GPU node each pair.
    fleet = FleetSpec(nodes=2, gpus_per_node=8, nodes_per_block=1)
    jobs = [pod(f"p{i}", 0, 3, 100) for i in range(5)]
    out = simulate(fleet, jobs, UpperBound(), teams=TEAMS, horizon=1000, seed=1)
    assert sum(1 for w in out.report.waits_by_bucket["1-7"] if w == 0) == 5


# --- whole comparisons ------------------------------------------------------------------


def _small(seed: int) -> dict[str, object]:
    comparison = compare(SCENARIOS["small"](), jobs=SMALL_JOBS, seed=seed, trace=FIXTURE)
    return {
        o.label: (o.report.as_dict(), o.lends, o.jobs_finished, o.preemptions)
        for o in comparison.outcomes
    }


def test_simulation_is_deterministic_for_a_seed() -> None:
    assert _small(4) == _small(4)
    assert _small(4) != _small(5)


def test_gangs_never_straddle_blocks_over_whole_runs() -> None:
    for seed in (1, 2):
        comparison = compare(SCENARIOS["small"](), jobs=SMALL_JOBS, seed=seed, trace=FIXTURE)
        for outcome in comparison.outcomes:
            assert outcome.single_block_straddles == 0, outcome.label
            assert outcome.extra_block_spans == 0, outcome.label
            assert outcome.jobs_finished == outcome.jobs_total, outcome.label


def test_cli_writes_results_plots_and_report(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    args = ["--scenario", "small", "--seed", "1", "--jobs", str(SMALL_JOBS), "--out", str(out)]
    assert main([*args, "--trace", str(FIXTURE), "--workers", "1"]) == 0
    data = json.loads((out / "results.json").read_text())
    for key in ("static_best", "sharing", "upper_bound"):
        policy = data["policies"][key]
        assert 0.0 <= policy["occupancy"] <= 1.0
        assert "tts_p95_s_64plus" in policy
        assert set(policy["waste"]) == {
            "idle_healthy",
            "drained_down",
            "reserved_unused",
            "fragmentation",
        }
    assert data["invariants"] == {"single_block_straddles": 0, "extra_block_spans": 0}
    assert len(data["drain_sensitivity"]) >= 2
    for name in ("occupancy_over_time", "time_to_start_cdf", "waste_breakdown", "static_sweep"):
        assert (out / f"{name}.png").stat().st_size > 1000
    report = (out / "report.md").read_text()
    assert "Margin of sharing" in report and "drain delay" in report


def test_cli_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jobs", "0", "--out", str(tmp_path)]) == 2
    assert main(["--out", str(tmp_path), "--trace", str(tmp_path / "none")]) == 2
    assert "--trace" in capsys.readouterr().err


# --- the lending policy in the simulator ----------------------------------------------------

FOUR_BLOCKS = FleetSpec(nodes=16, gpus_per_node=8, nodes_per_block=4, blocks_per_leaf=2)


def _lent_blocks(policy: Sharing) -> list[int]:
    """Nodes Kubernetes holds per block after three 3-node gangs and six whole-node pods."""
    from slurmkube_sim.engine import _Run

    jobs = [gang(f"g{i}", 0, 3, 10_000, single=True) for i in range(3)]
    jobs += [pod(f"p{i}", 10.0 + i, 8, 10_000) for i in range(6)]
    run = _Run(
        FOUR_BLOCKS,
        jobs=jobs,
        policy=policy,
        teams=TEAMS,
        horizon=1000,
        seed=1,
        failures=NO_FAILURES,
    )
    run.loop()
    return run.kube_in_block


def test_lent_nodes_gather_in_whole_idle_blocks_before_busy_ones() -> None:
    # The gangs take 3 nodes of three blocks; the fourth is whole and idle. The policy
    # lends all of it first; best fit takes the busy blocks' last nodes first.
    gathered = _lent_blocks(Sharing(max_lent_share=1.0))
    assert gathered[3] == 4 and sum(gathered) == 6
    spread = _lent_blocks(Sharing(max_lent_share=1.0, lending=None))
    assert spread == [1, 1, 1, 3]


def test_learnt_headroom_lends_ahead_of_kubernetes_arrivals() -> None:
    # A 4-GPU pod every 20 s, each running for hours: every other pod needs a new node.
    # Without headroom each waits for a lend (or for the node in flight); with a learnt
    # rate, nodes are lent ahead and some pods start at once.
    jobs = [pod(f"p{i}", 20.0 * i, 4, 10_000.0) for i in range(60)]

    def waited(policy: SharingPolicy) -> int:
        sharing = Sharing(max_lent_share=1.0, lending=policy)
        out = simulate(
            TWO_BLOCKS, jobs, sharing, teams=TEAMS, horizon=3000, seed=1, failures=NO_FAILURES
        )
        assert out.jobs_finished == len(jobs)
        return sum(1 for w in out.report.waits_by_bucket["1-7"] if w > 0)

    assert waited(SharingPolicy()) == 60
    assert waited(SharingPolicy(rate_half_life_s=300.0)) < 50
