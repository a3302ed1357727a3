"""The allocation policy from a real ColdFront: PyPI `coldfront` 1.1.10 on SQLite
with its REST API plugin, served on loopback (slurmkube_e2e.coldfront). Two
projects with Active allocations on the fleet's resource reach the real
slurmdbd (sacctmgr in the slurmctld pod) and Kueue within 30 s; an allocation
attribute changed and a user removed through ColdFront's Django ORM reach both
within 30 s. The measured times are printed (`-s`). `make e2e-coldfront` runs it;
e2e-local deselects it (the install needs the package index).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmkube_e2e import policy
from slurmkube_e2e.accounting import accounted_cluster
from slurmkube_e2e.coldfront import ColdFront, running_coldfront
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.operator_cluster import API
from slurmkube_e2e.policy import associations, gpus_of, kueue_objects, nominal_quota, qos_names
from slurmkube_e2e.waiting import eventually, has_condition, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.coldfront]
REACTION_SECONDS = 30
SOURCE = "coldfront"
RESOURCE = "slurmkube fleet"
PERIOD = {"slurmkube_period_start": "2026-10-01T00:00:00Z", "slurmkube_period_days": 91}


def seed(ns_a: str, ns_b: str) -> dict[str, Any]:
    """Team A: 8 GPUs, a 5000 GPU-hour budget, tier high; team B: 4 GPUs."""
    return {
        "resource": RESOURCE,
        "staff": "slurmkube",
        "projects": [
            {
                "title": "Protein folding at scale",
                "pi": "alice",
                "users": ["alice", "bob"],
                "attributes": {
                    "slurm_account_name": "team-a",
                    "slurmkube_gpus": 8,
                    "Accelerator Usage (Hours)": 5000,
                    "slurmkube_fairshare_weight": 2,
                    "slurmkube_tier": "high",
                    "slurmkube_namespaces": ns_a,
                    **PERIOD,
                },
            },
            {
                "title": "Speech models",
                "pi": "carol",
                "users": ["carol"],
                "attributes": {
                    "slurm_account_name": "team-b",
                    "slurmkube_gpus": 4,
                    "slurmkube_namespaces": ns_b,
                },
            },
        ],
    }


@pytest.fixture(scope="module")
def team_namespaces(kube: Kube) -> Iterator[tuple[str, str]]:
    with policy.team_namespaces(kube, "e2e-cf") as names:
        yield names


@pytest.fixture(scope="module")
def coldfront(
    tmp_path_factory: pytest.TempPathFactory, team_namespaces: tuple[str, str]
) -> Iterator[ColdFront]:
    started = time.monotonic()
    root: Path = tmp_path_factory.mktemp("coldfront")
    with running_coldfront(root, seed(*team_namespaces)) as served:
        print(f"\nColdFront installed, seeded and serving in {time.monotonic() - started:.1f}s")
        yield served


@pytest.fixture(scope="module")
def cluster(kube: Kube, operator: None, database: MariaDB) -> Iterator[str]:
    with accounted_cluster(kube, database, "e2e-cf") as namespace:
        yield namespace


def team_a_and_b_everywhere(
    kube: Kube, cluster: str, ns_a: str, ns_b: str, users: set[tuple[str, str]]
) -> None:
    eventually(
        f"{sorted(users)} and both accounts in slurmdbd",
        lambda: associations(cluster),
        lambda a: users <= a.keys() and {("team-a", ""), ("team-b", "")} <= a.keys(),
        timeout=REACTION_SECONDS,
    )
    policy.wait_for_team_queues(kube, cluster, SOURCE, (ns_a, ns_b), timeout=REACTION_SECONDS)


def team_gpus(kube: Kube, cluster: str, team: str) -> int:
    """Slurm's GrpTRES and Kueue's nominalQuota together: the team's concurrent quota."""
    queue = kueue_objects(kube, cluster, SOURCE)[("ClusterQueue", team, None)]
    return gpus_of(associations(cluster)[(team, "")]) + nominal_quota(queue)


@pytest.fixture(scope="module")
def applied(
    kube: Kube, cluster: str, coldfront: ColdFront, team_namespaces: tuple[str, str]
) -> Iterator[float]:
    """The ColdFront source applied; seconds until both schedulers had its teams."""
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "coldfront-token", "namespace": cluster},
            "stringData": {"token": coldfront.token},
        }
    )
    source = policy.allocation_source(
        cluster,
        SOURCE,
        coldfront={
            "url": coldfront.url,
            "tokenSecretRef": {"name": "coldfront-token", "key": "token"},
            "resourceName": RESOURCE,
            "defaultQuota": {"gpus": 0},
        },
    )
    started = time.monotonic()
    kube.apply(source)
    try:
        users = {("team-a", "alice"), ("team-a", "bob"), ("team-b", "carol")}
        team_a_and_b_everywhere(kube, cluster, *team_namespaces, users)
        took = time.monotonic() - started
        print(f"\nColdFront -> slurmdbd and Kueue: {took:.1f}s")
        yield took
    finally:
        kube.delete(API, "AllocationSource", SOURCE, namespace=cluster)


def test_coldfront_projects_reach_slurm_and_kueue_within_30s(
    kube: Kube, cluster: str, applied: float
) -> None:
    assert applied < REACTION_SECONDS
    assert {"budget-team-a", "tier-high"} <= qos_names(cluster)
    assert team_gpus(kube, cluster, "team-a") == 8
    assert team_gpus(kube, cluster, "team-b") == 4
    source = wait_for(
        kube,
        API,
        "AllocationSource",
        SOURCE,
        lambda o: has_condition(o, "Synced", "True"),
        namespace=cluster,
        timeout=REACTION_SECONDS,
        what="Synced=True",
    )
    team_a = next(t for t in source["status"]["allocations"] if t["name"] == "team-a")
    assert (team_a["gpus"], team_a["gpuHours"], team_a["tier"]) == (8, 5000, "high")


CHANGE = """
from coldfront.core.allocation.models import AllocationAttribute
from coldfront.core.project.models import ProjectUser, ProjectUserStatusChoice
gpus = AllocationAttribute.objects.get(
    allocation__project__title="Speech models", allocation_attribute_type__name="slurmkube_gpus"
)
gpus.value = "6"
gpus.save()
bob = ProjectUser.objects.get(project__title="Protein folding at scale", user__username="bob")
bob.status = ProjectUserStatusChoice.objects.get(name="Removed")
bob.save()
"""


def test_an_allocation_change_and_a_removed_user_in_coldfront_reach_both_within_30s(
    kube: Kube, cluster: str, coldfront: ColdFront, applied: float
) -> None:
    started = time.monotonic()
    coldfront.orm(CHANGE)  # team-b gets 6 GPUs, bob leaves team-a
    eventually(
        "bob's association gone",
        lambda: associations(cluster),
        lambda a: ("team-a", "bob") not in a and ("team-a", "alice") in a,
        timeout=REACTION_SECONDS,
    )
    removed = time.monotonic() - started
    eventually(
        "team-b's 6 GPUs on both",
        lambda: team_gpus(kube, cluster, "team-b"),
        lambda n: n == 6,
        timeout=REACTION_SECONDS,
    )
    changed = time.monotonic() - started
    print(f"\nColdFront change -> removed user {removed:.1f}s, 6 GPUs on both {changed:.1f}s")
    assert changed < REACTION_SECONDS
