"""How many nodes a workload borrows: its GPU pods packed onto whole nodes (pure).

The lent nodes are the workload's alone, and kube-scheduler binds its pods to
them one at a time, in an order and onto nodes we do not choose. So packing is
sized for *any* order kube-scheduler may take, not for the best one:

- Every GPU pod counts as the workload's largest GPU pod (`g` GPUs), so a node
  of `G` GPUs takes `G // g` pods whatever mix lands on it; pods of one size,
  the usual case, are packed exactly (8 pods x 1 GPU on 4-GPU nodes: 2 nodes).
  Why any order fits: a pod finds no room only if every lent node has less
  than `g` GPUs left, i.e. holds at least `G // g` pods; then all the lent
  nodes together already hold every pod.
- Pods without GPUs (a launcher) take no GPU and ride along on the lent nodes;
  CPU and memory are not sized here (nor were they with one pod per node).
- `G` is the GPU count of the pool's nodes (a pool: the nodes the check lends
  from). A pool whose nodes differ is sized by its smallest node that holds
  the largest pod, and the placer takes only nodes with at least the GPUs the
  packing counts on, so a larger node leaves GPUs unused, never a pod unplaced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurmkube.lending.model import PodSetView


@dataclass(frozen=True, slots=True)
class NodeSizing:
    """`pods` GPU pods of up to `gpus_per_pod` GPUs, `pods_per_node` on each of `nodes`."""

    pods: int
    gpus_per_pod: int
    pods_per_node: int
    nodes: int

    @property
    def gpus_per_node(self) -> int:
        """The GPUs every lent node must have for the packing to hold."""
        return self.pods_per_node * self.gpus_per_pod

    def describe(self) -> str:
        gpus = "GPU" if self.gpus_per_pod == 1 else "GPUs"
        return (
            f"{self.pods} pods x {self.gpus_per_pod} {gpus}, "
            f"{self.pods_per_node} per node: {self.nodes} nodes"
        )


def size_lend(pod_sets: Iterable[PodSetView], pool_gpus: Iterable[int]) -> NodeSizing | None:
    """Nodes the pod sets need on a pool with these per-node GPU counts; None without GPU pods.

    When no node of the pool holds the largest pod, one pod per node is asked for,
    and the placer answers that it can never fit (with the largest node it knows).
    """
    gpu_sets = [ps for ps in pod_sets if ps.gpus_per_pod > 0 and ps.count > 0]
    if not gpu_sets:
        return None
    pods = sum(ps.count for ps in gpu_sets)
    largest = max(ps.gpus_per_pod for ps in gpu_sets)
    node_gpus = min((g for g in pool_gpus if g >= largest), default=largest)
    per_node = node_gpus // largest
    return NodeSizing(
        pods=pods, gpus_per_pod=largest, pods_per_node=per_node, nodes=-(-pods // per_node)
    )
