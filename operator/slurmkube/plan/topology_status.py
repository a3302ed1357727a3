"""The topology conditions of a cluster's status: labels valid, the topology file in force."""

from __future__ import annotations

import hashlib

from slurmkube.plan.model import Condition
from slurmkube.render.config import SlurmConfig
from slurmkube.render.files import TOPOLOGY_YAML, RenderedConfig, topology_file_name
from slurmkube.render.topologies import NETWORK, NVLINK
from slurmkube.topology.model import FleetTopology


def topology_conditions(topology: FleetTopology) -> tuple[Condition, ...]:
    problems = len(topology.problems)
    missing = len(topology.nodes_without_domain)
    small = len(topology.undersized_blocks)
    message = (
        f"{len(topology.blocks)} blocks, {len(topology.switches)} switches; "
        f"{missing} nodes without an NVLink domain, {small} domains below the base block "
        f"size, {problems} invalid label values"
    )
    return (Condition("TopologyValid", problems == 0 and small == 0, "Labels", message),)


def topology_summary(config: SlurmConfig, rendered: RenderedConfig) -> str:
    """What the topology file holds: blocks for topology/block, switches for
    topology/tree; topology.yaml (25.05+) names its topologies, the default first."""
    name = topology_file_name(config)
    digest = hashlib.sha256(rendered.files[name].encode()).hexdigest()[:12]
    counts = {
        "topology/block": f"{len(config.topology.blocks)} blocks",
        "topology/tree": f"{len(config.topology.switches)} switches",
        NVLINK: f"{len(config.topology.blocks)} blocks",
        NETWORK: f"{len(config.topology.switches)} switches",
    }
    if name == TOPOLOGY_YAML:
        named = config.topologies
        order = [named.default, *(n for n in named.names if n != named.default)]
        parts = [f"{n}: {counts.get(n, 'flat')}" for n in order]
        return f"{name} {digest} (default {', '.join(parts)})"
    plugin = config.topology_plugin
    return f"{name} {digest} ({plugin}, {counts.get(plugin, 'empty')})"


def topology_applied(config_applied: Condition, summary: str) -> Condition:
    """TopologyApplied follows ConfigApplied: one reconfigure re-reads the topology file."""
    if config_applied.status:
        return Condition("TopologyApplied", True, "Applied", f"{summary} in force")
    return Condition(
        "TopologyApplied", False, config_applied.reason, f"{summary}: {config_applied.message}"
    )
