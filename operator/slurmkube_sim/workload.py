"""Jobs of both sides, and the seeded Slurm-side generator.

The Slurm side is training work: gangs of whole 8-GPU nodes. No public trace
of such a fleet has NVLink-block constraints, so it is generated, seeded, with
shapes that follow the published characterisations of GPU training clusters:

- Sizes: most jobs are small while the few large ones hold most GPU time
  (Hu et al., "Characterization and Prediction of Deep Learning Workloads in
  Large-Scale GPU Datacenters", SC'21 (Helios), §3.2; Jeon et al., "Analysis of
  Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", ATC'19
  (Philly), §3). The node-count weights below are our fit to that shape for a
  multi-node training fleet, not numbers copied from the papers.
- Durations: log-normal, minutes to days, longer for larger gangs (Helios §3.2
  and Philly §3 both report heavy-tailed run times growing with GPU count).
- Arrivals: diurnal, and bursty because users submit sweeps of similar jobs
  close together (Helios §3.3 and Philly §2 report both); bursts are geometric.
- Time limits: users over-estimate run time (Tsafrir, Etsion, Feitelson,
  "Backfilling Using System-Generated Predictions Rather Than User Runtime
  Estimates", IEEE TPDS 18(6), 2007); EASY backfill plans with the estimate.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from slurmkube.goodput import Side

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job as submitted. `members` pods or nodes of `gpus_per_member` GPUs."""

    name: str
    side: Side
    team: str
    submit: float
    members: int
    gpus_per_member: int
    duration: float
    estimate: float
    priority: int = 1
    single_block: bool = False

    @property
    def gpus(self) -> int:
        return self.members * self.gpus_per_member


@dataclass(frozen=True, slots=True)
class SlurmWorkloadModel:
    """The distributions the Slurm-side generator samples (see the module docstring)."""

    # Nodes per gang and their weights.
    gang_nodes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    gang_weights: tuple[float, ...] = (0.40, 0.18, 0.15, 0.12, 0.08, 0.045, 0.02, 0.005)
    median_hours_one_node: float = 0.75
    median_growth_per_doubling: float = 1.25
    duration_sigma: float = 1.4
    max_time_s: float = 72 * HOUR  # partition MaxTime
    overestimate: tuple[float, float] = (1.2, 4.0)
    share_at_max_time: float = 0.3  # requests that just ask for MaxTime
    single_block_share: float = 0.6  # gangs that fit a block and ask for one
    priority_weights: tuple[float, float, float] = (0.2, 0.7, 0.1)  # low, normal, high
    burst_mean: float = 3.0
    burst_gap_s: float = 30.0
    teams: tuple[str, ...] = ("train-a", "train-b", "train-c", "train-d")

    def sample_shape(self, rng: random.Random, nodes_per_block: int) -> tuple[int, float, bool]:
        nodes = rng.choices(self.gang_nodes, weights=self.gang_weights)[0]
        median = self.median_hours_one_node * HOUR
        median *= self.median_growth_per_doubling ** math.log2(nodes)
        duration = min(
            self.max_time_s, max(60.0, rng.lognormvariate(math.log(median), self.duration_sigma))
        )
        single = nodes <= nodes_per_block and rng.random() < self.single_block_share
        return nodes, duration, single

    def estimate(self, rng: random.Random, duration: float) -> float:
        if rng.random() < self.share_at_max_time:
            return self.max_time_s
        low, high = self.overestimate
        asked = duration * rng.uniform(low, high)
        return min(self.max_time_s, math.ceil(asked / 1800.0) * 1800.0)

    def means(self, gpus_per_node: int, nodes_per_block: int) -> tuple[float, float]:
        """(mean GPU-seconds, mean duration) of a gang, from a fixed sample stream."""
        rng = random.Random(0)  # the calibration must not depend on the seed
        samples = 20000
        gpu_seconds = seconds = 0.0
        for _ in range(samples):
            nodes, duration, _ = self.sample_shape(rng, nodes_per_block)
            gpu_seconds += nodes * gpus_per_node * duration
            seconds += duration
        return gpu_seconds / samples, seconds / samples


def diurnal_times(
    rng: random.Random, count: int, horizon: float, hourly: Sequence[float]
) -> list[float]:
    """`count` arrival times on [0, horizon) from a rate proportional to `hourly[hour of day]`.

    A non-homogeneous Poisson process conditioned on its count: each time is
    drawn independently from the rate's normalised density.
    """
    days = max(1, math.ceil(horizon / 86400.0))
    times: list[float] = []
    while len(times) < count:
        day = rng.randrange(days)
        hour = rng.choices(range(24), weights=hourly)[0]
        t = day * 86400.0 + hour * HOUR + rng.random() * HOUR
        if t < horizon:
            times.append(t)
    times.sort()
    return times


# Working-hours profile for interactive research submission (Philly §2, Helios §3.3: peaks in
# the working day, troughs at night).
WORKDAY_PROFILE = (3, 2, 2, 2, 2, 2, 3, 5, 8, 10, 11, 11, 9, 10, 11, 11, 10, 9, 7, 6, 5, 5, 4, 3)


def generate_slurm_jobs(
    rng: random.Random,
    *,
    count: int,
    horizon: float,
    model: SlurmWorkloadModel,
    gpus_per_node: int,
    nodes_per_block: int,
) -> list[SimJob]:
    """`count` Slurm gangs over [0, horizon), in bursts of similar jobs."""
    jobs: list[SimJob] = []
    burst_starts = diurnal_times(
        rng, max(1, round(count / model.burst_mean)), horizon, WORKDAY_PROFILE
    )
    p = 1.0 / model.burst_mean
    i = 0
    while len(jobs) < count:
        start = burst_starts[i % len(burst_starts)]
        i += 1
        nodes, base_duration, single = model.sample_shape(rng, nodes_per_block)
        team = rng.choice(model.teams)
        priority = rng.choices((0, 1, 2), weights=model.priority_weights)[0]
        t = start
        while True:  # geometric burst length
            duration = min(model.max_time_s, base_duration * rng.uniform(0.7, 1.3))
            jobs.append(
                SimJob(
                    name=f"slurm-{len(jobs):06d}",
                    side=Side.SLURM,
                    team=team,
                    submit=min(t, horizon),
                    members=nodes,
                    gpus_per_member=gpus_per_node,
                    duration=duration,
                    estimate=max(duration, model.estimate(rng, duration)),
                    priority=priority,
                    single_block=single,
                )
            )
            if len(jobs) >= count or rng.random() < p:
                break
            t += rng.expovariate(1.0 / model.burst_gap_s)
    jobs.sort(key=lambda j: (j.submit, j.name))
    return jobs


def resident_slurm_jobs(
    rng: random.Random,
    *,
    count: int,
    model: SlurmWorkloadModel,
    gpus_per_node: int,
    nodes_per_block: int,
    at: float,
) -> list[SimJob]:
    """Gangs already running when the window opens: the queue's steady state.

    A job in progress at a random instant is length-biased (picked with
    probability proportional to its duration) and has a uniform share of its
    run left (renewal theory's residual life), so the run starts warm instead
    of with an empty fleet.
    """
    shapes = [model.sample_shape(rng, nodes_per_block) for _ in range(max(1, 20 * count))]
    chosen = rng.choices(shapes, weights=[d for _, d, _ in shapes], k=count)
    jobs = []
    for i, (nodes, duration, single) in enumerate(chosen):
        left = max(60.0, duration * rng.random())
        jobs.append(
            SimJob(
                name=f"slurm-resident-{i:05d}",
                side=Side.SLURM,
                team=rng.choice(model.teams),
                submit=at,
                members=nodes,
                gpus_per_member=gpus_per_node,
                duration=left,
                estimate=max(left, model.estimate(rng, left)),
                priority=2,  # already running: first to be placed at the start
                single_block=single,
            )
        )
    return jobs
