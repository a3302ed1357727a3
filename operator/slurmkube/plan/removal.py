"""Which unwanted slurmd pods go now, and which nodes are drained first (pure).

A pod is unwanted when its node left the NodeSet, was cordoned or lent, the
NodeSet scaled in or is being deleted. Its node runs nothing once it goes, so:

- without an answer from Slurm, no pod goes;
- a node Slurm does not know runs nothing: its pod goes;
- a busy node is drained first (reason prefixed `slurmkube:`); its pod goes
  once drained and idle;
- a busy node Slurm does not reach keeps its pod until it is overdue
  (plan/holds.py: SlurmdTimeout plus a grace), since Slurm keeps its jobs
  meanwhile; an idle one's pod goes at once;
- autoscaled NodeSets: the pod goes once Slurm powered the node down.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from slurmkube.plan.autoscale import PowerNode, removable


class RemovalPod(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def node_set(self) -> str: ...
    @property
    def deleting(self) -> bool: ...


class _Busy(Protocol):
    @property
    def busy(self) -> bool: ...


class RemovalNode(PowerNode, Protocol):
    @property
    def responding(self) -> bool: ...


class LabelledPod(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def busy_label(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Removal:
    drain: tuple[str, ...] = ()
    delete_pods: tuple[str, ...] = ()
    # node -> pod: deleted in the same pass if Slurm shows it drained and idle after the drain.
    delete_once_drained: Mapping[str, str] = field(default_factory=dict)
    # Drained nodes whose pod goes once their job ends.
    go_when_idle: frozenset[str] = frozenset()


def may_lose_pod(node: _Busy | None, overdue: Collection[str], name: str) -> bool:
    """No job can be lost with the pod: Slurm does not know the node, shows no job
    there, or has stopped waiting for it (overdue)."""
    return node is None or not node.busy or name in overdue


def plan_removal(
    pods: Sequence[RemovalPod],
    wanted: Collection[str],
    slurm_nodes: Mapping[str, RemovalNode] | None,
    autoscaled: Collection[str],
    overdue: Collection[str],
) -> Removal:
    """`wanted`: names of the pods the plan keeps or creates; `autoscaled`: NodeSet names."""
    drain: list[str] = []
    delete: list[str] = []
    once_drained: dict[str, str] = {}
    go_when_idle: set[str] = set()
    if slurm_nodes is None:
        return Removal()  # cannot tell whether a job runs there: keep every pod
    for pod in sorted(pods, key=lambda p: p.name):
        if pod.name in wanted or pod.deleting:
            continue
        state = slurm_nodes.get(pod.node)
        if pod.node_set in autoscaled:
            # Slurm powers the node down itself (idle only); its pod goes after.
            if removable(state):
                delete.append(pod.name)
        elif state is None:
            delete.append(pod.name)  # Slurm does not know the node: nothing runs there
        elif not state.responding:
            if may_lose_pod(state, overdue, pod.node):
                delete.append(pod.name)
            elif not state.drain:
                drain.append(pod.node)  # no new job while Slurm waits for it
        elif not state.drain:
            drain.append(pod.node)
            once_drained[pod.node] = pod.name
            if state.busy:
                go_when_idle.add(pod.node)
        elif not state.busy:
            delete.append(pod.name)
        else:
            go_when_idle.add(pod.node)
    return Removal(tuple(drain), tuple(delete), once_drained, frozenset(go_when_idle))


def busy_labels(
    pods: Sequence[LabelledPod], slurm_nodes: Mapping[str, RemovalNode] | None
) -> dict[str, bool]:
    """Pods whose slurmkube.io/busy label is not what Slurm shows (unknown: unchanged)."""
    if slurm_nodes is None:
        return {}
    out = {}
    for pod in pods:
        view = slurm_nodes.get(pod.node)
        busy = view is not None and view.busy
        if busy != pod.busy_label:
            out[pod.name] = busy
    return out
