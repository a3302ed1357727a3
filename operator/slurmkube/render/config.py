"""Desired state -> a fully validated Slurm configuration model.

This is the planning half of rendering: it decides which node is in which
NodeSet and partition, groups identical node lines, and converts every value
into a `SlurmToken` with the path of the field it came from. The templates
then only lay the model out (`slurmkube.render.files`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurmkube import __version__
from slurmkube.api import grammar
from slurmkube.api.documents import ClusterBundle
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.api.models import KubeNode, NodeSet, PriorityWeights
from slurmkube.render.context import RenderContext
from slurmkube.render.hostlist import compress
from slurmkube.render.scheduler import BackfillPlan, minutes, plan_backfill
from slurmkube.topology.fleet import FleetNode, fleet_node, sort_key
from slurmkube.topology.model import FleetTopology, build_topology


def hostlist(names: Iterable[SlurmToken]) -> SlurmToken:
    """Compressing validated hostnames only adds `[`, `]`, `-`, `,` and digits."""
    items = list(names)
    for name in items:
        if not isinstance(name, SlurmToken):
            raise TypeError(f"refusing to compress unvalidated {name!r}")
    return SlurmToken(compress(items))


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
class GresLine:
    names: SlurmToken
    gpu_type: SlurmToken | None
    files: SlurmToken


@dataclass(frozen=True, slots=True)
class PartitionLine:
    name: SlurmToken
    nodes: SlurmToken | None
    default: bool
    max_time: SlurmToken | None
    default_time: SlurmToken | None
    max_nodes: int | None
    priority_tier: int


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    version: SlurmToken
    cluster_name: SlurmToken
    controller_host: SlurmToken
    controller_addr: SlurmToken | None
    ctx_ports: tuple[int, int]
    paths: dict[str, SlurmToken]
    slurm_user: SlurmToken
    cgroups: bool
    accounting: bool
    config_overrides: bool
    topology_plugin: SlurmToken
    backfill: BackfillPlan
    scheduler_parameters: SlurmToken
    priority: PriorityWeights
    nodes: tuple[NodeLine, ...]
    gres: tuple[GresLine, ...]
    partitions: tuple[PartitionLine, ...]
    extra: tuple[SlurmToken, ...]
    topology: FleetTopology
    members: dict[str, tuple[SlurmToken, ...]]


_TOPOLOGY_PLUGINS = {"block": "topology/block", "tree": "topology/tree", "none": "topology/default"}


def _membership(bundle: ClusterBundle, nodes: Sequence[KubeNode]) -> dict[str, list[KubeNode]]:
    """Which Kubernetes nodes each NodeSet selects; a node runs one slurmd, so in one set."""
    owner: dict[str, str] = {}
    members: dict[str, list[KubeNode]] = {ns.metadata.name: [] for ns in bundle.node_sets}
    cluster = bundle.cluster.metadata.name
    for ns in bundle.node_sets:
        if ns.spec.cluster_ref != cluster:
            raise InvalidValue(
                f"NodeSet {ns.metadata.name} spec.clusterRef",
                ns.spec.cluster_ref,
                f"the SlurmCluster in this bundle ({cluster!r})",
            )
        for node in nodes:
            if ns.spec.node_selector.matches(node.metadata.labels):
                name = node.metadata.name
                if name in owner:
                    raise InvalidValue(
                        f"NodeSet {ns.metadata.name} spec.nodeSelector",
                        name,
                        f"selectors that do not overlap: node {name} is also in "
                        f"NodeSet {owner[name]}",
                    )
                owner[name] = ns.metadata.name
                members[ns.metadata.name].append(node)
    return members


def _node_lines(
    node_sets: Sequence[NodeSet],
    fleet: dict[str, list[FleetNode]],
    ctx: RenderContext,
) -> tuple[tuple[NodeLine, ...], tuple[GresLine, ...]]:
    groups: dict[NodeShape, list[SlurmToken]] = {}
    gres_groups: dict[tuple[SlurmToken | None, int], list[SlurmToken]] = {}
    for ns in node_sets:
        ns_features = [
            grammar.feature(f, f"NodeSet {ns.metadata.name} spec.features[{i}]")
            for i, f in enumerate(ns.spec.features)
        ]
        for node in fleet[ns.metadata.name]:
            features = list(ns_features)
            if node.gpu_type and node.gpu_type not in features:
                features.append(node.gpu_type)
            gres = None
            if node.gpus:
                parts = [grammar.gres_type("gpu", "gres")]
                if node.gpu_type:
                    parts.append(node.gpu_type)
                gres = SlurmToken(f"{grammar.joined(parts, ':')}:{node.gpus}")
                gres_groups.setdefault((node.gpu_type, node.gpus), []).append(node.name)
            port = ctx.node_ports.get(node.name)
            shape = NodeShape(
                cpus=node.cpus,
                real_memory=node.memory_mib,
                gres=gres,
                features=grammar.joined(sorted(features)) if features else None,
                weight=ns.spec.weight,
                port=port,
                alone=node.name if port is not None else "",
            )
            groups.setdefault(shape, []).append(node.name)
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
    return tuple(lines), tuple(gres_lines)


def _partitions(
    bundle: ClusterBundle, fleet: dict[str, list[FleetNode]], nodes_by_name: dict[str, KubeNode]
) -> tuple[PartitionLine, ...]:
    lines = []
    known = set(fleet)
    for i, part in enumerate(bundle.cluster.spec.partitions):
        where = f"SlurmCluster {bundle.cluster.metadata.name} spec.partitions[{i}]"
        chosen: set[SlurmToken] = set()
        for j, ref in enumerate(part.node_sets):
            if ref not in known:
                raise InvalidValue(
                    f"{where}.nodeSets[{j}]", ref, f"one of the NodeSets {sorted(known)}"
                )
            chosen.update(n.name for n in fleet[ref])
        if part.node_selector is not None:
            chosen.update(
                n.name
                for members in fleet.values()
                for n in members
                if part.node_selector.matches(nodes_by_name[n.name].metadata.labels)
            )
        lines.append(
            PartitionLine(
                name=grammar.partition_name(part.name, f"{where}.name"),
                nodes=hostlist(chosen) if chosen else None,
                default=part.default,
                max_time=grammar.slurm_time(part.max_time, f"{where}.maxTime")
                if part.max_time
                else None,
                default_time=grammar.slurm_time(part.default_time, f"{where}.defaultTime")
                if part.default_time
                else None,
                max_nodes=part.max_nodes,
                priority_tier=part.priority_tier,
            )
        )
    return tuple(lines)


def plan_config(
    bundle: ClusterBundle, nodes: Sequence[KubeNode], ctx: RenderContext | None = None
) -> SlurmConfig:
    """The whole Slurm configuration for a cluster, validated, deterministic in node order."""
    ctx = ctx or RenderContext()
    spec = bundle.cluster.spec
    where = f"SlurmCluster {bundle.cluster.metadata.name}"
    members = _membership(bundle, nodes)
    reserved = {ns.metadata.name: ns.spec.memory_reserved_mib for ns in bundle.node_sets}
    fleet = {
        name: sorted((fleet_node(n, reserved[name]) for n in kube), key=lambda f: sort_key(f.name))
        for name, kube in members.items()
    }
    all_fleet = [n for ns in bundle.node_sets for n in fleet[ns.metadata.name]]
    node_lines, gres_lines = _node_lines(bundle.node_sets, fleet, ctx)
    nodes_by_name = {n.metadata.name: n for n in nodes}
    partitions = _partitions(bundle, fleet, nodes_by_name)
    max_times = [minutes(p.max_time) for p in spec.partitions if p.max_time]
    longest = max((m for m in max_times if m is not None), default=None)
    backfill = plan_backfill(spec.scheduler.backfill, longest)
    paths = {
        key: grammar.file_path(value, f"context.{key}")
        for key, value in (
            ("config_dir", ctx.config_dir),
            ("state_save_location", ctx.state_save_location),
            ("slurmd_spool_dir", ctx.slurmd_spool_dir),
            ("log_dir", ctx.log_dir),
            ("run_dir", ctx.run_dir),
        )
    }
    return SlurmConfig(
        version=SlurmToken(__version__),
        cluster_name=grammar.cluster_name(
            bundle.cluster.slurm_cluster_name, f"{where} spec.clusterName (or metadata.name)"
        ),
        controller_host=grammar.hostname(ctx.controller_host, "context.controller_host"),
        controller_addr=_address(ctx.controller_addr, "context.controller_addr"),
        ctx_ports=(ctx.slurmctld_port, ctx.slurmd_port),
        paths=paths,
        slurm_user=grammar.feature(ctx.slurm_user, "context.slurm_user"),
        cgroups=ctx.cgroups,
        accounting=False,  # slurmdbd arrives with the operator's accounting spec
        config_overrides=ctx.config_overrides,
        topology_plugin=SlurmToken(_TOPOLOGY_PLUGINS[spec.topology.plugin]),
        backfill=backfill,
        scheduler_parameters=grammar.param_list(
            backfill.scheduler_parameters(), f"{where} spec.scheduler.backfill"
        ),
        priority=spec.scheduler.priority_weights,
        nodes=node_lines,
        gres=gres_lines,
        partitions=partitions,
        extra=tuple(
            grammar.config_line(line, f"{where} spec.extraConfig[{i}]")
            for i, line in enumerate(spec.extra_config)
        ),
        topology=build_topology(all_fleet, spec.topology),
        members={name: tuple(n.name for n in f) for name, f in fleet.items()},
    )


def _address(value: str | None, where: str) -> SlurmToken | None:
    return None if value is None else grammar.address(value, where)
