"""Replacing slurmd pods whose template changed, under the NodeSet's updateStrategy (pure).

A slurmd pod cannot be updated in place (a pod's spec is mostly immutable), so
a changed template (image, tolerations, GPU count, ...) means a new pod. The
old one goes the drain-first way like any other removal, at most
`maxUnavailable` nodes of a NodeSet at a time, idle nodes first so the rollout
waits on busy nodes last. `OnDelete` replaces nothing: a pod someone deletes
comes back with the new template.

A pod without a template hash predates this mechanism; it is left alone rather
than rolled on an operator upgrade, unless a Slurm upgrade gives it another
image (plan/upgrade.py).

A replacement turning Ready is no event the operator reconciles on (a slurmd
pod's status changes all the time): while outdated pods wait on one, the
reconcile comes back after `STARTING_LOOK_SECONDS`, not at the 30 s resync,
which would otherwise pace a rollout at one node per resync. A busy node's
job ending is no event either: `go_when_idle` names the drained nodes whose pod
goes then, and Slurm's 2 s poll reconciles when one of them is idle
(plan/slurm_poll.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from slurmkube.api import well_known as wk
from slurmkube.api.models import NodeSet
from slurmkube.build.names import Manifest
from slurmkube.plan.removal import may_lose_pod

# How soon a reconcile looks again while a replacement starts: a pod starts in
# seconds; a stuck one costs a reconcile per look, so not every 2 s poll.
STARTING_LOOK_SECONDS: Final = 5.0


class RolloutPod(Protocol):
    """What the rollout needs of an existing slurmd pod (plan.cluster.PodView)."""

    @property
    def name(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def template_hash(self) -> str: ...
    @property
    def ready(self) -> bool: ...
    @property
    def deleting(self) -> bool: ...
    @property
    def image(self) -> str: ...


class RolloutNode(Protocol):
    """What the rollout needs of a pod's Slurm node (plan.cluster.SlurmNodeView)."""

    @property
    def busy(self) -> bool: ...
    @property
    def drain(self) -> bool: ...
    @property
    def responding(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Rollout:
    drain: tuple[str, ...] = ()  # Slurm nodes to drain now
    delete_pods: tuple[str, ...] = ()  # outdated pods whose node runs nothing
    # Nodes held drained for their replacement: never resumed meanwhile.
    holding: frozenset[str] = frozenset()
    # Outdated pods wait on a replacement still starting (missing or not Ready).
    starting: bool = False
    # Drained nodes whose outdated pod goes once their job ends.
    go_when_idle: frozenset[str] = frozenset()


def plan_rollout(
    node_set: NodeSet,
    pods: Sequence[RolloutPod],
    wanted: Mapping[str, Manifest],
    slurm_nodes: Mapping[str, RolloutNode] | None,
    overdue: Collection[str] = (),
) -> Rollout:
    """`wanted`: pod name -> desired manifest for this NodeSet's desired nodes;
    `overdue`: busy nodes Slurm has given up on (plan/holds.py), whose pods may go."""
    strategy = node_set.spec.update_strategy
    if strategy.type == "OnDelete" or slurm_nodes is None:
        return Rollout()
    live = [p for p in pods if p.name in wanted and not p.deleting]
    outdated = [p for p in live if _outdated(p, wanted[p.name])]
    if not outdated:
        return Rollout()
    present = {p.name for p in pods}
    # Replacements under way: outdated pods we already drained, and desired pods
    # missing or not ready yet (a replacement starting up).
    started = [p for p in outdated if _drained_or_gone(slurm_nodes.get(p.node))]
    started_names = {p.name for p in started}
    outdated_names = {p.name for p in outdated}
    unready = sum(1 for name in wanted if name not in present) + sum(
        1 for p in live if not p.ready and p.name not in outdated_names
    )
    budget = max(0, strategy.max_unavailable - len(started) - unready)
    waiting = sorted(
        (p for p in outdated if p.name not in started_names),
        key=lambda p: (_busy(slurm_nodes.get(p.node)), p.node),
    )
    chosen = waiting[:budget]
    delete = []
    drain = []
    go_when_idle: set[str] = set()
    for pod in started:
        if may_lose_pod(slurm_nodes.get(pod.node), overdue, pod.node):
            delete.append(pod.name)
        else:
            go_when_idle.add(pod.node)
    for pod in chosen:
        node = slurm_nodes.get(pod.node)
        if node is not None and not node.responding and may_lose_pod(node, overdue, pod.node):
            delete.append(pod.name)  # Slurm runs nothing there, or gave up on it
        elif node is None:
            delete.append(pod.name)
        else:
            drain.append(pod.node)
            if node.busy:
                go_when_idle.add(pod.node)
    return Rollout(
        drain=tuple(drain),
        delete_pods=tuple(sorted(delete)),
        holding=frozenset(p.node for p in (*started, *chosen)),
        starting=unready > 0,
        go_when_idle=frozenset(go_when_idle),
    )


def _hash(manifest: Manifest) -> str:
    return str(manifest["metadata"]["annotations"][wk.ANNOTATION_POD_TEMPLATE_HASH])


def _outdated(pod: RolloutPod, manifest: Manifest) -> bool:
    if pod.template_hash:
        return pod.template_hash != _hash(manifest)
    wanted = manifest["spec"]["containers"][0]["image"]
    return bool(pod.image) and pod.image != wanted


def _drained_or_gone(node: RolloutNode | None) -> bool:
    """Slurm starts nothing there: unknown, not answering, or drained (an admin's
    drain too, kept as it is: Slurm keeps it across slurmd's restart)."""
    return node is None or not node.responding or node.drain


def _busy(node: RolloutNode | None) -> bool:
    return node is not None and node.busy
