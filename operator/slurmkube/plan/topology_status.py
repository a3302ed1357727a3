"""The topology conditions of a cluster's status: labels valid, topology.conf in force."""

from __future__ import annotations

import hashlib

from slurmkube.plan.model import Condition
from slurmkube.render.config import SlurmConfig
from slurmkube.render.files import RenderedConfig
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
    """What topology.conf holds: blocks for topology/block, switches for topology/tree."""
    digest = hashlib.sha256(rendered.files["topology.conf"].encode()).hexdigest()[:12]
    counts = {
        "topology/block": f"{len(config.topology.blocks)} blocks",
        "topology/tree": f"{len(config.topology.switches)} switches",
    }
    plugin = config.topology_plugin
    return f"topology.conf {digest} ({plugin}, {counts.get(plugin, 'empty')})"


def topology_applied(config_applied: Condition, summary: str) -> Condition:
    """TopologyApplied follows ConfigApplied: topology.conf is re-read by the same reconfigure."""
    if config_applied.status:
        return Condition("TopologyApplied", True, "Applied", f"{summary} in force")
    return Condition(
        "TopologyApplied", False, config_applied.reason, f"{summary}: {config_applied.message}"
    )
