"""A simulated GPU fleet: kwok-managed Node objects labelled like a real one.

slurmkube derives Slurm's nodes, GRES and topology from node labels, so the e2e
fleet must carry the labels real GPU nodes carry: NVIDIA GPU Feature Discovery's
`nvidia.com/gpu.clique` (`<clusterUUID>.<cliqueId>`, one value per NVLink
domain), `nvidia.com/gpu.product`, `nvidia.com/gpu.count`, and the network tiers
(rack / leaf / spine) under the operator's default keys. kwok then keeps these
nodes Ready and moves pods bound to them to Running (status only; nothing runs).

The layout is a fat tree: every NVLink domain is one rack, `domains_per_leaf`
racks hang off a leaf switch, `leaves_per_spine` leaves off a spine. Names and
UUIDs are derived from the fleet name, so the same spec always yields the same
objects and applying it twice changes nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]

CLIQUE_LABEL = "nvidia.com/gpu.clique"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
RACK_LABEL = "topology.slurmkube.io/rack"
LEAF_LABEL = "topology.slurmkube.io/leaf"
SPINE_LABEL = "topology.slurmkube.io/spine"
GPU_RESOURCE = "nvidia.com/gpu"
# Marks the nodes this generator owns, so it can prune what a smaller spec drops.
FLEET_LABEL = "e2e.slurmkube.io/fleet"
# kwok manages nodes with this annotation (kwok --manage-nodes-with-annotation-selector).
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
_NAMESPACE_UUID = uuid.UUID("0b7c6f1e-5a0d-4f62-9d43-3c2f6a1f8e11")


@dataclass(frozen=True)
class FleetSpec:
    """Shape of a simulated fleet."""

    name: str = "gpu"
    nvl_domains: int = 2
    nodes_per_domain: int = 4
    gpus: int = 4
    product: str = "NVIDIA-GB200"
    domains_per_leaf: int = 2
    leaves_per_spine: int = 2
    cpu: str = "144"
    memory: str = "884Gi"
    pods: int = 110
    first_clique_id: int = 32766

    def __post_init__(self) -> None:
        for field in ("nvl_domains", "nodes_per_domain", "gpus", "domains_per_leaf"):
            if getattr(self, field) < 1:
                raise ValueError(f"FleetSpec.{field} must be >= 1, got {getattr(self, field)}")
        if self.leaves_per_spine < 1:
            raise ValueError(
                f"FleetSpec.leaves_per_spine must be >= 1, got {self.leaves_per_spine}"
            )


@dataclass(frozen=True)
class SimulatedNode:
    """Where one node sits in the fleet."""

    name: str
    domain: int
    index: int
    clique: str
    rack: str
    leaf: str
    spine: str


def cluster_uuid(spec: FleetSpec, domain: int) -> str:
    """The NVLink domain's cluster UUID: stable for a fleet name and domain index."""
    return str(uuid.uuid5(_NAMESPACE_UUID, f"{spec.name}/nvl/{domain}"))


def layout(spec: FleetSpec) -> list[SimulatedNode]:
    """Every node of the fleet, in name order."""
    nodes = []
    for domain in range(spec.nvl_domains):
        leaf = domain // spec.domains_per_leaf
        spine = leaf // spec.leaves_per_spine
        clique = f"{cluster_uuid(spec, domain)}.{spec.first_clique_id + domain}"
        for index in range(spec.nodes_per_domain):
            nodes.append(
                SimulatedNode(
                    name=f"{spec.name}-{domain:03d}-{index:02d}",
                    domain=domain,
                    index=index,
                    clique=clique,
                    rack=f"{spec.name}-rack-{domain:03d}",
                    leaf=f"{spec.name}-leaf-{leaf:02d}",
                    spine=f"{spec.name}-spine-{spine:02d}",
                )
            )
    return nodes


def node_manifest(spec: FleetSpec, node: SimulatedNode) -> Manifest:
    """The Node object for one simulated node, status included (kwok keeps it Ready)."""
    resources = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": "1Ti",
        GPU_RESOURCE: str(spec.gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {
                KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                # As a kubelet sets them: without them kube-controller-manager's
                # node lifecycle controller adds them, one Node update per node,
                # slowly enough to overlap a benchmark's measurements.
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "type": "kwok",
                FLEET_LABEL: spec.name,
                "nvidia.com/gpu.present": "true",
                CLIQUE_LABEL: node.clique,
                PRODUCT_LABEL: spec.product,
                COUNT_LABEL: str(spec.gpus),
                RACK_LABEL: node.rack,
                LEAF_LABEL: node.leaf,
                SPINE_LABEL: node.spine,
            },
        },
        "spec": {},
        "status": {
            "allocatable": resources,
            "capacity": dict(resources),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
            },
            "phase": "Running",
        },
    }


def user_labels(manifest: Manifest) -> dict[str, str]:
    """A node's labels a kubelet may be given: not those it sets itself (and may not be told)."""
    labels: dict[str, str] = manifest["metadata"]["labels"]
    return {
        k: v
        for k, v in labels.items()
        if not k.startswith(("kubernetes.io/", "beta.kubernetes.io/")) and k != "type"
    }


def manifests(spec: FleetSpec) -> list[Manifest]:
    return [node_manifest(spec, node) for node in layout(spec)]


def kind_cluster_config(
    spec: FleetSpec, cluster_name: str, kubernetes_image: str | None = None
) -> Manifest:
    """A kind Cluster whose workers carry the labels the simulated nodes carry.

    kind runs real kubelets, which cannot advertise `nvidia.com/gpu` without a
    device plugin; `slurmkube-e2e advertise-gpus` patches it into their status.
    """
    image = {"image": kubernetes_image} if kubernetes_image else {}
    workers = [
        {
            "role": "worker",
            **image,
            "labels": user_labels(node_manifest(spec, node)),
        }
        for node in layout(spec)
    ]
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": cluster_name,
        "networking": {"apiServerAddress": "127.0.0.1"},
        "nodes": [{"role": "control-plane", **image}, *workers],
    }
