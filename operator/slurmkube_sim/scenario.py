"""Scenarios: the workload of both sides on one fleet, and the runs that compare policies.

The reference scenario offers Slurm about 60% and Kubernetes about 25% of the
fleet's GPU-seconds (busy enough that sharing matters, not so overloaded
that every policy only builds queues). The job count fixes the horizon:
`--jobs J` splits J between the sides so that both offered loads hold, using
the mean GPU-seconds of a Slurm gang (from the generator) and of a trace pod.

All policies of one run see the same jobs and the same node failures.
"""

from __future__ import annotations

import multiprocessing
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurmkube.goodput import GoodputReport, Side
from slurmkube_sim.alibaba import (
    DEFAULT_TRACE_DIR,
    TracePod,
    kubernetes_jobs,
    load_pods,
    resident_pods,
)
from slurmkube_sim.alibaba import means as pod_means
from slurmkube_sim.engine import FailureModel, SimOutcome, simulate
from slurmkube_sim.fleet import REFERENCE_FLEET, FleetSpec
from slurmkube_sim.policy import Policy, Sharing, StaticSplit, UpperBound
from slurmkube_sim.workload import (
    SimJob,
    SlurmWorkloadModel,
    generate_slurm_jobs,
    resident_slurm_jobs,
)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    fleet: FleetSpec = REFERENCE_FLEET
    slurm_load: float = 0.60
    kubernetes_load: float = 0.25
    slurm_model: SlurmWorkloadModel = field(default_factory=SlurmWorkloadModel)
    failures: FailureModel = field(default_factory=FailureModel)
    # Agreed shares of the fleet, by team (the entitlement fairness is measured against).
    slurm_share: float = 0.7
    kubernetes_team_shares: tuple[tuple[str, float], ...] = (
        ("serving", 0.5),
        ("batch", 0.4),
        ("platform", 0.1),
    )
    # Kubernetes blocks tried by the static split sweep, as shares of the fleet.
    static_shares: tuple[float, ...] = (0.2, 0.25, 0.3, 0.35)
    # Drain delays (s) for the sensitivity runs of the sharing policy.
    drain_delays_s: tuple[float, ...] = (0.0, 1800.0)
    sharing: Sharing = field(default_factory=Sharing)

    def teams(self) -> dict[str, float]:
        slurm_teams = self.slurm_model.teams
        weights = {t: self.slurm_share / len(slurm_teams) for t in slurm_teams}
        kube_share = 1.0 - self.slurm_share
        weights.update({t: kube_share * w for t, w in self.kubernetes_team_shares})
        return weights

    def policies(self) -> list[Policy]:
        blocks = self.fleet.blocks
        static = sorted({max(1, round(s * blocks)) for s in self.static_shares})
        policies: list[Policy] = [StaticSplit(b) for b in static]
        policies.append(self.sharing)
        policies.extend(replace(self.sharing, drain_s=d) for d in self.drain_delays_s)
        policies.append(UpperBound())
        return policies


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "reference": lambda: Scenario("reference"),
    # The Alibaba trace's pods carry most of the load: Kubernetes offers twice
    # Slurm's GPU-seconds and is entitled to about half the fleet.
    "alibaba": lambda: Scenario(
        "alibaba",
        slurm_load=0.35,
        kubernetes_load=0.50,
        slurm_share=0.45,
        static_shares=(0.45, 0.5, 0.55, 0.6),
    ),
    # Slurm users submit sweeps: bursts of 12 similar gangs on average, 10 s apart,
    # at the reference loads (Helios §3.3 reports submission bursts of this kind).
    "bursty": lambda: Scenario(
        "bursty",
        slurm_model=replace(SlurmWorkloadModel(), burst_mean=12.0, burst_gap_s=10.0),
    ),
    "small": lambda: Scenario(
        "small",
        fleet=FleetSpec(nodes=128, gpus_per_node=8, nodes_per_block=16, blocks_per_leaf=2),
        slurm_model=replace(
            SlurmWorkloadModel(),
            gang_nodes=(1, 2, 4, 8, 16, 32),
            gang_weights=(0.4, 0.2, 0.15, 0.12, 0.08, 0.05),
        ),
        static_shares=(0.25, 0.375),
        drain_delays_s=(600.0,),
    ),
}


@dataclass(frozen=True, slots=True)
class Workload:
    jobs: tuple[SimJob, ...]
    horizon_s: float
    slurm_jobs: int
    kubernetes_jobs: int


def build_workload(scenario: Scenario, pods: Sequence[TracePod], jobs: int, seed: int) -> Workload:
    """`jobs` jobs of both sides at the scenario's offered loads, starting in steady state.

    Arrival rates follow from the offered loads (lambda = L * GPUs / E[GPU-seconds]);
    the jobs already running at the start follow from Little's law
    (N = lambda * E[duration]); the horizon is what the rest of the budget lasts.
    """
    fleet = scenario.fleet
    slurm_gpu_s, slurm_s = scenario.slurm_model.means(fleet.gpus_per_node, fleet.nodes_per_block)
    pod_gpu_s, pod_s = pod_means(pods)
    slurm_rate = scenario.slurm_load * fleet.gpus / slurm_gpu_s
    pod_rate = scenario.kubernetes_load * fleet.gpus / pod_gpu_s
    slurm_resident = round(slurm_rate * slurm_s)
    pod_resident = round(pod_rate * pod_s)
    resident = slurm_resident + pod_resident
    dynamic = jobs - resident
    if dynamic < 2:
        raise ValueError(
            f"--jobs {jobs} is too few for this fleet: {resident} jobs are already running "
            f"in steady state; ask for at least {resident + 2}"
        )
    horizon = dynamic / (slurm_rate + pod_rate)
    n_slurm = max(1, round(slurm_rate * horizon))
    n_kube = dynamic - n_slurm
    rng = random.Random(seed)
    common = {"gpus_per_node": fleet.gpus_per_node, "nodes_per_block": fleet.nodes_per_block}
    slurm = generate_slurm_jobs(
        rng, count=n_slurm, horizon=horizon, model=scenario.slurm_model, **common
    )
    slurm += resident_slurm_jobs(
        rng, count=slurm_resident, model=scenario.slurm_model, at=RESIDENT_AT, **common
    )
    kube = kubernetes_jobs(rng, pods, n_kube, horizon, fleet.gpus_per_node)
    kube += resident_pods(rng, pods, pod_resident, RESIDENT_AT, fleet.gpus_per_node)
    merged = sorted([*slurm, *kube], key=lambda j: (j.submit, j.name))
    return Workload(tuple(merged), horizon, len(slurm), len(kube))


# Jobs running when the window opens are submitted just before it, outside the metrics.
RESIDENT_AT = -1.0


@dataclass(frozen=True, slots=True)
class Comparison:
    scenario: Scenario
    seed: int
    workload: Workload
    outcomes: tuple[SimOutcome, ...]

    def static_split_runs(self) -> list[SimOutcome]:
        return [o for o in self.outcomes if o.label.startswith("static-")]

    def static_best(self) -> SimOutcome:
        """The split an operator would pick: within half a point of the best occupancy,
        the one whose worst gang-size bucket waits least at p95 (neither side starves).
        """
        static = self.static_split_runs()
        top = max(o.report.occupancy for o in static)
        close = [o for o in static if o.report.occupancy >= top - 0.005]
        return min(close, key=lambda o: (worst_p95(o.report), o.label))

    def by_label(self, label: str) -> SimOutcome:
        return next(o for o in self.outcomes if o.label == label)


def _expected_cost(policy: Policy) -> int:
    return 0 if isinstance(policy, Sharing) else 1 if isinstance(policy, UpperBound) else 2


_SHARED: tuple[Scenario, Workload, int] | None = None


def _run_shared(policy: Policy) -> SimOutcome:
    assert _SHARED is not None, "set by compare() before the workers fork"
    scenario, workload, seed = _SHARED
    return _run_one((scenario, workload, policy, seed))


def _run_one(args: tuple[Scenario, Workload, Policy, int]) -> SimOutcome:
    scenario, workload, policy, seed = args
    return simulate(
        scenario.fleet,
        workload.jobs,
        policy,
        teams=scenario.teams(),
        horizon=workload.horizon_s,
        seed=seed,
        failures=scenario.failures,
    )


def compare(
    scenario: Scenario,
    *,
    jobs: int,
    seed: int,
    trace: Path = DEFAULT_TRACE_DIR,
    workers: int = 1,
) -> Comparison:
    """Every policy of `scenario` on the same workload; in `workers` processes if > 1."""
    workload = build_workload(scenario, load_pods(trace), jobs, seed)
    policies = scenario.policies()
    if workers > 1:
        # Forked workers inherit the workload instead of unpickling 100k jobs per run;
        # longest runs first (sharing, then the ideal pool) so the pool finishes together.
        global _SHARED  # noqa: PLW0603 - read by forked workers only
        _SHARED = (scenario, workload, seed)
        order = sorted(range(len(policies)), key=lambda i: _expected_cost(policies[i]))
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            results = pool.map(_run_shared, [policies[i] for i in order])
            done = dict(zip(order, results, strict=True))
        _SHARED = None
        outcomes = tuple(done[i] for i in range(len(policies)))
    else:
        outcomes = tuple(_run_one((scenario, workload, p, seed)) for p in policies)
    return Comparison(scenario, seed, workload, outcomes)


def worst_p95(report: GoodputReport) -> float:
    values = [s.p95_s for s in report.time_to_start.values() if s.count]
    return max(values, default=0.0)


def sides(jobs: Sequence[SimJob]) -> dict[str, int]:
    return {s.value: sum(1 for j in jobs if j.side is s) for s in Side}
