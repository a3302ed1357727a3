"""Drains slurmkube owns, kept apart from drains it does not.

A drain lets running jobs finish and starts nothing new (scontrol(1),
State=DRAIN); the node is DRAINED once idle. Reasons slurmkube writes start
with `DRAIN_REASON_PREFIX`, so an admin's drain ("bad GPU, RMA") is never
cleared by the operator. Both functions take any `SlurmClient`.

`resume_if_ours` reads the reason, then undrains: Slurm has no
compare-and-set, so an admin who re-drains in between those two calls loses
that drain. The window is one round trip.
"""

from __future__ import annotations

import logging

from slurmkube.slurm.arguments import drain_reason, is_ours
from slurmkube.slurm.models import NodeStateChange
from slurmkube.slurm.protocol import SlurmClient

__all__ = ["down", "drain", "is_ours", "resume_if_ours"]

log = logging.getLogger(__name__)


def drain(client: SlurmClient, node: str, reason: str) -> None:
    """Drain `node` with `reason` under slurmkube's prefix (added if missing)."""
    client.update_node_state(node, NodeStateChange.DRAIN, drain_reason(reason))
    log.info("drained node=%s", node)


def down(client: SlurmClient, node: str, reason: str) -> None:
    """Set `node` DOWN with `reason` under slurmkube's prefix: slurmctld ends its
    jobs as on a node failure (scontrol(1), State=DOWN)."""
    client.update_node_state(node, NodeStateChange.DOWN, drain_reason(reason))
    log.info("set down node=%s", node)


def resume_if_ours(client: SlurmClient, node: str) -> bool:
    """Undrain `node` if slurmkube drained it; True if it did.

    UNDRAIN, not RESUME: it clears the drain only, so a node that is also DOWN
    (slurmd gone) stays DOWN until Slurm sees it again.
    """
    current = client.get_node(node)
    if not current.drain or not is_ours(current.reason):
        return False
    client.update_node_state(node, NodeStateChange.UNDRAIN)
    log.info("undrained node=%s", node)
    return True
