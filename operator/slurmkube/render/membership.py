"""Which nodes each NodeSet puts in slurm.conf, and which nodes stay there because
Slurm shows a job on them (pure).

Kubernetes alone decides a node's NodeSet (its selector) and shape (the Node's
allocatable). A running job must not see either change: on reconfigure
slurmctld fails the jobs of a node that vanished or whose cores or GRES changed
(read_config.c `_sync_jobs_to_conf`). So a node the planner *holds*
(`HeldNode`, decided in plan/holds.py) stays in the config with the shape Slurm
registered, whatever its labels now say, until it is drained and idle.

A bad node (two NodeSets select it, memory below what its NodeSet reserves) is
left out and reported as a `NodeProblem` when the caller collects problems;
without a collector it is an error, as the `slurmkube render` CLI wants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmkube.api import grammar
from slurmkube.api.documents import ClusterBundle
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.topology.fleet import FleetNode


@dataclass(frozen=True, slots=True)
class HeldNode:
    """A node kept in the config as Slurm registered it (plan/holds.py decides which)."""

    name: str
    # The NodeSet of its slurmd pod (None: unknown; the node then gets a line of its own).
    node_set: str | None
    # The shape Slurm registered (slurmrestd's cpus, real_memory, gres); cpus 0: not
    # known, the line then keeps the fleet's shape and only the membership is held.
    cpus: int = 0
    real_memory: int = 0
    gpus: int = 0
    gpu_type: str | None = None

    @property
    def shape_known(self) -> bool:
        return self.cpus > 0


@dataclass(frozen=True, slots=True)
class NodeProblem:
    """One node the config leaves out (or holds as it was), and why."""

    node: str
    reason: str  # "NodeSetOverlap", "MemoryBelowReserved"
    message: str


@dataclass(frozen=True, slots=True)
class Membership:
    # NodeSet -> nodes its selector picks (bad nodes left out): who should run slurmd.
    selected: dict[str, list[FleetNode]]
    # NodeSet -> nodes on its lines: `selected` plus the held nodes it keeps.
    lines: dict[str, list[FleetNode]]
    # Held nodes whose NodeSet is unknown or gone: a line of their own.
    unowned: list[FleetNode]


def membership(
    bundle: ClusterBundle,
    fleet: Sequence[FleetNode],
    held: Mapping[str, HeldNode],
    problems: list[NodeProblem] | None,
) -> Membership:
    """Which nodes each NodeSet selects (a node runs one slurmd, so it is in one set),
    and where each held node stays."""
    owner: dict[str, str] = {}
    selected: dict[str, list[FleetNode]] = {ns.metadata.name: [] for ns in bundle.node_sets}
    cluster = bundle.cluster.metadata.name
    overlaps: set[str] = set()
    for ns in bundle.node_sets:
        if ns.spec.cluster_ref != cluster:
            raise InvalidValue(
                f"NodeSet {ns.metadata.name} spec.clusterRef",
                ns.spec.cluster_ref,
                f"the SlurmCluster in this bundle ({cluster!r})",
            )
        selector = ns.spec.node_selector
        keys = selector.keys()
        # A fleet repeats few combinations of the selector's values: match each once.
        matched: dict[tuple[str | None, ...], bool] = {}
        chosen = selected[ns.metadata.name]
        for node in fleet:
            values = tuple(map(node.labels.get, keys))
            hit = matched.get(values)
            if hit is None:
                hit = matched[values] = selector.matches(node.labels)
            if not hit:
                continue
            if node.name in owner:
                where = f"NodeSet {ns.metadata.name} spec.nodeSelector"
                expected = (
                    f"selectors that do not overlap: node {node.name} is also in "
                    f"NodeSet {owner[node.name]}"
                )
                if problems is None:
                    raise InvalidValue(where, node.name, expected)
                problems.append(NodeProblem(node.name, "NodeSetOverlap", f"{where}: {expected}"))
                overlaps.add(node.name)
                continue
            owner[node.name] = ns.metadata.name
            chosen.append(node)
    reserved = {ns.metadata.name: ns.spec.memory_reserved_mib for ns in bundle.node_sets}
    cpus = {ns.metadata.name: ns.spec.cpus_reserved for ns in bundle.node_sets}
    for name, nodes in selected.items():
        kept = []
        for node in nodes:
            if node.name in overlaps:
                continue
            if node.cpus - cpus[name] < 1:
                where = f"Node {node.name} status.allocatable[cpu]"
                expected = (
                    f"more than the {cpus[name]} CPUs NodeSet {name} reserves (spec.cpusReserved)"
                )
                if problems is None:
                    raise InvalidValue(where, str(node.cpus), expected)
                problems.append(
                    NodeProblem(node.name, "CpusBelowReserved", f"{where} {node.cpus}: {expected}")
                )
                continue
            if node.memory_mib - reserved[name] < 1:
                where = f"Node {node.name} status.allocatable[memory]"
                expected = (
                    f"more than the {reserved[name]} MiB NodeSet {name} reserves "
                    "(spec.memoryReservedMiB)"
                )
                if problems is None:
                    raise InvalidValue(where, f"{node.memory_mib}Mi", expected)
                problems.append(
                    NodeProblem(
                        node.name, "MemoryBelowReserved", f"{where} {node.memory_mib}Mi: {expected}"
                    )
                )
                continue
            kept.append(node)
        selected[name] = kept
    return _with_held(selected, fleet, held)


def _with_held(
    selected: dict[str, list[FleetNode]],
    fleet: Sequence[FleetNode],
    held: Mapping[str, HeldNode],
) -> Membership:
    lines = {name: list(nodes) for name, nodes in selected.items()}
    unowned: list[FleetNode] = []
    if not held:
        return Membership(selected, lines, unowned)
    placed: dict[str, str] = {n.name: name for name, nodes in selected.items() for n in nodes}
    in_fleet: dict[str, FleetNode] = {n.name: n for n in fleet}
    for name in sorted(held):
        hold = held[name]
        if name in placed and (hold.node_set is None or placed[name] == hold.node_set):
            continue  # still where it was: only its shape may be held (config.py)
        if name in placed:
            # Selected by another NodeSet now: it stays in its own until idle.
            lines[placed[name]] = [n for n in lines[placed[name]] if n.name != name]
            selected[placed[name]] = [n for n in selected[placed[name]] if n.name != name]
        node = in_fleet.get(name) or _registered_node(hold)
        if hold.node_set in lines:
            lines[hold.node_set].append(node)
        else:
            unowned.append(node)
    return Membership(selected, lines, unowned)


def _registered_node(hold: HeldNode) -> FleetNode:
    """A held node whose Kubernetes Node is gone (deleted, being re-created): what
    Slurm registered, without labels."""
    where = f"Slurm node {hold.name}"
    return FleetNode(
        name=grammar.hostname(hold.name, f"{where} name"),
        gpus=hold.gpus,
        gpu_type=registered_gpu_type(hold, where),
        cpus=max(1, hold.cpus),
        memory_mib=hold.real_memory,
        labels={},
        ready=False,
    )


def registered_gpu_type(hold: HeldNode, where: str) -> SlurmToken | None:
    if not hold.gpu_type or not hold.gpus:
        return None
    return grammar.gres_type(hold.gpu_type, f"{where} gres")
