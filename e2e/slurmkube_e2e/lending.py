"""The Kueue side of the lending bridge as e2e tests and bench/bridge.py set it up.

One SlurmReservationCheck, its AdmissionCheck, a lending ResourceFlavor, a
ClusterQueue (quota in GPUs) and a LocalQueue `lend`, all named after the
namespace; and the Job a workload is: pods of 4 GPUs, a whole local node each.
`lending_cluster` sets up a SlurmCluster and those objects; the readers after it
say what the bridge did (reservations, lease labels, Workloads, Events).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from slurmkube.slurm.hostlist import expand as hostlist_expand
from slurmkube_e2e.builders import QUEUE_LABEL
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator_cluster import (
    API,
    LOCAL,
    ON_REAL_NODES,
    POD_IMAGE,
    TOLERATE,
    docs,
    in_ctld,
    slurm_node,
)
from slurmkube_e2e.waiting import has_condition, wait_for, wait_for_list

KUEUE = "kueue.x-k8s.io/v1beta2"
LEASE = "slurmkube.io/lease"
RESERVATION_PREFIX = "slurmkube-"
CLIQUE = "nvidia.com/gpu.clique"
GPUS_PER_NODE = 4  # every local runtime node and real node
# Two pods to a node must fit beside slurmctld's request: a real node has the
# host's CPUs (two here), a runtime node sixteen.
JOB_CPU = "500m" if ON_REAL_NODES else "1"
QUEUE = "lend"


@dataclass(frozen=True)
class Bridge:
    namespace: str
    check: str
    clique: str


def lending_cluster_docs(
    namespace: str, clique: str, health: Mapping[str, Any] | None = None
) -> list[Manifest]:
    """The shared sample cluster, its NodeSet narrowed to one block, every node running slurmd."""
    cluster, node_set = docs(namespace)
    if health is not None:
        cluster["spec"]["health"] = dict(health)
    spec = dict(node_set["spec"])
    spec.pop("replicas")
    spec["nodeSelector"] = {"matchLabels": {**LOCAL, CLIQUE: clique}}
    return [cluster, {**node_set, "spec": spec}]


@contextmanager
def lending_cluster(
    kube: Kube,
    prefix: str,
    *,
    health: Mapping[str, Any] | None = None,
    before_cleanup: Callable[[], None] = lambda: None,
) -> Iterator[Bridge]:
    """A namespace with SlurmCluster `local` on the NVLink block of the sample's node 0
    (local-0's, or the first real domain: 4 idle nodes) and the Kueue objects of
    `kueue_docs`; all deleted afterwards, no lease left."""
    namespace = f"{prefix}-{secrets.token_hex(2)}"
    first = kube.get("v1", "Node", slurm_node(0))
    assert first is not None
    clique = first["metadata"]["labels"][CLIQUE]
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    try:
        # NodeSet first: a first render without nodes would cost a reconfigure.
        for doc in reversed(lending_cluster_docs(namespace, clique, health)):
            kube.apply(doc)
        wait_for(
            kube,
            API,
            "SlurmCluster",
            "local",
            lambda o: has_condition(o, "Ready") and o["status"]["nodes"]["idle"] == 4,
            namespace=namespace,
            timeout=180,
        )
        for doc in kueue_docs(namespace):
            kube.apply(doc)
        wait_for(
            kube,
            KUEUE,
            "AdmissionCheck",
            namespace,
            lambda o: has_condition(o, "Active"),
            timeout=60,
        )
        yield Bridge(namespace, namespace, clique)
    finally:
        before_cleanup()
        for api, kind, name in cluster_scoped(namespace):
            kube.delete(api, kind, name)
        delete_namespace(kube, namespace)
        for node in kube.list("v1", "Node", label_selector=LEASE):
            kube.patch(
                "v1", "Node", node["metadata"]["name"], {"metadata": {"labels": {LEASE: None}}}
            )


def kueue_docs(namespace: str, gpu_quota: int = 16, retry_after: int = 5) -> list[Manifest]:
    """The check lends from SlurmCluster `local` of `namespace`, WaitForIdle for 600 s."""
    check = namespace
    return [
        {
            "apiVersion": API,
            "kind": "SlurmReservationCheck",
            "metadata": {"name": check},
            "spec": {
                "clusterRef": {"namespace": namespace, "name": "local"},
                "busyNodes": {"policy": "WaitForIdle", "timeoutSeconds": 600},
                # The local nodes are tainted; lent nodes are given with the toleration.
                "tolerations": TOLERATE,
                "retryAfterSeconds": retry_after,
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {
                "controllerName": "slurmkube.io/slurm-reservation",
                "parameters": {
                    "apiGroup": "slurmkube.io",
                    "kind": "SlurmReservationCheck",
                    "name": check,
                },
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": f"{namespace}-lend"},
            "spec": {},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": f"{namespace}-cq"},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"{namespace}-lend",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": str(gpu_quota * 4)},
                                    {"name": "memory", "nominalQuota": f"{gpu_quota * 16}Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpu_quota},
                                ],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": f"{namespace}-cq"},
        },
    ]


def cluster_scoped(namespace: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of what kueue_docs makes outside the namespace."""
    return [
        (KUEUE, "ClusterQueue", f"{namespace}-cq"),
        (KUEUE, "ResourceFlavor", f"{namespace}-lend"),
        (KUEUE, "AdmissionCheck", namespace),
        (API, "SlurmReservationCheck", namespace),
    ]


def gpu_job(name: str, pods: int, seconds: float, gpus: int = GPUS_PER_NODE) -> Manifest:
    """A Kueue batch Job of `pods` pods with `gpus` GPUs each (4: a whole local node)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: QUEUE}},
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": POD_IMAGE,
                            "command": ["sleep", str(seconds)],
                            "resources": {
                                "limits": {
                                    "nvidia.com/gpu": gpus,
                                    "cpu": JOB_CPU,
                                    "memory": "1Gi",
                                },
                            },
                        }
                    ],
                }
            },
        },
    }


# --- reading the bridge's work (Slurm, Nodes, Workloads, Jobs) ---------------------------


def reservations(namespace: str) -> dict[str, list[str]]:
    """Slurm reservations (name -> nodes), read in the slurmctld pod."""
    out = in_ctld(namespace, "scontrol", "-o", "show", "reservation")
    found = {}
    for line in out.splitlines():
        name = re.search(r"ReservationName=(\S+)", line)
        nodes = re.search(r" Nodes=(\S+)", line)
        if name and nodes:
            found[name.group(1)] = expand(nodes.group(1))
    return found


def expand(hostlist: str) -> list[str]:
    """Slurm's hostlist as names, zero padding kept (`real-000-[01-02]`)."""
    return list(hostlist_expand(hostlist))


def workload_of(kube: Kube, namespace: str, job: str) -> Manifest | None:
    for w in kube.list(KUEUE, "Workload", namespace=namespace):
        owners = w["metadata"].get("ownerReferences") or []
        if any(o["name"] == job for o in owners):
            return w
    return None


def wait_workload(kube: Kube, namespace: str, job: str, predicate: Any, timeout: float) -> Manifest:
    items = wait_for_list(
        kube,
        KUEUE,
        "Workload",
        lambda ws: any(predicate(w) for w in ws if owned_by(w, job)),
        namespace=namespace,
        timeout=timeout,
        what=f"workload of {job}",
    )
    return next(w for w in items if owned_by(w, job) and predicate(w))


def owned_by(w: Manifest, job: str) -> bool:
    return any(o["name"] == job for o in w["metadata"].get("ownerReferences") or [])


def leased_nodes(kube: Kube, uid: str) -> list[str]:
    return sorted(
        n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector=f"{LEASE}={uid}")
    )


def slurm_states(namespace: str, nodes: list[str]) -> dict[str, str]:
    out = in_ctld(namespace, "sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N %T")
    return dict(line.split() for line in out.splitlines() if line.strip())


def started(pods: list[Manifest], count: int) -> bool:
    return len(pods) == count and all(
        (p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods
    )


def wait_pods_started(kube: Kube, namespace: str, job: str, count: int) -> list[Manifest]:
    """The Job's `count` pods, once all run (or ran)."""
    return wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda ps: started(ps, count),
        namespace=namespace,
        label_selector=f"job-name={job}",
        timeout=90,
    )


def wait_complete(kube: Kube, namespace: str, job: str) -> None:
    wait_for(
        kube,
        "batch/v1",
        "Job",
        job,
        lambda j: has_condition(j, "Complete"),
        namespace=namespace,
        timeout=90,
    )


def check_entry(w: Manifest, check: str) -> Manifest:
    return next(e for e in w["status"]["admissionChecks"] if e["name"] == check)


def events_of(kube: Kube, namespace: str, w: Manifest, reason: str) -> list[str]:
    return [
        e["message"]
        for e in kube.list(
            "v1",
            "Event",
            namespace=namespace,
            field_selector=f"involvedObject.uid={w['metadata']['uid']}",
        )
        if e.get("reason") == reason
    ]
