"""The Kueue side of the lending bridge as e2e tests and bench/bridge.py set it up.

One SlurmReservationCheck, its AdmissionCheck, a lending ResourceFlavor, a
ClusterQueue (quota in GPUs) and a LocalQueue `lend`, all named after the
namespace; and the Job a workload is: pods of 4 GPUs, a whole local node each.
"""

from __future__ import annotations

from slurmkube_e2e.builders import QUEUE_LABEL
from slurmkube_e2e.kube import Manifest
from slurmkube_e2e.operator_cluster import API, TOLERATE

KUEUE = "kueue.x-k8s.io/v1beta2"
LEASE = "slurmkube.io/lease"
RESERVATION_PREFIX = "slurmkube-"
GPUS_PER_NODE = 4  # every local runtime node
QUEUE = "lend"


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
                            "image": "slurmkube/slurm:24.11.5",
                            "command": ["sleep", str(seconds)],
                            "resources": {
                                "limits": {
                                    "nvidia.com/gpu": gpus,
                                    "cpu": "1",
                                    "memory": "1Gi",
                                },
                            },
                        }
                    ],
                }
            },
        },
    }
