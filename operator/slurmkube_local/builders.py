"""Builders for test objects, Kueue style: `NodeBuilder("gpu-1").clique("c.1").obj()`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.api.documents import ClusterBundle, parse_cluster
from slurmkube.api.models import KubeNode

CLUSTER_UUID = "3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64"


@dataclass
class NodeBuilder:
    name: str
    labels: dict[str, str] = field(default_factory=lambda: {"slurmkube.io/pool": "gpu"})
    allocatable: dict[str, str] = field(
        default_factory=lambda: {"cpu": "64", "memory": "256Gi", wk.RESOURCE_GPU: "4"}
    )
    ready: bool = True
    conditions: list[dict[str, str]] = field(default_factory=list)
    taints: list[dict[str, str]] = field(default_factory=list)

    def condition(self, kind: str, status: str = "True") -> NodeBuilder:
        """A Node condition beside Ready, as a node monitor (NPD, NVSentinel) sets it."""
        self.conditions.append({"type": kind, "status": status})
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        self.taints.append({"key": key, "value": value, "effect": effect})
        return self

    def clique(self, domain: str | int | None) -> NodeBuilder:
        if domain is None:
            self.labels.pop(wk.LABEL_GPU_CLIQUE, None)
        else:
            self.labels[wk.LABEL_GPU_CLIQUE] = (
                f"{CLUSTER_UUID}.{domain}" if isinstance(domain, int) else domain
            )
        return self

    def tiers(self, leaf: str | None, spine: str | None = None) -> NodeBuilder:
        for key, value in ((wk.LABEL_LEAF, leaf), (wk.LABEL_SPINE, spine)):
            if value is None:
                self.labels.pop(key, None)
            else:
                self.labels[key] = value
        return self

    def gpus(self, count: int, product: str | None = "NVIDIA-GB200") -> NodeBuilder:
        if count:
            self.allocatable[wk.RESOURCE_GPU] = str(count)
        else:
            self.allocatable.pop(wk.RESOURCE_GPU, None)
        if product:
            self.labels[wk.LABEL_GPU_PRODUCT] = product
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self.labels[key] = value
        return self

    def pool(self, pool: str) -> NodeBuilder:
        return self.label("slurmkube.io/pool", pool)

    def dict(self) -> dict[str, Any]:
        ready = {"type": "Ready", "status": "True" if self.ready else "False"}
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": dict(self.labels)},
            "status": {
                "allocatable": dict(self.allocatable),
                "conditions": [ready, *(dict(c) for c in self.conditions)],
            },
        }
        if self.taints:
            node["spec"] = {"taints": [dict(t) for t in self.taints]}
        return node

    def obj(self) -> KubeNode:
        return KubeNode.model_validate(self.dict())


def nvl_fleet(domains: int, per_domain: int, prefix: str = "gpu", gpus: int = 4) -> list[KubeNode]:
    """`domains` NVLink domains of `per_domain` nodes, two domains per leaf, one spine."""
    nodes = []
    for d in range(domains):
        for i in range(per_domain):
            n = d * per_domain + i + 1
            nodes.append(
                NodeBuilder(f"{prefix}-{n:04d}")
                .clique(d + 1)
                .gpus(gpus)
                .tiers(f"leaf-{d // 2 + 1:02d}", "spine-01")
                .obj()
            )
    return nodes


def cluster_docs(
    block_size: int | None = None,
    plugin: str = "block",
    pools: tuple[str, ...] = ("gpu",),
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    topology: dict[str, Any] = {"plugin": plugin}
    if block_size is not None:
        topology["blockSize"] = block_size
    spec: dict[str, Any] = {
        "topology": topology,
        "partitions": [
            {"name": pool, "nodeSets": [pool], "default": i == 0} for i, pool in enumerate(pools)
        ],
        **(extra or {}),
    }
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": wk.API_VERSION,
            "kind": "SlurmCluster",
            "metadata": {"name": "test"},
            "spec": spec,
        }
    ]
    for pool in pools:
        docs.append(
            {
                "apiVersion": wk.API_VERSION,
                "kind": "NodeSet",
                "metadata": {"name": pool},
                "spec": {
                    "clusterRef": "test",
                    "nodeSelector": {"matchLabels": {"slurmkube.io/pool": pool}},
                    "memoryReservedMiB": 1024,
                },
            }
        )
    return docs


def bundle(**kwargs: Any) -> ClusterBundle:
    return parse_cluster(cluster_docs(**kwargs))
