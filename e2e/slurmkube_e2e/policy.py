"""An AllocationSource for the sample cluster, and reading what it applied: Slurm's
associations and QOS (sacctmgr in the slurmctld pod) and its labelled Kueue
objects; used by the policy e2e tests."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.build.names import ClusterNames
from slurmkube.slurm.rest import RestClient
from slurmkube_e2e import fleet
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.operator_cluster import API, in_ctld
from slurmkube_e2e.waiting import eventually, has_condition

KUEUE = "kueue.x-k8s.io/v1beta2"


def allocation_source(namespace: str, name: str, **spec: Any) -> Manifest:
    """AllocationSource `name` for the cluster `local` of `namespace`, in a Cohort of
    that namespace's own; `spec` names the source (inline, http, coldfront) and more."""
    return {
        "apiVersion": API,
        "kind": "AllocationSource",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterRef": "local", "cohort": f"fleet-{namespace}", **spec},
    }


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


@contextmanager
def team_namespaces(kube: Kube, prefix: str) -> Iterator[tuple[str, str]]:
    """Two fresh namespaces for team A and team B, deleted afterwards."""
    suffix = secrets.token_hex(2)
    names = (f"{prefix}-a-{suffix}", f"{prefix}-b-{suffix}")
    for name in names:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield names
    finally:
        for name in names:
            kube.delete("v1", "Namespace", name)


def wait_for_team_queues(
    kube: Kube, namespace: str, source: str, teams: tuple[str, str], *, timeout: float
) -> None:
    """The fleet's Cohort and team-a's and team-b's ClusterQueues and LocalQueues
    (in the `teams` namespaces)."""
    ns_a, ns_b = teams
    want = {
        ("Cohort", f"fleet-{namespace}", None),
        ("ClusterQueue", "team-a", None),
        ("ClusterQueue", "team-b", None),
        ("LocalQueue", "team-a", ns_a),
        ("LocalQueue", "team-b", ns_b),
    }
    eventually(
        "the Cohort, ClusterQueues and LocalQueues",
        lambda: set(kueue_objects(kube, namespace, source)),
        lambda have: want <= have,
        timeout=timeout,
    )


@contextmanager
def gpu_flavor(kube: Kube, gpu_nodes: list[Manifest], name: str) -> Iterator[str]:
    """ResourceFlavor `name` on the kwok GPU nodes' product, deleted afterwards."""
    product = gpu_nodes[0]["metadata"]["labels"][fleet.PRODUCT_LABEL]
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": {fleet.PRODUCT_LABEL: product}},
        }
    )
    try:
        yield name
    finally:
        kube.delete(KUEUE, "ResourceFlavor", name)


@contextmanager
def applied_source(
    kube: Kube, source: Manifest, team: str, user: str, *, timeout: float
) -> Iterator[None]:
    """`source` applied until `team`'s association with `user` (its GrpTRES set)
    and its ClusterQueue are there; the source deleted afterwards."""
    namespace = source["metadata"]["namespace"]
    kube.apply(source)
    try:
        eventually(
            f"{team}'s association with {user}",
            lambda: associations(namespace),
            lambda a: (team, user) in a and gpus_of(a.get((team, ""), "")) >= 0,
            timeout=timeout,
        )
        eventually(
            f"ClusterQueue {team}",
            lambda: kube.get(KUEUE, "ClusterQueue", team),
            lambda q: q is not None and has_condition(q, "Active"),
            timeout=timeout,
        )
        yield
    finally:
        kube.delete(API, "AllocationSource", source["metadata"]["name"], namespace=namespace)


def slurm_rest(kube: Kube, namespace: str) -> RestClient:
    """The cluster's slurmrestd, dialled at its pod's IP (the host is outside the
    pod network's DNS, as for the host-run operator), with a root token, over TLS
    verified against the cluster's CA for the Service's name."""
    (pod,) = kube.list(
        "v1", "Pod", namespace=namespace, label_selector="app.kubernetes.io/name=slurmrestd"
    )
    names = ClusterNames("local", namespace)
    secret = kube.get("v1", "Secret", names.auth, namespace=namespace)
    tls = kube.get("v1", "Secret", names.restapi_tls, namespace=namespace)
    assert secret is not None and tls is not None
    key = base64.b64decode(secret["data"]["jwt.key"])
    ca = base64.b64decode(tls["data"]["ca.crt"])
    url = f"https://{pod['status']['podIP']}:{wk.SLURMRESTD_PORT}"
    return RestClient(url, jwt_key=key, ca_pem=ca, server_name=names.restapi_dns_names[-1])
