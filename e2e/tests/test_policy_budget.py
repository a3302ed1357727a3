"""A team's GPU-hour budget on both schedulers (issue 20): at 100% its new work
runs at the next lower tier on Slurm and on Kueue, at 120% new work is held on
both with a reason naming the allocation (the ClusterQueue's annotation, the
waiting Slurm job's AdminComment), and what runs finishes.

Team A has 1 GPU-hour this period and 32 GPUs at once. Seven 4-GPU Kueue Jobs
on the kwok fleet burn it (28 GPUs: 100% in about two minutes), leaving 4 GPUs
of headroom for a 1-GPU Slurm job at the lower tier; an 8-GPU Kueue Job never
fits, so it is seen pending at the lower tier and then held. Slurm runs on the
real slurmd pods with accounting in slurmdbd over MariaDB; its tier is the
budget QOS's Priority, Kueue's the WorkloadPriorityClass that the operator's
label on a pending Job gives its Workload. In `make e2e-extended`.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from slurmkube_e2e import policy
from slurmkube_e2e.accounting import accounted_cluster, sacct_state
from slurmkube_e2e.builders import make_job
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.operator_cluster import API, in_ctld
from slurmkube_e2e.policy import KUEUE, associations
from slurmkube_e2e.waiting import eventually, has_condition

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

SOURCE = "budgeted"
QUOTA = 32
BURNERS = 7  # Kueue Jobs of 4 GPUs: 28 of the 32
BURN_SECONDS = 240
GPU_HOURS = 1
REACTION_SECONDS = 30
# The default tiers: the team's "normal" and the one below it.
TIER, LOWER, LOWER_VALUE = "normal", "low", 10
BUDGET = "slurmkube.io/budget"  # the ClusterQueue's annotation naming the allocation


@dataclass(frozen=True)
class Team:
    name: str
    namespace: str


@pytest.fixture(scope="module")
def cluster(kube: Kube, operator: None, database: MariaDB) -> Iterator[str]:
    with accounted_cluster(kube, database, "e2e-budget", replicas=2) as namespace:
        yield namespace


@pytest.fixture(scope="module")
def team(kube: Kube, cluster: str, gpu_nodes: list[Manifest]) -> Iterator[Team]:
    suffix = secrets.token_hex(2)
    submitter = in_ctld(cluster, "id", "-un").strip()
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT00:00:00Z")
    with (
        policy.gpu_flavor(kube, gpu_nodes, f"budget-{suffix}") as flavor,
        policy.team_namespaces(kube, f"budget-{suffix}") as (ns_a, _),
    ):
        found = Team(f"budget-a-{suffix}", ns_a)
        source = policy.allocation_source(
            cluster,
            SOURCE,
            resourceFlavor=flavor,
            inline={
                "teams": [
                    {
                        "name": found.name,
                        "gpus": QUOTA,
                        "gpuHours": GPU_HOURS,
                        "period": {"start": today, "lengthDays": 30},
                        "tier": TIER,
                        "members": {"slurmUsers": [submitter], "namespaces": [ns_a]},
                    }
                ]
            },
        )
        with policy.applied_source(kube, source, found.name, submitter, timeout=REACTION_SECONDS):
            yield found


def allocation(kube: Kube, cluster: str, team: str) -> dict[str, Any]:
    source = kube.get(API, "AllocationSource", SOURCE, namespace=cluster) or {}
    rows = (source.get("status") or {}).get("allocations") or []
    return next((row for row in rows if row.get("name") == team), {})


def budget_qos_priority(cluster: str, team: str) -> int:
    out = in_ctld(
        cluster, "sacctmgr", "-n", "-P", "show", "qos", f"budget-{team}", "format=Priority"
    )
    return int(out.strip() or -1)


def workload_of(kube: Kube, namespace: str, job: str) -> Manifest | None:
    for workload in kube.list(KUEUE, "Workload", namespace=namespace):
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            return workload
    return None


def sbatch(cluster: str, team: str, *argv: str) -> str:
    return in_ctld(
        cluster, "sbatch", "--parsable", "-A", team, "-N1", "--gres=gpu:1", *argv
    ).strip()


def test_at_100_percent_new_work_runs_a_tier_lower_and_at_120_it_is_held_on_both(
    kube: Kube, cluster: str, team: Team
) -> None:
    started = time.monotonic()
    assert budget_qos_priority(cluster, team.name) == 100
    for i in range(BURNERS):
        kube.apply(
            make_job(f"burn-{i}", team.name, 4, runtime=f"{BURN_SECONDS}s"),
            namespace=team.namespace,
        )

    # 100%: the lower tier on both.
    eventually(
        "the budget used up (LOWER_TIER)",
        lambda: allocation(kube, cluster, team.name),
        lambda row: row.get("budgetLevel") in {"LOWER_TIER", "HOLD"},
        timeout=BURN_SECONDS,
    )
    at_100 = time.monotonic() - started
    eventually(
        f"budget-{team.name} at the lower tier's Priority",
        lambda: budget_qos_priority(cluster, team.name),
        lambda p: p == LOWER_VALUE,
        timeout=REACTION_SECONDS,
    )
    lower_job = sbatch(cluster, team.name, "-t", "1", "--wrap", "sleep 5")
    shown = in_ctld(cluster, "scontrol", "-o", "show", "job", lower_job)
    assert f"QOS=budget-{team.name}" in shown, shown
    kube.apply(make_job("late", team.name, 8, runtime="5s"), namespace=team.namespace)
    late = eventually(
        "the late Job's Workload at the lower tier",
        lambda: workload_of(kube, team.namespace, "late"),
        lambda w: (
            w is not None
            and (w["spec"].get("priorityClassRef") or {}).get("name") == LOWER
            and w["spec"].get("priority") == LOWER_VALUE
        ),
        timeout=REACTION_SECONDS,
    )
    assert late is not None
    job = kube.get("batch/v1", "Job", "late", namespace=team.namespace) or {}
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == LOWER

    # 120%: held on both, with a reason naming the allocation.
    held = eventually(
        "120% of the budget (HOLD)",
        lambda: allocation(kube, cluster, team.name),
        lambda row: row.get("budgetLevel") == "HOLD",
        timeout=BURN_SECONDS,
    )
    at_120 = time.monotonic() - started
    assert f"allocation {team.name}" in held["reason"] and "held" in held["reason"], held
    queue = eventually(
        f"ClusterQueue {team.name} held, naming the allocation",
        lambda: kube.get(KUEUE, "ClusterQueue", team.name),
        lambda q: (
            q is not None
            and q["spec"].get("stopPolicy") == "Hold"
            and "held" in q["metadata"].get("annotations", {}).get(BUDGET, "")
        ),
        timeout=REACTION_SECONDS,
    )
    assert queue is not None
    assert f"allocation {team.name}" in queue["metadata"]["annotations"][BUDGET]
    assert sacct_state(partial(in_ctld, cluster), lower_job) == "COMPLETED"
    eventually(
        f"{team.name}'s GrpTRES at what runs on Slurm (nothing)",
        lambda: associations(cluster).get((team.name, ""), ""),
        lambda tres: tres == "gres/gpu=0",
        timeout=REACTION_SECONDS,
    )
    held_job = sbatch(cluster, team.name, "-t", "1", "--wrap", "sleep 5")
    # Slurm's own reason names no allocation: the job's AdminComment does.
    shown = eventually(
        f"job {held_job}'s AdminComment naming the allocation",
        lambda: in_ctld(cluster, "scontrol", "show", "job", held_job),
        lambda text: f"AdminComment=slurmkube: allocation {team.name}" in text,
        timeout=REACTION_SECONDS,
    )
    assert "new work is held" in shown, shown

    # Running work finishes; the held work does not start.
    def burners_done() -> list[Manifest]:
        return [
            j
            for j in kube.list("batch/v1", "Job", namespace=team.namespace)
            if j["metadata"]["name"].startswith("burn-")
            and (j.get("status") or {}).get("succeeded")
        ]

    eventually("every burner Job succeeded", burners_done, lambda d: len(d) == BURNERS, timeout=300)
    for workload in kube.list(KUEUE, "Workload", namespace=team.namespace):
        assert not has_condition(workload, "Evicted"), workload["metadata"]["name"]
    time.sleep(REACTION_SECONDS / 2)
    late = workload_of(kube, team.namespace, "late")
    assert late is not None and not has_condition(late, "QuotaReserved"), late
    state = in_ctld(cluster, "squeue", "-h", "-j", held_job, "-o", "%T %r").split()
    assert state[0] == "PENDING" and state[1].startswith("Assoc"), state
    in_ctld(cluster, "scancel", held_job)
    print(
        f"\nbudget {GPU_HOURS} GPU-h at {QUOTA} GPUs: 100% seen after {at_100:.0f}s, "
        f"120% after {at_120:.0f}s; held Slurm job {held_job}: {' '.join(state)}; "
        f"reason: {held['reason']}"
    )
