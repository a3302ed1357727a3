"""The Node and Lease objects the agent keeps, as a kubelet would.

Labels follow the simulated fleet (slurmkube_e2e.fleet): NVIDIA GPU Feature
Discovery's `nvidia.com/gpu.clique` per group of NODES_PER_CLIQUE nodes, the
product and count, and the rack/leaf/spine tiers, so the operator derives Slurm
topology from local nodes exactly as from simulated ones. The nodes carry no
`kwok.x-k8s.io/node` annotation, which is what kwok's
`--manage-nodes-with-annotation-selector` selects, so kwok leaves them alone.

Steering: a NoSchedule taint RUNTIME_TAINT keeps every pod that does not ask
for real processes (tolerate the taint and select RUNTIME_LABEL) off these
nodes, and kwok nodes never run anything, so a test states where its pods go.
"""

from __future__ import annotations

import datetime as dt
import platform
from typing import Any

from slurmkube_e2e import fleet
from slurmkube_runtime.layout import (
    AGENT_NAME,
    BRIDGE_IP,
    GPUS_PER_NODE,
    NODE_COUNT,
    NODES_PER_CLIQUE,
    RUNTIME_LABEL,
    RUNTIME_LABEL_VALUE,
    RUNTIME_TAINT,
    node_names,
)

Manifest = dict[str, Any]
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
NODE_RESOURCES = {
    "cpu": "16",
    "memory": "64Gi",
    "pods": "110",
    "ephemeral-storage": "100Gi",
    fleet.GPU_RESOURCE: str(GPUS_PER_NODE),
}
_SPEC = fleet.FleetSpec(
    name="local",
    nvl_domains=-(-NODE_COUNT // NODES_PER_CLIQUE),
    nodes_per_domain=NODES_PER_CLIQUE,
)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_labels(index: int, name: str) -> dict[str, str]:
    domain = index // NODES_PER_CLIQUE
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        RUNTIME_LABEL: RUNTIME_LABEL_VALUE,
        "nvidia.com/gpu.present": "true",
        fleet.CLIQUE_LABEL: f"{fleet.cluster_uuid(_SPEC, domain)}.{_SPEC.first_clique_id + domain}",
        fleet.PRODUCT_LABEL: _SPEC.product,
        fleet.COUNT_LABEL: str(GPUS_PER_NODE),
        fleet.RACK_LABEL: f"local-rack-{domain:03d}",
        fleet.LEAF_LABEL: "local-leaf-00",
        fleet.SPINE_LABEL: "local-spine-00",
    }


def node_manifests() -> list[Manifest]:
    """Metadata and spec of every local node (status is patched separately)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels(i, name)},
            "spec": {"taints": [{"key": RUNTIME_TAINT, "value": "true", "effect": "NoSchedule"}]},
        }
        for i, name in enumerate(node_names())
    ]


def node_status(name: str, boot_id: str) -> Manifest:
    """The status a kubelet reports: Ready, resources, addresses, versions."""
    stamp = now()
    conditions = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    ]
    return {
        "status": {
            "capacity": dict(NODE_RESOURCES),
            "allocatable": dict(NODE_RESOURCES),
            "addresses": [
                {"type": "InternalIP", "address": str(BRIDGE_IP)},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": f"{AGENT_NAME} is running",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
                for t, s, r in conditions
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": boot_id.replace("-", ""),
                "systemUUID": boot_id,
                "bootID": boot_id,
                "kernelVersion": platform.release(),
                "osImage": "slurmkube local runtime",
                "containerRuntimeVersion": f"{AGENT_NAME}://0.1",
                "kubeletVersion": "v1.34.0-slurmkube-local",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "phase": "Running",
        }
    }


def lease_manifest(name: str, node_uid: str) -> Manifest:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}
            ],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": now_micro(),
        },
    }
