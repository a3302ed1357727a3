"""The job-safety invariant's planning half (pure): which nodes the config holds as
Slurm registered them, the drains that release them, and when a node Slurm no
longer reaches may lose its pod.

A node whose Slurm state shows a job never leaves the config, changes shape or
loses its slurmd pod before it is drained and idle (DESIGN.md §5 Safety):

- `held_nodes`: every busy node (and, while Slurm cannot be asked, every node
  with a slurmd pod) is kept in its NodeSet with the shape Slurm registered
  (render/membership.py); once drained and idle the hold ends and the change
  lands;
- a node's GPUs dropping below what it registered is a health event: its
  registered GRES stay and it is drained, busy or not (an XID that takes one
  GPU out of allocatable must not turn `gpu:8` into `gpu:7` under a job);
- `change_drains`: a held node whose line or NodeSet differs from what
  Kubernetes asks is drained with our prefix first;
- `overdue`: a busy node Slurm does not reach keeps its pod until SlurmdTimeout
  plus a grace has passed since it was first seen not responding: until then
  Slurm keeps its jobs, and slurmd may come back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from slurmkube.api import well_known as wk
from slurmkube.api.slurm_version import SlurmVersion
from slurmkube.render.config import SlurmConfig
from slurmkube.render.context import SLURMD_TIMEOUT_SECONDS
from slurmkube.render.membership import HeldNode, NodeProblem
from slurmkube.topology.fleet import FleetNode

# After SlurmdTimeout slurmctld sets the node DOWN and its jobs fail; the grace
# covers the read that shows it and a slurmd restarting just in time.
NOT_RESPONDING_GRACE_SECONDS = 60

CHANGE_REASON = f"{wk.DRAIN_REASON_PREFIX} config change waits for the node to be idle"


class _Node(Protocol):
    """What holds read of a Slurm node (plan.cluster.SlurmNodeView)."""

    @property
    def busy(self) -> bool: ...
    @property
    def drain(self) -> bool: ...
    @property
    def responding(self) -> bool: ...
    @property
    def cpus(self) -> int: ...
    @property
    def real_memory(self) -> int: ...
    @property
    def gpus(self) -> int: ...
    @property
    def gpu_type(self) -> str: ...


class _Pod(Protocol):
    @property
    def node(self) -> str: ...
    @property
    def node_set(self) -> str: ...


def held_nodes(
    slurm_nodes: Mapping[str, _Node] | None,
    pods: Sequence[_Pod],
    fleet: Sequence[FleetNode],
) -> dict[str, HeldNode]:
    """Nodes the config keeps as Slurm registered them, keyed by name."""
    node_set = {p.node: p.node_set for p in pods}
    if slurm_nodes is None:
        # Cannot tell whether a job runs there: every node with a pod keeps its NodeSet.
        return {node: HeldNode(node, ns) for node, ns in sorted(node_set.items())}
    gpus: dict[str, int] = {n.name: n.gpus for n in fleet}
    return {
        name: HeldNode(
            name,
            node_set.get(name),
            cpus=view.cpus,
            real_memory=view.real_memory,
            gpus=view.gpus,
            gpu_type=view.gpu_type or None,
        )
        for name, view in sorted(slurm_nodes.items())
        if view.busy or _gpus_dropped(view, gpus.get(name))
    }


def _gpus_dropped(view: _Node, allocatable: int | None) -> bool:
    return allocatable is not None and allocatable < view.gpus


def gpu_problems(
    slurm_nodes: Mapping[str, _Node] | None, fleet: Sequence[FleetNode]
) -> dict[str, NodeProblem]:
    """Nodes whose allocatable GPUs fell below what Slurm registered: a health event."""
    if slurm_nodes is None:
        return {}
    out: dict[str, NodeProblem] = {}
    for node in fleet:
        view = slurm_nodes.get(node.name)
        if view is not None and _gpus_dropped(view, node.gpus):
            message = (
                f"Node {node.name}: {node.gpus} GPUs allocatable, {view.gpus} registered "
                "in Slurm; drained, its GRES kept until the GPUs are back"
            )
            out[node.name] = NodeProblem(node.name, "GpusBelowRegistered", message)
    return out


def change_drains(
    config: SlurmConfig,
    slurm_nodes: Mapping[str, _Node] | None,
    problems: Mapping[str, NodeProblem],
) -> dict[str, str]:
    """node -> drain reason, for held nodes whose change waits and that are not drained."""
    if slurm_nodes is None:
        return {}
    out = {}
    for node in sorted(config.held):
        view = slurm_nodes.get(node)
        if view is None or view.drain:
            continue
        problem = problems.get(node)
        if problem is not None and problem.reason == "GpusBelowRegistered":
            out[node] = f"{wk.DRAIN_REASON_PREFIX} GPUs below registered"
        else:
            out[node] = CHANGE_REASON
    return out


def is_stale(
    config: SlurmConfig,
    made_with: Mapping[str, HeldNode],
    now_held: Mapping[str, HeldNode],
) -> bool:
    """Whether a config made with the holds `made_with` differs from one made with
    `now_held` (the reconcile's fresh read of Slurm): a held node released, or a
    busy node whose line is not what Slurm registered."""
    for name, hold in made_with.items():
        if name in config.held and now_held.get(name) != hold:
            return True
    for name, hold in now_held.items():
        before = made_with.get(name)
        if before == hold:
            continue
        if before is not None and name in config.held:
            return True
        shape = config.shape_of.get(name)
        if shape is None:
            return True  # not on any line: it must stay
        if hold.node_set is not None and name not in config.members.get(hold.node_set, ()):
            return True
        if hold.shape_known and (shape.cpus, shape.real_memory) != (hold.cpus, hold.real_memory):
            return True
        if hold.shape_known and (shape.gres or "") != registered_gres(hold):
            return True
    return False


def registered_gres(hold: HeldNode) -> str:
    """The Gres= value of a registered shape, as render/node_lines.py spells it."""
    if not hold.gpus:
        return ""
    return ":".join(["gpu", *([hold.gpu_type] if hold.gpu_type else []), str(hold.gpus)])


def not_responding_since(
    before: Mapping[str, float], slurm_nodes: Mapping[str, _Node] | None, now: float
) -> dict[str, float]:
    """The memory `overdue` reads, carried from one reconcile to the next: when each
    node Slurm shows not responding was first seen so (answering again: forgotten).
    Without a read of Slurm nothing is learnt and nothing forgotten."""
    if slurm_nodes is None:
        return dict(before)
    return {
        name: before.get(name, now) for name, view in slurm_nodes.items() if not view.responding
    }


class _Shape(Protocol):
    @property
    def cpus(self) -> int: ...

    @property
    def real_memory(self) -> int: ...

    @property
    def gres(self) -> str | None: ...


class InForce(Protocol):
    """What `early_delivery_safe` reads of the config in force: a `SlurmConfig`,
    or what a restarted operator reads back from the ConfigMap."""

    @property
    def slurm_version(self) -> SlurmVersion: ...

    @property
    def shape_of(self) -> Mapping[str, _Shape]: ...


@dataclass(frozen=True, slots=True)
class ConfigInForce:
    """The config in force as a restarted operator reads it back from its ConfigMap
    (controllers/early_config.config_in_force)."""

    slurm_version: SlurmVersion
    shape_of: Mapping[str, _Shape]


def early_delivery_safe(delivered: InForce | None, new: SlurmConfig) -> bool:
    """Whether `new`, made before Slurm was read this reconcile, may be written at
    once: no node on a line of the config in force leaves it or changes CPUs,
    RealMemory or Gres (what a running job would fail on). Otherwise the config
    waits for the plan, which holds busy nodes (`plan_cluster` makes it again)."""
    if delivered is None or delivered.slurm_version != new.slurm_version:
        return False  # a release's files (mid-upgrade) wait for the whole plan
    old, now = delivered.shape_of, new.shape_of
    for name, shape in old.items():
        after = now.get(name)
        if after is None or (after.cpus, after.real_memory, after.gres) != (
            shape.cpus,
            shape.real_memory,
            shape.gres,
        ):
            return False
    return True


def overdue(
    slurm_nodes: Mapping[str, _Node] | None,
    not_responding_since: Mapping[str, float],
    now: float,
    slurmd_timeout: int = SLURMD_TIMEOUT_SECONDS,
) -> frozenset[str]:
    """Busy nodes Slurm has not reached for SlurmdTimeout plus the grace: their jobs
    are lost to Slurm already, so their pods may go. Unknown since: never overdue."""
    if slurm_nodes is None:
        return frozenset()
    limit = slurmd_timeout + NOT_RESPONDING_GRACE_SECONDS
    return frozenset(
        name
        for name, since in not_responding_since.items()
        if (view := slurm_nodes.get(name)) is not None
        and not view.responding
        and now - since >= limit
    )
