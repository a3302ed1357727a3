"""Reading what an AllocationSource applied: Slurm's associations and QOS (sacctmgr
in the slurmctld pod) and its labelled Kueue objects; used by the policy e2e tests."""

from __future__ import annotations

from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.operator_cluster import in_ctld

KUEUE = "kueue.x-k8s.io/v1beta2"


def associations(namespace: str) -> dict[tuple[str, str], str]:
    """(account, user) -> GrpTRES, as `sacctmgr show assoc` prints it in the slurmctld pod."""
    out = in_ctld(namespace, "sacctmgr", "-n", "-P", "show", "assoc", "format=Account,User,GrpTRES")
    rows = [line.split("|") for line in out.splitlines() if line]
    return {(r[0], r[1]): r[2] for r in rows if len(r) == 3}


def qos_names(namespace: str) -> set[str]:
    return set(in_ctld(namespace, "sacctmgr", "-n", "-P", "show", "qos", "format=Name").split())


def kueue_objects(
    kube: Kube, namespace: str, source: str
) -> dict[tuple[str, str, str | None], Manifest]:
    label = f"slurmkube.io/allocation-source={namespace}.{source}"
    found = {}
    for kind in ("Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"):
        for obj in kube.list(KUEUE, kind, label_selector=label):
            found[(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))] = obj
    return found


def nominal_quota(queue: Manifest) -> int:
    flavor = queue["spec"]["resourceGroups"][0]["flavors"][0]
    return int(flavor["resources"][0]["nominalQuota"])


def gpus_of(grp_tres: str) -> int:
    return int(grp_tres.removeprefix("gres/gpu=")) if grp_tres.startswith("gres/gpu=") else -1
