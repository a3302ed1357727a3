"""One concurrent quota over both schedulers (issue 20): team A's 8 GPUs hold for
its Slurm and Kueue work together.

Team A queues 16 GPUs of work on Slurm (four 1-node jobs of 4 GPUs on the real
slurmd pods, accounting in slurmdbd over MariaDB) and 16 on Kueue (four Jobs of
4 GPUs on kwok nodes). Sampled every second, its running GPUs on both together
never exceed 8 (Slurm: its running jobs, read from slurmrestd; Kueue: its
Workloads holding quota), both queues drain, and the policy kills or preempts nothing: every
Slurm job COMPLETED, no Workload evicted. In `make e2e-extended`.
"""

from __future__ import annotations

import itertools
import secrets
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import pytest

from slurmkube_e2e import policy
from slurmkube_e2e.accounting import accounted_cluster, sacct_state
from slurmkube_e2e.builders import make_job
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.operator_cluster import in_ctld
from slurmkube_e2e.policy import KUEUE, slurm_rest
from slurmkube_e2e.waiting import has_condition

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

SOURCE = "capped"
QUOTA = 8
GPUS_PER_JOB = 4
JOBS_PER_SCHEDULER = 4
RUNTIME_SECONDS = 25
REACTION_SECONDS = 30
ACTIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING"})
# A job holds its GPUs while it runs and until its nodes are released.
HOLDING = frozenset({"RUNNING", "COMPLETING"})


@dataclass(frozen=True)
class Teams:
    a: str  # team names (ClusterQueues are cluster-scoped: unique per run)
    b: str
    ns_a: str
    ns_b: str
    flavor: str


@pytest.fixture(scope="module")
def cluster(kube: Kube, operator: None, database: MariaDB) -> Iterator[str]:
    with accounted_cluster(kube, database, "e2e-cap", replicas=2) as namespace:
        yield namespace


@pytest.fixture(scope="module")
def teams(kube: Kube, cluster: str, gpu_nodes: list[Manifest]) -> Iterator[Teams]:
    suffix = secrets.token_hex(2)
    submitter = in_ctld(cluster, "id", "-un").strip()
    with (
        policy.gpu_flavor(kube, gpu_nodes, f"cap-{suffix}") as flavor,
        policy.team_namespaces(kube, f"cap-{suffix}") as (ns_a, ns_b),
    ):
        names = Teams(f"cap-a-{suffix}", f"cap-b-{suffix}", ns_a, ns_b, flavor)
        source = policy.allocation_source(
            cluster,
            SOURCE,
            resourceFlavor=flavor,
            inline={
                "teams": [
                    {
                        "name": names.a,
                        "gpus": QUOTA,
                        "members": {"slurmUsers": [submitter], "namespaces": [ns_a]},
                    },
                    {
                        "name": names.b,
                        "gpus": 4,
                        "members": {"slurmUsers": ["carol"], "namespaces": [ns_b]},
                    },
                ]
            },
        )
        with policy.applied_source(kube, source, names.a, submitter, timeout=REACTION_SECONDS):
            yield names


def kueue_gpus(kube: Kube, namespace: str) -> tuple[int, int]:
    """(GPUs of Workloads holding quota and not finished, Workloads ever evicted)."""
    held = evicted = 0
    for workload in kube.list(KUEUE, "Workload", namespace=namespace):
        if has_condition(workload, "Evicted") or has_condition(workload, "Preempted"):
            evicted += 1
        if has_condition(workload, "QuotaReserved") and not has_condition(workload, "Finished"):
            held += GPUS_PER_JOB
    return held, evicted


def test_the_teams_running_gpus_on_both_schedulers_never_exceed_its_quota(
    kube: Kube, cluster: str, teams: Teams
) -> None:
    started = time.monotonic()
    slurm_jobs = [
        in_ctld(
            cluster, "sbatch", "--parsable", "-A", teams.a, "-N1", f"--gres=gpu:{GPUS_PER_JOB}",
            "-t", "5", "--wrap", f"sleep {RUNTIME_SECONDS}",
        ).strip()
        for _ in range(JOBS_PER_SCHEDULER)
    ]  # fmt: skip
    for i in range(JOBS_PER_SCHEDULER):
        kube.apply(
            make_job(f"work-{i}", teams.a, GPUS_PER_JOB, runtime=f"{RUNTIME_SECONDS}s"),
            namespace=teams.ns_a,
        )

    samples: list[tuple[float, int, int]] = []
    evictions = 0
    deadline = started + 600
    ours = {int(job) for job in slurm_jobs}
    with slurm_rest(kube, cluster) as rest:
        while True:
            # One slurmrestd job list and one Workload list: a sample a second.
            tick = time.monotonic()
            active = {j.job_id: j.state for j in rest.list_jobs(ACTIVE) if j.job_id in ours}
            slurm = GPUS_PER_JOB * sum(bool(state & HOLDING) for state in active.values())
            kueue, evicted = kueue_gpus(kube, teams.ns_a)
            evictions = max(evictions, evicted)
            samples.append((tick - started, slurm, kueue))
            succeeded = [
                j
                for j in kube.list("batch/v1", "Job", namespace=teams.ns_a)
                if (j.get("status") or {}).get("succeeded")
            ]
            if not active and len(succeeded) == JOBS_PER_SCHEDULER:
                break
            assert time.monotonic() < deadline, (active, samples[-5:])
            time.sleep(max(0.0, 1 - (time.monotonic() - tick)))
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(samples)]

    violations = [s for s in samples if s[1] + s[2] > QUOTA]
    peak = max(s[1] + s[2] for s in samples)
    print(
        f"\n{len(samples)} samples over {samples[-1][0]:.0f}s: peak {peak} GPUs "
        f"(Slurm max {max(s[1] for s in samples)}, Kueue max {max(s[2] for s in samples)}), "
        f"violations {len(violations)}, evictions {evictions}; seconds between samples: "
        f"median {statistics.median(gaps):.2f}, max {max(gaps):.2f}"
    )
    assert not violations, violations[:10]
    assert evictions == 0
    for job in slurm_jobs:  # not killed or requeued by the policy
        assert sacct_state(partial(in_ctld, cluster), job) == "COMPLETED", job
    # Both schedulers ran team A's work at the same time at some point.
    assert any(s[1] and s[2] for s in samples), samples
