"""slurm.conf(5) power saving: on while any NodeSet is autoscaled (plan.autoscale)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurmkube.api import grammar
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.api.models import NodeSet
from slurmkube.render.context import RenderContext
from slurmkube.render.hostlist import hostlist
from slurmkube.topology.fleet import FleetNode


@dataclass(frozen=True, slots=True)
class PowerSaving:
    """slurm.conf(5) power saving, on while any NodeSet is autoscaled (plan.autoscale)."""

    program: SlurmToken
    suspend_time: int
    suspend_timeout: int
    resume_timeout: int
    # Nodes Slurm must never power down: every node of a NodeSet driven by
    # `replicas`, and `<nodes>:<minNodes>` per autoscaled NodeSet.
    exclude: SlurmToken | None


def power_saving(
    node_sets: Sequence[NodeSet], members: dict[str, list[FleetNode]], ctx: RenderContext
) -> PowerSaving | None:
    scaled = [ns for ns in node_sets if ns.spec.autoscaling.enabled]
    if not scaled:
        return None
    fixed = [
        n.name
        for ns in node_sets
        if not ns.spec.autoscaling.enabled
        for n in members[ns.metadata.name]
    ]
    counted: list[SlurmToken] = []
    for ns in scaled:
        names = [n.name for n in members[ns.metadata.name]]
        minimum = min(ns.spec.autoscaling.min_nodes, len(names))
        if not minimum:
            continue
        nodes = hostlist(names)
        # Slurm splits a counted SuspendExcNodes at every comma (power_save.c
        # _parse_exc_nodes), so a counted set must be one comma-free range.
        if "," in nodes:
            raise InvalidValue(
                f"NodeSet {ns.metadata.name} spec.autoscaling.minNodes",
                str(minimum),
                f"0, or a NodeSet whose node names form one range (they compress to {nodes})",
            )
        counted.append(SlurmToken(f"{nodes}:{minimum}"))
    # With counts, every comma separates sets, so fixed nodes are listed one by one.
    parts = [*fixed, *counted] if counted else ([hostlist(fixed)] if fixed else [])
    spec = [ns.spec.autoscaling for ns in scaled]
    return PowerSaving(
        program=grammar.file_path(ctx.power_program, "context.power_program"),
        suspend_time=min(a.suspend_time_seconds for a in spec),
        suspend_timeout=max(a.suspend_timeout_seconds for a in spec),
        resume_timeout=max(a.resume_timeout_seconds for a in spec),
        exclude=grammar.joined(parts) if parts else None,
    )
