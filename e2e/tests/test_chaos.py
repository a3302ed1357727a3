"""The fault-injection suite (docs/chaos.md). A seeded job mix runs on a real
SlurmCluster while faults are injected one after another; after each the jobs
Slurm lost, leaks, duplicate slurmd pods and the time until the cluster is
Ready again go into a JSON report, and any loss or leak fails the run.

`make test` runs the subset (a busy node relabelled, on the session's
operator, slurmctld's own records; a busy node drained beside it under `make
e2e-extended`); `make chaos` runs every fault
(marker `chaos`) with accounting (sacct over MariaDB), the chart's busy slurmd
pod guard, two operators on one Lease, sampled for two leaders at once, and a
Kueue workload holding a lent node from before the first fault to the end.
SLURMKUBE_CHAOS_SEED picks the seed, SLURMKUBE_CHAOS_FAULTS=a,b a part of the
full set, SLURMKUBE_CHAOS_REPORT the report's path.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from slurmkube_e2e.accounting import accounted_cluster
from slurmkube_e2e.busy_guard import busy_guard
from slurmkube_e2e.chaos.faults import Chaos
from slurmkube_e2e.chaos.holder import LentHolder
from slurmkube_e2e.chaos.jobs import JobBook
from slurmkube_e2e.chaos.report import ChaosReport, markdown_table
from slurmkube_e2e.chaos.runner import (
    SUBSET,
    SUBSET_EXTENDED,
    chosen_faults,
    report_path,
    run_chaos,
)
from slurmkube_e2e.cluster import LocalCluster
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import ON_REAL_NODES, docs, free_the_nodes, ready_cluster
from slurmkube_e2e.replicas import Replica, the_leader

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NODES = 4
# The full run lends a node that runs no slurmd pod: the runtime has 8 nodes,
# four real nodes leave one only with three replicas.
FULL_RUN_NODES = NODES - 1 if ON_REAL_NODES else NODES


def seed() -> int:
    return int(os.environ.get("SLURMKUBE_CHAOS_SEED", "20261204"))


def verdict(report: ChaosReport, out: Path) -> None:
    print(f"\n{report.to_json()}\n{markdown_table(report)}\nreport: {out}")
    assert report.passed, f"{markdown_table(report)}\nsee {out}"


# Job lengths and the time the busy node's job has left when the fault strikes:
# the relabelled node is drained within seconds (2 s here), so 25 s left leaves
# room on a loaded machine and the job its whole run to show the pod kept; the
# drained one's fault takes each fault's own 50 s (evictions for 12 s).
@pytest.mark.parametrize(
    ("faults", "seconds", "busy_left"),
    [
        pytest.param(SUBSET, (32, 38), 25, id="relabelled"),
        pytest.param(SUBSET_EXTENDED, (50, 62), None, id="drained", marks=pytest.mark.extended),
    ],
)
def test_a_busy_node_refuses_eviction_and_is_held_when_relabelled(
    kube: Kube,
    operator: OperatorProcess,
    namespace: str,
    *,
    faults: tuple[str, ...],
    seconds: tuple[int, int],
    busy_left: int | None,
) -> None:
    for doc in docs(namespace, replicas=NODES):
        kube.apply(doc)
    ready_cluster(kube, namespace, timeout=240)
    rng = random.Random(seed())
    jobs = JobBook(
        namespace, rng, max_nodes=2, accounted=False, seconds=seconds, pending=1, outstanding=3
    )
    ctx = Chaos(kube, namespace, rng, jobs, NODES, [operator], api_server=None, busy_left=busy_left)
    out = report_path(ROOT, f"chaos-subset-{'-'.join(faults)}.json")
    report = run_chaos(ctx, faults, seed(), out)
    free_the_nodes(kube, namespace)
    verdict(report, out)


@pytest.mark.chaos
def test_no_fault_loses_a_job_or_leaks(
    kube: Kube, kubeconfig: Path, database: MariaDB, replicas: list[Replica]
) -> None:
    the_leader(replicas)
    layout = Layout.from_env()
    local = kubeconfig.resolve() == layout.kubeconfig.resolve()
    with (
        accounted_cluster(
            kube, database, "e2e-chaos", replicas=FULL_RUN_NODES, persistence=True
        ) as namespace,
        busy_guard(kube, namespace),  # the chart's default
    ):
        holder = LentHolder(kube, namespace)
        holder.admit()
        rng = random.Random(seed())
        jobs = JobBook(namespace, rng, max_nodes=3, accounted=True, outstanding=6)
        ctx = Chaos(
            kube,
            namespace,
            rng,
            jobs,
            FULL_RUN_NODES,
            [r.process for r in replicas],
            api_server=LocalCluster(layout) if local else None,
            holder=holder,
        )
        out = report_path(ROOT)
        try:
            report = run_chaos(ctx, chosen_faults(), seed(), out, pair=replicas)
        finally:
            holder.remove_queue()
    verdict(report, out)
