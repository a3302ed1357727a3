"""The Kubernetes side from the Alibaba GPU cluster trace v2023 (openb_pod_list_default.csv).

Weng, Yang et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC'23; data from
github.com/alibaba/clusterdata `cluster-trace-gpu-v2023`. Only this loader and
a small derived fixture live in the repository; the trace is read from where
it is kept (`../shared/traces/alibaba-gpu-v2023/` by default).

Pods are resampled (bootstrap) for shape, run time and QoS; arrival times
follow the trace's own hour-of-day profile. Choices, each a simplification:

- Pods that never ran (no `scheduled_time`) and CPU-only pods are skipped.
- Run time is `deletion_time - scheduled_time`; pods still running when the
  trace ends are censored there (long-lived services keep their GPUs).
- GPU-sharing pods (`gpu_milli` < 1000) take a whole GPU: the simulator
  places whole GPUs, like the device plugin without sharing.
- Teams come from QoS: LS pods are "serving", BE pods "batch", Burstable and
  Guaranteed "platform".
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmkube.goodput import Side
from slurmkube_sim.workload import SimJob, diurnal_times


def _beside_the_checkout() -> Path:
    """`shared/traces/alibaba-gpu-v2023` next to the checkout, or next to a folder
    holding it (a git worktree a level deeper); the first place when none exists."""
    checkout = Path(__file__).resolve().parents[2]
    places = [a / "shared" / "traces" / "alibaba-gpu-v2023" for a in checkout.parents]
    return next((p for p in places if p.is_dir()), places[0])


DEFAULT_TRACE_DIR = _beside_the_checkout()
POD_FILE = "openb_pod_list_default.csv"
TEAM_OF_QOS = {"LS": "serving", "BE": "batch", "Burstable": "platform", "Guaranteed": "platform"}
REQUIRED_COLUMNS = ("name", "num_gpu", "qos", "creation_time", "deletion_time", "scheduled_time")


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    gpus: int
    qos: str
    created: float
    runtime: float

    @property
    def team(self) -> str:
        return TEAM_OF_QOS.get(self.qos, "platform")


def load_pods(path: Path) -> list[TracePod]:
    """Read GPU pods that ran from a pod list CSV (the trace's or a fixture's)."""
    if path.is_dir():
        path = path / POD_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"Alibaba pod list not found at {path}; pass --trace DIR pointing at the "
            f"cluster-trace-gpu-v2023 csv directory"
        )
    pods: list[TracePod] = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(
                f"{path}: missing columns {missing}; expected {list(REQUIRED_COLUMNS)}"
            )
        for line, row in enumerate(reader, start=2):
            try:
                gpus = int(row["num_gpu"])
                if gpus <= 0 or not row["scheduled_time"]:
                    continue
                scheduled = float(row["scheduled_time"])
                runtime = float(row["deletion_time"]) - scheduled
            except ValueError as err:
                raise ValueError(f"{path}:{line}: {err}") from err
            if runtime <= 0:
                continue
            pods.append(
                TracePod(row["name"], gpus, row["qos"], float(row["creation_time"]), runtime)
            )
    if not pods:
        raise ValueError(f"{path}: no GPU pod that ran")
    return pods


def hourly_profile(pods: Sequence[TracePod]) -> list[float]:
    """Arrivals per hour of day in the trace, +1 so no hour has zero rate."""
    counts = [1.0] * 24
    for pod in pods:
        counts[int(pod.created % 86400 // 3600)] += 1.0
    return counts


def means(pods: Sequence[TracePod]) -> tuple[float, float]:
    """(mean GPU-seconds, mean run time) of a resampled pod."""
    return (
        sum(p.gpus * p.runtime for p in pods) / len(pods),
        sum(p.runtime for p in pods) / len(pods),
    )


def kubernetes_jobs(
    rng: random.Random, pods: Sequence[TracePod], count: int, horizon: float, max_gpus: int
) -> list[SimJob]:
    """`count` pods resampled from the trace, arriving over [0, horizon)."""
    times = diurnal_times(rng, count, horizon, hourly_profile(pods))
    return [
        _job(f"pod-{i:06d}", pods[rng.randrange(len(pods))], t, None, max_gpus)
        for i, t in enumerate(times)
    ]


def _job(name: str, pod: TracePod, submit: float, left: float | None, max_gpus: int) -> SimJob:
    return SimJob(
        name=name,
        side=Side.KUBERNETES,
        team=pod.team,
        submit=submit,
        members=1,
        gpus_per_member=min(pod.gpus, max_gpus),
        duration=pod.runtime if left is None else left,
        estimate=pod.runtime,
    )


def resident_pods(
    rng: random.Random, pods: Sequence[TracePod], count: int, at: float, max_gpus: int
) -> list[SimJob]:
    """Pods already running when the window opens (length-biased, residual run time).

    Most of the trace's GPU time is long-lived LS services; without them a
    short window would see a Kubernetes side far lighter than the trace's.
    """
    chosen = rng.choices(pods, weights=[p.runtime for p in pods], k=count)
    return [
        _job(f"pod-resident-{i:05d}", pod, at, max(1.0, pod.runtime * rng.random()), max_gpus)
        for i, pod in enumerate(chosen)
    ]
