"""The live goodput metrics (docs/goodput.md), on the operator's one registry.

Published by `controllers/goodput.py` from a `LiveLedger` per SlurmCluster,
only on the leader. Labels are bounded: the cluster, a GPU state, a
scheduler, a gang-size bucket, a team (Slurm account, namespace or the
allocation policy's team) and the NVLink domain; never a job or a node.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from slurmkube.goodput import Side, TeamShare, size_bucket
from slurmkube.goodput.live import GangStart
from slurmkube.metrics import REGISTRY

CLUSTER = ["namespace", "cluster"]
SCHEDULERS = {Side.SLURM: "slurm", Side.KUBERNETES: "kueue"}

GPU_SECONDS = Counter(
    "slurmkube_goodput_gpu_seconds_total",
    "GPU-seconds since the exporter started, by state: allocated, idle (healthy, nobody"
    " could use it), fragmentation (healthy, free while a gang that could use its side"
    " waits), reserved_in_transfer (lending or return in flight), drained_down.",
    [*CLUSTER, "state"],
    registry=REGISTRY,
)
GPUS = Gauge(
    "slurmkube_goodput_gpus",
    "GPUs by goodput state now (the states of slurmkube_goodput_gpu_seconds_total).",
    [*CLUSTER, "state"],
    registry=REGISTRY,
)
OCCUPANCY = Gauge(
    "slurmkube_goodput_occupancy_ratio",
    "Allocated GPUs over healthy GPUs now (healthy: not down or drained unless allocated).",
    CLUSTER,
    registry=REGISTRY,
)
STRANDED = Gauge(
    "slurmkube_goodput_stranded_gpus",
    "Free GPUs of healthy nodes per NVLink domain that gangs are queued for but none of"
    " them can use now (too few free GPUs on the node, or in the domain for a gang that"
    " must sit in one).",
    [*CLUSTER, "domain"],
    registry=REGISTRY,
)
TIME_TO_START = Histogram(
    "slurmkube_goodput_time_to_start_seconds",
    "From submission (Slurm) or creation (Kueue Workload) to the whole gang first placed,"
    " by scheduler and gang size in GPUs.",
    [*CLUSTER, "scheduler", "gang_size"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400),
    registry=REGISTRY,
)
TEAM_SHARE = Gauge(
    "slurmkube_goodput_team_share_ratio",
    "A team's share of the decayed GPU usage (kind=usage) and of the decayed,"
    " demand-capped entitlement (kind=entitlement).",
    [*CLUSTER, "team", "kind"],
    registry=REGISTRY,
)
FAIR_SHARE = Gauge(
    "slurmkube_goodput_fair_share_ratio",
    "A team's usage share over its entitled share: 1 is exactly fair.",
    [*CLUSTER, "team"],
    registry=REGISTRY,
)
LAST_UPDATE = Gauge(
    "slurmkube_goodput_last_update_timestamp_seconds",
    "When the exporter last brought the cluster's goodput up to date (Unix time).",
    CLUSTER,
    registry=REGISTRY,
)
OBSERVE_ERRORS = Counter(
    "slurmkube_goodput_observe_errors_total",
    "Exporter ticks that could not read Slurm (the figures wait for the next tick) or"
    " whose events the ledger refused (the cluster's counting starts afresh).",
    CLUSTER,
    registry=REGISTRY,
)


def publish(
    key: tuple[str, str],
    *,
    gpu_seconds_added: Mapping[str, float],
    gpus: Mapping[str, int],
    occupancy: float,
    stranded: Mapping[str, int],
    starts: list[GangStart],
    shares: Mapping[str, TeamShare],
    at: float,
) -> None:
    for state, added in gpu_seconds_added.items():
        GPU_SECONDS.labels(*key, state).inc(max(added, 0.0))
    for state, count in gpus.items():
        GPUS.labels(*key, state).set(count)
    OCCUPANCY.labels(*key).set(occupancy)
    _replace(STRANDED, key, {(domain or "none",): float(n) for domain, n in stranded.items()})
    for start in starts:
        labels = (*key, SCHEDULERS[start.side], size_bucket(start.gpus))
        TIME_TO_START.labels(*labels).observe(start.wait_s)
    _replace(
        TEAM_SHARE,
        key,
        {(team, kind): value for team, s in shares.items() for kind, value in _kinds(s)},
    )
    _replace(FAIR_SHARE, key, {(team,): s.ratio for team, s in shares.items()})
    LAST_UPDATE.labels(*key).set(at)


def _kinds(share: TeamShare) -> tuple[tuple[str, float], ...]:
    return (("usage", share.usage_share), ("entitlement", share.entitled_share))


def _replace(gauge: Gauge, key: tuple[str, str], values: Mapping[tuple[str, ...], float]) -> None:
    """Set the cluster's series of `gauge` to `values`, removing the ones gone (a domain
    with no free GPU left, a team no longer seen)."""
    for labels in _series(gauge, key):
        if labels[2:] not in values:
            gauge.remove(*labels)
    for rest, value in values.items():
        gauge.labels(*key, *rest).set(value)


def _series(metric: MetricWrapperBase, key: tuple[str, str]) -> list[tuple[str, ...]]:
    # prometheus_client lists a metric's label sets only in its private `_metrics`.
    return [tuple(labels) for labels in list(metric._metrics) if tuple(labels[:2]) == key]


def forget(key: tuple[str, str]) -> None:
    """The cluster is gone: its series go."""
    every: tuple[MetricWrapperBase, ...] = (
        GPU_SECONDS,
        GPUS,
        OCCUPANCY,
        STRANDED,
        TIME_TO_START,
        TEAM_SHARE,
        FAIR_SHARE,
        LAST_UPDATE,
        OBSERVE_ERRORS,
    )
    for metric in every:
        for labels in _series(metric, key):
            metric.remove(*labels)
