"""Nodes changing hands, as this operator made them (`goodput.handovers`).

The bridge calls `lent` and `lease_ended` as it sets and removes a lease label,
the cluster reconcile `back` as it undrains a node: each moment is kept in
memory, the latest of each kind per node, for the live goodput exporter to time
transfers by,
and written as an Event on the node's SlurmCluster (in its namespace, where the
operator may write in either RBAC mode), for `slurmkube goodput --events` to
recompute a window from. A new leader has none: until a node's next handover
its exporter times it by its ticks, and `back` of a lease the previous leader
ended is not recorded.
"""

from __future__ import annotations

import time

from slurmkube.api import well_known as wk
from slurmkube.controllers.memory import State
from slurmkube.goodput.handovers import BACK, LEASE_ENDED, LENT, Handover
from slurmkube.kube.client import EventRecord, Kube, Manifest

# node -> its latest handover of each kind
LAST: dict[str, dict[str, Handover]] = {}
MESSAGES = {
    LENT: "lent to Workload {lease}",
    LEASE_ENDED: "lease ended; on its way back to Slurm",
    BACK: "back in Slurm (undrained after its lease)",
}


def lent(kube: Kube, cluster: Manifest, node: str, lease: str) -> None:
    _record(kube, cluster, Handover(time.time(), node, LENT, lease))


def lease_ended(kube: Kube, cluster: Manifest, node: str) -> None:
    last = _latest(node)
    lease = last.lease if last is not None else ""
    _record(kube, cluster, Handover(time.time(), node, LEASE_ENDED, lease))


def back(kube: Kube, cluster: Manifest, node: str) -> None:
    """Recorded only when this operator ended the node's lease: other undrains are
    not handovers."""
    last = _latest(node)
    if last is not None and last.kind == LEASE_ENDED:
        _record(kube, cluster, Handover(time.time(), node, BACK, last.lease))


def _latest(node: str) -> Handover | None:
    return max(LAST.get(node, {}).values(), key=lambda h: h.t, default=None)


def _record(kube: Kube, cluster: Manifest, handover: Handover) -> None:
    LAST.setdefault(handover.node, {})[handover.kind] = handover
    annotations = {wk.ANNOTATION_NODE: handover.node}
    if handover.lease:
        annotations[wk.ANNOTATION_LEASE] = handover.lease
    record = EventRecord(handover.t, handover.kind, State.settings.identity, annotations)
    message = f"{handover.node}: " + MESSAGES[handover.kind].format(lease=handover.lease)
    kube.event(cluster, handover.kind, message, record=record)
