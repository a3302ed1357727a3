"""The allocation policy live: an inline AllocationSource reaches the real slurmdbd
(MariaDB behind it, read with sacctmgr inside the slurmctld pod) and the real
Kueue within 30 s; a change and a removed user too; a hand edit is put back;
a source that cannot be read changes nothing; teams' directory groups come from
a real slapd and follow it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ldap3 import MODIFY_DELETE

from slurmkube_e2e import ldap, policy
from slurmkube_e2e.accounting import accounted_cluster
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.ldap import LdapUser, group_dn, running_slapd, user_dn
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.operator_cluster import API, in_ctld
from slurmkube_e2e.policy import KUEUE, associations, gpus_of, nominal_quota, qos_names
from slurmkube_e2e.waiting import condition, eventually, has_condition, wait_for

pytestmark = pytest.mark.e2e
REACTION_SECONDS = 30
SOURCE = "fleet"


@pytest.fixture(scope="module")
def team_namespaces(kube: Kube) -> Iterator[tuple[str, str]]:
    with policy.team_namespaces(kube, "e2e-team") as names:
        yield names


@pytest.fixture(scope="module")
def cluster(kube: Kube, operator: None, database: MariaDB) -> Iterator[str]:
    with accounted_cluster(kube, database, "e2e-policy") as namespace:
        yield namespace


def team(name: str, gpus: int, users: list[str], namespace: str, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "gpus": gpus,
        "members": {"slurmUsers": users, "namespaces": [namespace]},
        **more,
    }


def allocation_source(namespace: str, teams: list[dict[str, Any]], **spec: Any) -> Manifest:
    return policy.allocation_source(namespace, SOURCE, inline={"teams": teams}, **spec)


def initial_teams(ns_a: str, ns_b: str) -> list[dict[str, Any]]:
    budget = {"gpuHours": 5000, "period": {"start": "2026-10-01T00:00:00Z", "lengthDays": 91}}
    return [
        team("team-a", 8, ["alice", "bob"], ns_a, tier="high", fairShareWeight=2, **budget),
        team("team-b", 4, ["carol"], ns_b),
    ]


def kueue_objects(kube: Kube, cluster: str) -> dict[tuple[str, str, str | None], Manifest]:
    return policy.kueue_objects(kube, cluster, SOURCE)


def source_with(kube: Kube, cluster: str, type_: str, status: str) -> Manifest:
    return wait_for(
        kube,
        API,
        "AllocationSource",
        SOURCE,
        lambda o: has_condition(o, type_, status),
        namespace=cluster,
        timeout=REACTION_SECONDS,
        what=f"{type_}={status}",
    )


@pytest.fixture(scope="module")
def applied(kube: Kube, cluster: str, team_namespaces: tuple[str, str]) -> Iterator[float]:
    """The source applied on the running cluster; how long until both schedulers had it."""
    started = time.monotonic()
    kube.apply(allocation_source(cluster, initial_teams(*team_namespaces)))
    try:
        eventually(
            "team-a, team-b and their users in slurmdbd",
            lambda: associations(cluster),
            lambda a: (
                {("team-a", "alice"), ("team-a", "bob"), ("team-b", "carol")} <= a.keys()
                and ("team-a", "") in a
            ),
            timeout=REACTION_SECONDS,
        )
        policy.wait_for_team_queues(
            kube, cluster, SOURCE, team_namespaces, timeout=REACTION_SECONDS
        )
        yield time.monotonic() - started
    finally:
        kube.delete(API, "AllocationSource", SOURCE, namespace=cluster)


def test_an_inline_source_reaches_slurm_and_kueue_within_30s(
    kube: Kube, cluster: str, applied: float
) -> None:
    assert applied < REACTION_SECONDS
    assert {"budget-team-a", "tier-high", "tier-normal", "tier-low"} <= qos_names(cluster)
    # The concurrent quota holds for the sum: Slurm's GrpTRES and Kueue's nominalQuota
    # split the 8 GPUs of team-a between them.
    queues = kueue_objects(kube, cluster)
    slurm_a = gpus_of(associations(cluster)[("team-a", "")])
    assert slurm_a + nominal_quota(queues[("ClusterQueue", "team-a", None)]) == 8
    source = source_with(kube, cluster, "Synced", "True")
    status = source["status"]
    assert has_condition(source, "SourceReachable")
    team_a = next(t for t in status["allocations"] if t["name"] == "team-a")
    assert team_a["gpus"] == 8 and team_a["headroom"] == 8 and team_a["gpuHours"] == 5000
    # `slurmkube policy status` reads the same status from the live object.
    printed = subprocess.run(
        [sys.executable, "-m", "slurmkube.cli", "policy", "status", SOURCE, "-n", cluster],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "Synced=True" in printed
    assert any(line.split()[:2] == ["team-a", "8"] for line in printed.splitlines())


def test_kueue_keeps_admission_fair_sharing_usage_for_the_teams_queues(
    kube: Kube, cluster: str, team_namespaces: tuple[str, str], applied: float
) -> None:
    """The test bed's Kueue runs with the policy's admissionFairSharing (unset,
    the ClusterQueues' usage-based admission would silently do nothing). Kueue
    keeps a LocalQueue's usage once its ClusterQueue is active: its flavor exists."""
    flavor = {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}}
    kube.apply(flavor)

    def with_usage_status(namespace: str, name: str) -> bool:
        queue = kube.get(KUEUE, "LocalQueue", name, namespace) or {}
        fair = (queue.get("status") or {}).get("fairSharing") or {}
        return "admissionFairSharingStatus" in fair

    try:
        eventually(
            "both teams' LocalQueues with an admission fair sharing status",
            lambda: [
                with_usage_status(team_namespaces[0], "team-a"),
                with_usage_status(team_namespaces[1], "team-b"),
            ],
            all,
            timeout=REACTION_SECONDS,
        )
    finally:
        kube.delete(KUEUE, "ResourceFlavor", "default-flavor")


def test_slurmctld_runs_with_the_policys_keys(kube: Kube, cluster: str, applied: float) -> None:
    """Merged into the cluster's rendered slurm.conf and in force after the reconfigure."""
    config_map = kube.get("v1", "ConfigMap", "local-slurm-config", namespace=cluster)
    assert config_map is not None
    assert "\nPreemptType=preempt/qos\n" in config_map["data"]["slurm.conf"]
    eventually(
        "slurmctld enforcing associations, limits, qos, safe",
        lambda: in_ctld(cluster, "scontrol", "show", "config"),
        lambda out: (
            bool(re.search(r"AccountingStorageEnforce\s*=\s*associations,limits,qos,safe", out))
            and bool(re.search(r"PreemptType\s*=\s*preempt/qos", out))
        ),
        timeout=120,
    )


def test_an_allocation_change_and_a_removed_user_reach_both_within_30s(
    kube: Kube, cluster: str, team_namespaces: tuple[str, str], applied: float
) -> None:
    ns_a, ns_b = team_namespaces
    teams = initial_teams(ns_a, ns_b)
    teams[0]["members"]["slurmUsers"] = ["alice"]  # bob leaves team-a
    teams[1]["gpus"] = 6  # team-b gets 6 GPUs
    started = time.monotonic()
    kube.apply(allocation_source(cluster, teams))
    eventually(
        "bob's association gone",
        lambda: associations(cluster),
        lambda a: ("team-a", "bob") not in a and ("team-a", "alice") in a,
        timeout=REACTION_SECONDS,
    )

    def team_b_gpus() -> int:
        queue = kueue_objects(kube, cluster)[("ClusterQueue", "team-b", None)]
        return gpus_of(associations(cluster)[("team-b", "")]) + nominal_quota(queue)

    eventually("team-b's 6 GPUs on both", team_b_gpus, lambda n: n == 6, timeout=REACTION_SECONDS)
    assert time.monotonic() - started < REACTION_SECONDS


def test_a_hand_edit_in_slurmdbd_is_put_back(kube: Kube, cluster: str, applied: float) -> None:
    before = associations(cluster)[("team-a", "")]
    in_ctld(
        cluster,
        "sacctmgr", "-i", "modify", "account", "where", "name=team-a", "set", "GrpTRES=gres/gpu=64",
    )  # fmt: skip
    eventually(
        "team-a's GrpTRES put back",
        lambda: associations(cluster)[("team-a", "")],
        lambda now: now == before,
        timeout=REACTION_SECONDS,
    )
    # The sync may revert the edit before this test reads it, and write its Event a
    # moment after the revert: wait for the Event, do not sample it once.
    eventually(
        "a DriftReverted Event",
        lambda: kube.list("v1", "Event", namespace=cluster),
        lambda events: any(e.get("reason") == "DriftReverted" for e in events),
        timeout=REACTION_SECONDS,
    )


def test_a_source_that_cannot_be_read_changes_nothing(
    kube: Kube, cluster: str, applied: float
) -> None:
    before_slurm = associations(cluster)
    before_kueue = set(kueue_objects(kube, cluster))
    broken = allocation_source(cluster, [])
    del broken["spec"]["inline"]
    broken["spec"]["http"] = {"url": "http://127.0.0.1:9/teams.json", "pollSeconds": 5}
    kube.apply(broken)
    source = source_with(kube, cluster, "SourceReachable", "False")
    message = (condition(source, "SourceReachable") or {}).get("message", "")
    assert "spec.http.url" in message
    time.sleep(12)  # a sync after the failure: still nothing removed
    assert {k for k in associations(cluster) if k[0].startswith("team-")} == {
        k for k in before_slurm if k[0].startswith("team-")
    }
    assert set(kueue_objects(kube, cluster)) == before_kueue


LAB = (LdapUser("frank", 20001, 20001, "pw-f"), LdapUser("grace", 20002, 20002, "pw-g"),
       LdapUser("heidi", 20003, 20003, "pw-h"))  # fmt: skip


def test_directory_groups_become_slurm_users_and_follow_the_directory(
    kube: Kube,
    cluster: str,
    team_namespaces: tuple[str, str],
    applied: float,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """members.groups read from slapd (RFC 2307 and 2307bis, one nested); a member
    removed in the directory leaves Slurm; a directory that stops answering changes
    nothing."""
    groups: dict[str, tuple[int, tuple[str, ...]]] = {"ml-lab": (30001, ("frank", "grace"))}
    named: dict[str, tuple[str, ...]] = {"vision": (user_dn("heidi"), group_dn("ml-lab"))}
    root = Path(tmp_path_factory.mktemp("slapd"))
    with running_slapd(root, LAB, groups, named_groups=named) as served:
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "directory", "namespace": cluster},
                "stringData": {"ca.crt": served.ca_pem, "password": served.bind_password},
            }
        )
        teams = initial_teams(*team_namespaces)
        teams[0]["members"]["groups"] = ["ml-lab"]
        teams[1]["members"]["groups"] = ["vision"]
        directory = {
            "uri": served.uri,
            "baseDN": served.base_dn,
            "bindDN": served.bind_dn,
            "bindPasswordSecretRef": {"name": "directory", "key": "password"},
            "caSecretRef": {"name": "directory", "key": "ca.crt"},
            "pollSeconds": 5,
        }
        kube.apply(allocation_source(cluster, teams, directory=directory))
        from_groups = {("team-a", "frank"), ("team-a", "grace"), ("team-b", "heidi"),
                       ("team-b", "frank"), ("team-b", "grace")}  # fmt: skip
        eventually(
            "the groups' members as associations",
            lambda: associations(cluster),
            lambda a: from_groups <= a.keys() and ("team-a", "alice") in a,
            timeout=REACTION_SECONDS,
        )
        with ldap.admin(served) as edit:
            assert edit.modify(group_dn("ml-lab"), {"memberUid": [(MODIFY_DELETE, ["grace"])]})
        started = time.monotonic()
        eventually(
            "grace's associations gone from both teams",
            lambda: associations(cluster),
            lambda a: (
                not {("team-a", "grace"), ("team-b", "grace")} & a.keys()
                and ("team-a", "frank") in a
            ),
            timeout=REACTION_SECONDS,
        )
        assert time.monotonic() - started < REACTION_SECONDS
        before = {k for k in associations(cluster) if k[0].startswith("team-")}
    # slapd stopped: the sync reports it and keeps what is applied.
    source = source_with(kube, cluster, "SourceReachable", "False")
    message = (condition(source, "SourceReachable") or {}).get("message", "")
    assert "spec.directory.uri" in message
    time.sleep(12)
    assert {k for k in associations(cluster) if k[0].startswith("team-")} == before
