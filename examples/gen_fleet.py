"""Writes examples/fleet-nodes.yaml: the sample fleet as `kubectl get nodes -o yaml` prints it.

Two NVL72-like domains (18 nodes x 4 GPUs, `nvidia.com/gpu.clique` set as GPU
Feature Discovery does), one 8-GPU HGX group under leaf/spine labels, and a
CPU group. Run: python examples/gen_fleet.py > examples/fleet-nodes.yaml
"""

from __future__ import annotations

import sys

import yaml

CLUSTER_UUID = "3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64"


def node(name: str, labels: dict[str, str], cpu: str, memory: str, gpus: int) -> dict[str, object]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def fleet() -> list[dict[str, object]]:
    items = []
    for d in range(2):
        for i in range(18):
            items.append(
                node(
                    f"gb200-{d * 18 + i + 1:03d}",
                    {
                        "nvidia.com/gpu.clique": f"{CLUSTER_UUID}.{d + 1}",
                        "nvidia.com/gpu.product": "NVIDIA-GB200",
                        "nvidia.com/gpu.count": "4",
                        "topology.slurmkube.io/rack": f"nvl72-{d + 1}",
                        "topology.slurmkube.io/leaf": f"leaf-{d + 1:02d}",
                        "topology.slurmkube.io/spine": "spine-01",
                        "slurmkube.io/pool": "gb200",
                    },
                    "144",
                    "884Gi",
                    4,
                )
            )
    for i in range(8):
        items.append(
            node(
                f"hgx-{i + 1:02d}",
                {
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu.count": "8",
                    "topology.slurmkube.io/leaf": f"leaf-{3 + i // 4:02d}",
                    "topology.slurmkube.io/spine": "spine-02",
                    "slurmkube.io/pool": "hgx",
                },
                "224",
                "2015Gi",
                8,
            )
        )
    for i in range(4):
        items.append(
            node(
                f"cpu-{i + 1:02d}",
                {"slurmkube.io/pool": "cpu", "topology.slurmkube.io/leaf": "leaf-05"},
                "64",
                "250Gi",
                0,
            )
        )
    return items


if __name__ == "__main__":
    yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": fleet()}, sys.stdout, sort_keys=False
    )
