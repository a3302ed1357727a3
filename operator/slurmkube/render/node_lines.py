"""slurm.conf's NodeName lines and gres.conf's lines: nodes grouped by shape (pure).

A node's line states what Kubernetes gives it (allocatable, less what its
NodeSet reserves), or for a held node what Slurm registered
(`render/membership.py`): slurmctld fails a running job whose node's cores or
GRES change on reconfigure. Nodes of one shape share a line, named by hostlist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmkube.api import grammar
from slurmkube.api.grammar import SlurmToken
from slurmkube.api.models import NodeSet
from slurmkube.render.context import RenderContext
from slurmkube.render.hostlist import hostlist
from slurmkube.render.membership import HeldNode, Membership, registered_gpu_type
from slurmkube.topology.fleet import FleetNode, sort_key


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Everything on a NodeName line but the names: nodes with one shape share a line."""

    cpus: int
    real_memory: int
    gres: SlurmToken | None
    features: SlurmToken | None
    weight: int
    port: int | None
    # Per-node ports cannot share a line; the node's name keeps it apart.
    alone: str = ""


@dataclass(frozen=True, slots=True)
class NodeLine:
    names: SlurmToken
    shape: NodeShape


@dataclass(frozen=True, slots=True)
class NodeLines:
    nodes: tuple[NodeLine, ...]
    gres: tuple[GresLine, ...]
    shape_of: dict[str, NodeShape]
    held: frozenset[str]


@dataclass(frozen=True, slots=True)
class GresLine:
    names: SlurmToken
    gpu_type: SlurmToken | None
    files: SlurmToken


def _gres(gpu_type: SlurmToken | None, gpus: int) -> SlurmToken | None:
    if not gpus:
        return None
    parts = [grammar.gres_type("gpu", "gres")]
    if gpu_type:
        parts.append(gpu_type)
    return SlurmToken(f"{grammar.joined(parts, ':')}:{gpus}")


def node_lines(
    node_sets: Sequence[NodeSet],
    members: Membership,
    held: Mapping[str, HeldNode],
    ctx: RenderContext,
) -> NodeLines:
    """slurm.conf's NodeName lines, one per shape, and gres.conf's lines, each in
    hostlist order; which held nodes kept a line Kubernetes alone would not give."""
    groups: dict[NodeShape, list[SlurmToken]] = {}
    gres_groups: dict[tuple[SlurmToken | None, int], list[SlurmToken]] = {}
    shape_of: dict[str, NodeShape] = {}
    kept: list[str] = []
    owned = [(ns, members.lines[ns.metadata.name]) for ns in node_sets]
    for ns, nodes in [*owned, (None, members.unowned)]:
        where = f"NodeSet {ns.metadata.name}" if ns else "held nodes"
        ns_features = (
            [
                grammar.feature(f, f"{where} spec.features[{i}]")
                for i, f in enumerate(ns.spec.features)
            ]
            if ns
            else []
        )
        reserved = ns.spec.memory_reserved_mib if ns else 0
        cpus_reserved = ns.spec.cpus_reserved if ns else 0
        chosen = {n.name for n in members.selected[ns.metadata.name]} if ns else set()
        # Nodes of one NodeSet mostly share a shape; build each shape, and find
        # its group, once.
        shapes: dict[
            tuple[int, int, SlurmToken | None, int], tuple[NodeShape, list[SlurmToken]]
        ] = {}
        for node in nodes:
            port = ctx.node_ports.get(node.name)
            key, changed = _line_values(node, held.get(node.name), (cpus_reserved, reserved), where)
            if changed or (node.name in held and node.name not in chosen):
                kept.append(node.name)
            cpus, memory, gpu_type, gpus = key
            found = shapes.get(key) if port is None else None
            if found is None:
                features = list(ns_features)
                if gpu_type and gpu_type not in features:
                    features.append(gpu_type)
                made = NodeShape(
                    cpus=cpus,
                    real_memory=memory,
                    gres=_gres(gpu_type, gpus),
                    features=grammar.joined(sorted(features)) if features else None,
                    weight=ns.spec.weight if ns else 1,
                    port=port,
                    alone=node.name if port is not None else "",
                )
                found = (made, groups.setdefault(made, []))
                if port is None:
                    shapes[key] = found
            shape, names = found
            names.append(node.name)
            shape_of[node.name] = shape
            if gpus:
                gres_groups.setdefault((gpu_type, gpus), []).append(node.name)
    lines = [NodeLine(names=hostlist(names), shape=shape) for shape, names in groups.items()]
    lines.sort(key=lambda line: sort_key(line.names))
    device_dir = grammar.file_path(ctx.gpu_device_dir, "context.gpu_device_dir")
    gres_lines = [
        GresLine(
            names=hostlist(names),
            gpu_type=gpu_type,
            files=SlurmToken(
                f"{device_dir}/nvidia0" if count == 1 else f"{device_dir}/nvidia[0-{count - 1}]"
            ),
        )
        for (gpu_type, count), names in gres_groups.items()
    ]
    gres_lines.sort(key=lambda line: sort_key(line.names))
    return NodeLines(tuple(lines), tuple(gres_lines), shape_of, frozenset(kept))


def _line_values(
    node: FleetNode, hold: HeldNode | None, reserved: tuple[int, int], where: str
) -> tuple[tuple[int, int, SlurmToken | None, int], bool]:
    """(CPUs, RealMemory, GRES type, GPUs) of a node's line, and whether a hold kept
    them from what Kubernetes now gives (a held node of unknown shape: never)."""
    wanted = (
        max(1, node.cpus - reserved[0]),
        max(1, node.memory_mib - reserved[1]),
        node.gpu_type,
        node.gpus,
    )
    if hold is None or not hold.shape_known:
        return wanted, False
    registered = (hold.cpus, hold.real_memory, registered_gpu_type(hold, where), hold.gpus)
    return registered, registered != wanted
