"""Prometheus metrics of the operator, served on `--metrics-port` at /metrics.

One registry for the process; controllers record, nothing here decides. Names
follow Prometheus conventions (`slurmkube_` prefix, base units, `_total` for
counters); labels are bounded (cluster, NodeSet, state), never node names, so a
10,000-node fleet does not make 10,000 series.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, Metric

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_SECONDS = Histogram(
    "slurmkube_reconcile_duration_seconds",
    "Time of one observe -> plan -> apply of a SlurmCluster.",
    ["namespace", "cluster"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
    registry=REGISTRY,
)
RECONCILES = Counter(
    "slurmkube_reconciles_total",
    "Reconciles of a SlurmCluster, by what asked for it (cluster, nodeset, node,"
    " lease, poll, requeue: the resync or a pending config's next look).",
    ["namespace", "cluster", "trigger"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "slurmkube_reconcile_errors_total",
    "Reconciles that raised (retried on the next tick).",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
SLURM_NODES = Gauge(
    "slurmkube_slurm_nodes",
    "Slurm nodes by folded sinfo state (idle, allocated, mixed, drain, down, cloud).",
    ["namespace", "cluster", "node_set", "state"],
    registry=REGISTRY,
)
GPUS = Gauge(
    "slurmkube_gpus",
    "GPUs of registered slurmd nodes: total and allocated by Slurm jobs.",
    ["namespace", "cluster", "node_set", "kind"],
    registry=REGISTRY,
)
SLURMD_PODS_CREATED = Counter(
    "slurmkube_slurmd_pods_created_total",
    "slurmd pods created.",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
SLURMD_PODS_DELETED = Counter(
    "slurmkube_slurmd_pods_deleted_total",
    "slurmd pods deleted after their node drained idle.",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
DRAINS = Counter(
    "slurmkube_drains_total",
    "Drains the operator set before removing a slurmd pod.",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
RECONFIGURES = Counter(
    "slurmkube_reconfigures_total",
    "scontrol reconfigure issued (config hash changed), by result.",
    ["namespace", "cluster", "result"],
    registry=REGISTRY,
)
LEADER = Gauge(
    "slurmkube_leader",
    "1 while this replica holds the operator's Lease (only the leader acts).",
    registry=REGISTRY,
)
SLURM_REACHABLE = Gauge(
    "slurmkube_slurm_reachable",
    "1 when slurmrestd answered the last reconcile.",
    ["namespace", "cluster"],
    registry=REGISTRY,
)

# Kueue bridge (AdmissionCheck slurmkube.io/slurm-reservation), labelled by the check.
BRIDGE_ROUNDS = Counter(
    "slurmkube_bridge_rounds_total",
    "Rounds of the Kueue bridge, by what asked for one (node, workload, admissioncheck,"
    " slurmreservationcheck, pod; requeue: the resync or a round's follow-up).",
    ["trigger"],
    registry=REGISTRY,
)
LENT_NODES = Gauge(
    "slurmkube_lent_nodes",
    "Nodes under a slurmkube.io/lease label (lent to Kueue workloads) per SlurmCluster.",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
LEND_SECONDS = Histogram(
    "slurmkube_lend_duration_seconds",
    "From QuotaReserved to the check Ready (reservation, drain wait, slurmd removal).",
    ["check"],
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600),
    registry=REGISTRY,
)
DRAIN_WAIT_SECONDS = Histogram(
    "slurmkube_lending_drain_wait_seconds",
    "From the Slurm reservation to the check Ready: Slurm jobs ending, slurmd pods leaving.",
    ["check"],
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600, 14400),
    registry=REGISTRY,
)
WAITING_WORKLOADS = Gauge(
    "slurmkube_lending_waiting_workloads",
    "Workloads whose reserved nodes still run Slurm jobs (WaitForIdle or Requeue).",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
JOBS_REQUEUED = Counter(
    "slurmkube_lending_jobs_requeued_total",
    "Slurm jobs requeued to free nodes reserved for a Kueue workload (busyNodes Requeue).",
    ["namespace", "cluster", "check"],
    registry=REGISTRY,
)
LEAKS_COLLECTED = Counter(
    "slurmkube_lending_leaks_collected_total",
    "Lease labels or reservations found without a Workload and removed.",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
CHECK_ANSWERS = Counter(
    "slurmkube_admission_check_answers_total",
    "Admission check states written, by state (Pending, Ready, Retry, Rejected).",
    ["check", "state"],
    registry=REGISTRY,
)
AUTOSCALING_NODES = Gauge(
    "slurmkube_autoscaling_nodes",
    "Nodes of autoscaled NodeSets by power state (up, resuming, suspending, suspended, "
    "held, failed).",
    ["namespace", "cluster", "node_set", "state"],
    registry=REGISTRY,
)
PENDING_GPUS = Gauge(
    "slurmkube_pending_gpus",
    "GPUs requested by pending Slurm jobs, per partition.",
    ["namespace", "cluster", "partition"],
    registry=REGISTRY,
)
RESUME_SECONDS = Histogram(
    "slurmkube_resume_duration_seconds",
    "From the operator first seeing a node POWERING_UP to its slurmd registered.",
    ["namespace", "cluster", "node_set"],
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)
RESUME_FAILURES = Counter(
    "slurmkube_resume_failures_total",
    "Resumes Slurm gave up on (ResumeTimeout reached: node DOWN, jobs requeued).",
    ["namespace", "cluster", "node_set"],
    registry=REGISTRY,
)

POLICY_TEAM_GPUS = Gauge(
    "slurmkube_policy_team_gpus",
    "A team's GPUs by kind: quota, in use on slurm or kueue, headroom, and each gate.",
    ["namespace", "source", "team", "kind"],
    registry=REGISTRY,
)
POLICY_BUDGET_USED = Gauge(
    "slurmkube_policy_budget_used_ratio",
    "A team's GPU-hours this period (Slurm + Kueue) over its entitlement (0 without a budget).",
    ["namespace", "source", "team"],
    registry=REGISTRY,
)
POLICY_SYNCS = Counter(
    "slurmkube_policy_syncs_total",
    "AllocationSource syncs by result (applied, unchanged, source_error, apply_error).",
    ["namespace", "source", "result"],
    registry=REGISTRY,
)
POLICY_DRIFT = Counter(
    "slurmkube_policy_drift_total",
    "Slurm accounting objects found changed by hand and put back.",
    ["namespace", "source"],
    registry=REGISTRY,
)


HEALTH_NODES = Gauge(
    "slurmkube_health_nodes",
    "Nodes node health has out of service, by verdict (sick, held, checking, waiting:"
    " sick but held back by the circuit breaker).",
    ["namespace", "cluster", "verdict"],
    registry=REGISTRY,
)
HEALTHY_GPUS = Gauge(
    "slurmkube_healthy_gpus",
    "GPUs of the cluster's nodes node health finds healthy.",
    ["namespace", "cluster"],
    registry=REGISTRY,
)
HEALTH_CHECKS = Counter(
    "slurmkube_health_checks_total",
    "Active checks that ended, by result (passed, failed: the job failed or timed out).",
    ["namespace", "cluster", "result"],
    registry=REGISTRY,
)
HEALTH_TIME_TO_DRAIN = Histogram(
    "slurmkube_health_time_to_drain_seconds",
    "From node health first seeing a node sick to its drain in Slurm applied.",
    ["namespace", "cluster"],
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800),
    registry=REGISTRY,
)
HEALTH_ACTIONS = Counter(
    "slurmkube_health_actions_total",
    "Node health actions applied (drain, requeue, taint, untaint, reserve, resume,"
    " run-check, release).",
    ["namespace", "cluster", "action"],
    registry=REGISTRY,
)


class CollectorPauses:
    """Time the interpreter's cyclic garbage collector held every thread, per
    generation. A full collection walks every object the operator holds (the Node
    entries, Slurm's node list, the config: millions at 25,000 nodes), so it is a
    pause a label change may wait behind. Summed in the collector's own callback,
    which takes no lock (one taken there could be the one the collecting thread
    holds), and read at scrape time."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.seconds[generation] += time.perf_counter() - self._started
        self.collections[generation] += 1

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        seconds, count = self._families()
        for generation in range(3):
            seconds.add_metric([str(generation)], self.seconds[generation])
            count.add_metric([str(generation)], self.collections[generation])
        yield seconds
        yield count

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(
                "slurmkube_gc_pause_seconds",
                "Seconds the cyclic garbage collector stopped the operator, by generation"
                " (2: a full collection).",
                labels=["generation"],
            ),
            CounterMetricFamily(
                "slurmkube_gc_collections",
                "Collections of the cyclic garbage collector, by generation.",
                labels=["generation"],
            ),
        )


GC_PAUSES = CollectorPauses()
REGISTRY.register(GC_PAUSES)


def serve(port: int) -> None:
    """/metrics on all interfaces of the pod (0: no metrics server)."""
    if GC_PAUSES not in gc.callbacks:
        gc.callbacks.append(GC_PAUSES)
    if port:
        start_http_server(port, registry=REGISTRY)
