"""Nodes changing hands, as this operator made them (`goodput.handovers`).

The bridge sets and removes lease labels through `lent` and `lease_ended`, the
cluster reconcile undrains through `back`: each moment is kept in memory, the
latest of each kind per node, for the live goodput exporter to time transfers
by, and written as an Event on the node's SlurmCluster (in its namespace, where the
operator may write in either RBAC mode), for `slurmkube goodput --events` to
recompute a window from. A new leader has none: until a node's next handover
its exporter times it by its ticks, and `back` of a lease the previous leader
ended is not recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from slurmkube.api import well_known as wk
from slurmkube.controllers.memory import State
from slurmkube.goodput.handovers import BACK, LEASE_ENDED, LENT, Handover, latest
from slurmkube.kube.client import EventRecord, Kube, Manifest

# node -> its latest handover of each kind
LAST: dict[str, dict[str, Handover]] = {}
Action = Callable[[], None]
MESSAGES = {
    LENT: "lent to Workload {lease}",
    LEASE_ENDED: "lease ended; on its way back to Slurm",
    BACK: "back in Slurm (undrained after its lease)",
}


def lent(kube: Kube, cluster: Manifest, node: str, lease: str, label: Action) -> None:
    handover = _stamp(Handover(time.time(), node, LENT, lease))
    label()
    _publish(kube, cluster, handover)


def lease_ended(kube: Kube, cluster: Manifest, node: str, unlabel: Action) -> None:
    last = _latest(node)
    lease = last.lease if last is not None else ""
    handover = _stamp(Handover(time.time(), node, LEASE_ENDED, lease))
    unlabel()
    _publish(kube, cluster, handover)


def back(kube: Kube, cluster: Manifest, node: str, undrain: Callable[[], bool]) -> bool:
    """`undrain()`, a handover when this operator ended the node's lease (other
    undrains are not); what `undrain` returned."""
    last = _latest(node)
    if last is None or last.kind != LEASE_ENDED:
        return undrain()
    handover = _stamp(Handover(time.time(), node, BACK, last.lease))
    if not undrain():
        del LAST[node][BACK]  # nothing was undrained: no handover
        return False
    _publish(kube, cluster, handover)
    return True


def _latest(node: str) -> Handover | None:
    return latest(LAST.get(node, {}))


def _stamp(handover: Handover) -> Handover:
    """Kept before the action that makes it: the exporter may see the action's effect
    (the label in the Node cache, the node up in Slurm) before the call returns."""
    LAST.setdefault(handover.node, {})[handover.kind] = handover
    return handover


def _publish(kube: Kube, cluster: Manifest, handover: Handover) -> None:
    annotations = {wk.ANNOTATION_NODE: handover.node}
    if handover.lease:
        annotations[wk.ANNOTATION_LEASE] = handover.lease
    record = EventRecord(handover.t, handover.kind, State.settings.identity, annotations)
    message = f"{handover.node}: " + MESSAGES[handover.kind].format(lease=handover.lease)
    kube.event(cluster, handover.kind, message, record=record)
