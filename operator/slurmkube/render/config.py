"""Desired state -> a fully validated Slurm configuration model.

This is the planning half of rendering: it decides which node is in which
NodeSet and partition, groups identical node lines (`render/node_lines.py`),
and converts every value into a `SlurmToken` with the path of the field it
came from. The templates then only lay the model out (`slurmkube.render.files`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from slurmkube import __version__
from slurmkube.api import grammar
from slurmkube.api.documents import ClusterBundle
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.api.models import KubeNode, PriorityWeights
from slurmkube.api.slurm_version import SlurmVersion
from slurmkube.render.context import SLURMD_TIMEOUT_SECONDS, RenderContext
from slurmkube.render.health_check import NodeHealthCheck, node_health_check
from slurmkube.render.hostlist import hostlist
from slurmkube.render.membership import HeldNode, NodeProblem, membership
from slurmkube.render.node_lines import GresLine, NodeLine, NodeShape, node_lines
from slurmkube.render.power import PowerSaving, power_saving
from slurmkube.render.scheduler import BackfillPlan, minutes, plan_backfill
from slurmkube.render.topologies import NamedTopologies, named_topologies, partition_topology
from slurmkube.topology.fleet import FleetNode, as_fleet
from slurmkube.topology.model import FleetTopology, build_topology


@dataclass(frozen=True, slots=True)
class PartitionLine:
    name: SlurmToken
    nodes: SlurmToken | None
    default: bool
    max_time: SlurmToken | None
    default_time: SlurmToken | None
    max_nodes: int | None
    priority_tier: int
    def_mem_per_cpu: int | None
    # Topology= (25.05+): the named topology of topology.yaml; None: the default.
    topology: SlurmToken | None = None


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    version: SlurmToken
    # The Slurm release the files are for (api/slurm_version.py).
    slurm_version: SlurmVersion
    cluster_name: SlurmToken
    controller_host: SlurmToken
    controller_addr: SlurmToken | None
    ctx_ports: tuple[int, int]
    paths: dict[str, SlurmToken]
    slurm_user: SlurmToken
    cgroups: bool
    accounting: bool
    accounting_host: SlurmToken | None
    accounting_port: int
    config_overrides: bool
    # AuthInfo=use_client_ids (RenderContext.client_ids).
    client_ids: bool
    topology_plugin: SlurmToken
    backfill: BackfillPlan
    scheduler_parameters: SlurmToken
    priority: PriorityWeights
    nodes: tuple[NodeLine, ...]
    gres: tuple[GresLine, ...]
    partitions: tuple[PartitionLine, ...]
    extra: tuple[SlurmToken, ...]
    # The allocation policy's keys (only with accounting): PriorityDecayHalfLife,
    # AccountingStorageEnforce/TRES, PreemptType/Mode.
    policy: tuple[tuple[SlurmToken, SlurmToken], ...]
    topology: FleetTopology
    # topology.yaml's topologies (read by 25.05+ only).
    topologies: NamedTopologies
    # NodeSet -> the nodes its selector picks (who should run slurmd).
    members: dict[str, tuple[SlurmToken, ...]]
    power: PowerSaving | None = None
    health_check: NodeHealthCheck | None = None
    # Held nodes (render/membership.py) whose line or NodeSet differs from what
    # Kubernetes alone would give: a change waits for them to drain.
    held: frozenset[str] = frozenset()
    # Every node on a NodeName line -> its shape.
    shape_of: Mapping[str, NodeShape] = field(default_factory=dict)
    problems: tuple[NodeProblem, ...] = ()
    slurmd_timeout: int = SLURMD_TIMEOUT_SECONDS

    @property
    def tracks_gpus(self) -> bool:
        """`AccountingStorageTRES=gres/gpu` (else CfgTRES, sacct and Slurm's metrics
        count no GPU): only with slurmdbd (24.11's slurmctld: "fatal: slurmdbd is
        required to run with TRES gres/gpu"), unless extraConfig or the policy set it."""
        keys = {str(k).lower() for k, _ in self.policy} | {_key(line) for line in self.extra}
        return self.accounting and "accountingstoragetres" not in keys


def _key(line: str) -> str:
    """A slurm.conf line's key, as Slurm compares keys (case-insensitively)."""
    return line.split("=", 1)[0].lower()


TOPOLOGY_PLUGINS = {"block": "topology/block", "tree": "topology/tree", "none": "topology/default"}


def _partitions(
    bundle: ClusterBundle,
    members: dict[str, list[FleetNode]],
    shape_of: Mapping[str, NodeShape],
    topologies: NamedTopologies | None,
) -> tuple[PartitionLine, ...]:
    """`topologies` is None where the release reads no topology.yaml (24.11)."""
    # Memory per CPU of each node, as its NodeName line states it (RealMemory).
    per_cpu = {name: shape.real_memory // shape.cpus for name, shape in shape_of.items()}
    lines = []
    for i, part in enumerate(bundle.cluster.spec.partitions):
        where = f"SlurmCluster {bundle.cluster.metadata.name} spec.partitions[{i}]"
        chosen: set[SlurmToken] = set()
        for j, ref in enumerate(part.node_sets):
            if ref not in members:
                raise InvalidValue(
                    f"{where}.nodeSets[{j}]", ref, f"one of the NodeSets {sorted(members)}"
                )
            chosen.update(n.name for n in members[ref])
        if part.node_selector is not None:
            matches = part.node_selector.matches
            selected = [n for nodes in members.values() for n in nodes if matches(n.labels)]
            chosen.update(n.name for n in selected)
        lines.append(
            PartitionLine(
                name=grammar.partition_name(part.name, f"{where}.name"),
                nodes=hostlist(chosen) if chosen else None,
                default=part.default,
                max_time=_optional(grammar.slurm_time, part.max_time, f"{where}.maxTime"),
                default_time=_optional(
                    grammar.slurm_time, part.default_time, f"{where}.defaultTime"
                ),
                max_nodes=part.max_nodes,
                priority_tier=part.priority_tier,
                # With CR_Core_Memory and no default a job gets its nodes' whole
                # memory, so GPU jobs could never share a node; give each CPU its
                # share of the smallest node's memory instead.
                def_mem_per_cpu=min(map(per_cpu.__getitem__, chosen), default=None),
                topology=partition_topology(topologies, part.topology, f"{where}.topology"),
            )
        )
    return tuple(lines)


def _optional(
    validator: Callable[[object, str], SlurmToken], value: str | None, where: str
) -> SlurmToken | None:
    return None if value is None else validator(value, where)


# The template sets it for every cluster already.
_ALWAYS_SET = frozenset({"PriorityType"})


def _policy_keys(
    bundle: ClusterBundle, extra: Sequence[SlurmToken], accounting: bool, where: str
) -> tuple[tuple[SlurmToken, SlurmToken], ...]:
    """The AllocationSource's keys, with accounting only (slurmctld cannot enforce
    associations without slurmdbd); an extraConfig line may not set one of them."""
    if not accounting:
        return ()
    keys = {str(k).lower() for k, _ in bundle.policy_keys}
    for i, line in enumerate(extra):
        if _key(line) in keys:
            raise InvalidValue(
                f"{where} spec.extraConfig[{i}]",
                line,
                f"a key the allocation policy does not set ({line.split('=', 1)[0]} comes "
                f"from {bundle.policy_source})",
            )
    return tuple((k, v) for k, v in bundle.policy_keys if k not in _ALWAYS_SET)


def plan_config(
    bundle: ClusterBundle,
    nodes: Sequence[KubeNode | FleetNode],
    ctx: RenderContext | None = None,
    *,
    held: Mapping[str, HeldNode] | None = None,
    problems: list[NodeProblem] | None = None,
) -> SlurmConfig:
    """The whole Slurm configuration for a cluster, validated, deterministic in node order.

    `held`: nodes kept as Slurm registered them (render/membership.py). With
    `problems`, a bad node is left out and reported there instead of failing
    the whole config. `nodes`: Kubernetes Nodes or fleet nodes converted once
    per change (`slurmkube.topology.fleet.fleet_node`), as the watcher passes.
    """
    ctx = ctx or RenderContext()
    spec = bundle.cluster.spec
    where = f"SlurmCluster {bundle.cluster.metadata.name}"
    held = held or {}
    members = membership(bundle, as_fleet(nodes), held, problems)
    lines = node_lines(bundle.node_sets, members, held, ctx)
    max_times = [minutes(p.max_time) for p in spec.partitions if p.max_time]
    longest = max((m for m in max_times if m is not None), default=None)
    backfill = plan_backfill(spec.scheduler.backfill, longest)
    paths = {
        key: grammar.file_path(getattr(ctx, key), f"context.{key}")
        for key in ("config_dir", "state_save_location", "slurmd_spool_dir", "log_dir", "run_dir")
    }
    in_node_sets = [
        *(n for ns in bundle.node_sets for n in members.lines[ns.metadata.name]),
        *members.unowned,
    ]
    topology = build_topology(in_node_sets, spec.topology)
    topologies = named_topologies(
        topology, spec.topology.plugin, (p.topology for p in spec.partitions)
    )
    slurm_version = bundle.cluster.slurm_version
    extra = tuple(
        grammar.config_line(line, f"{where} spec.extraConfig[{i}]")
        for i, line in enumerate(spec.extra_config)
    )
    policy = _policy_keys(bundle, extra, ctx.accounting_host is not None, where)
    return SlurmConfig(
        version=SlurmToken(__version__),
        slurm_version=slurm_version,
        cluster_name=grammar.cluster_name(
            bundle.cluster.slurm_cluster_name, f"{where} spec.clusterName (or metadata.name)"
        ),
        controller_host=grammar.hostname(ctx.controller_host, "context.controller_host"),
        controller_addr=_optional(grammar.address, ctx.controller_addr, "context.controller_addr"),
        ctx_ports=(ctx.slurmctld_port, ctx.slurmd_port),
        paths=paths,
        slurm_user=grammar.feature(ctx.slurm_user, "context.slurm_user"),
        cgroups=ctx.cgroups,
        accounting=ctx.accounting_host is not None,
        accounting_host=_optional(grammar.address, ctx.accounting_host, "context.accounting_host"),
        accounting_port=ctx.accounting_port,
        config_overrides=ctx.config_overrides,
        client_ids=ctx.client_ids,
        topology_plugin=SlurmToken(TOPOLOGY_PLUGINS[spec.topology.plugin]),
        backfill=backfill,
        scheduler_parameters=grammar.param_list(
            backfill.scheduler_parameters(), f"{where} spec.scheduler.backfill"
        ),
        priority=spec.scheduler.priority_weights,
        nodes=lines.nodes,
        gres=lines.gres,
        partitions=_partitions(
            bundle,
            members.lines,
            lines.shape_of,
            topologies if slurm_version.reads_topology_yaml else None,
        ),
        extra=extra,
        policy=policy,
        topology=topology,
        topologies=topologies,
        members={name: tuple(n.name for n in nodes) for name, nodes in members.selected.items()},
        power=power_saving(bundle.node_sets, members.lines, ctx),
        health_check=node_health_check(spec.health.node_check, ctx),
        held=lines.held,
        shape_of=lines.shape_of,
        problems=tuple(problems or ()),
    )
