"""What the 2 s poll of Slurm's nodes does for a cluster (pure).

The PodDisruptionBudget and the busy-pod admission policy guard slurmd pods
labelled `slurmkube.io/busy=true`; a label a reconcile sets lags a job start
by up to its resync (30 s), and an eviction in between passes. So every
cluster with slurmd pods is polled. A node turns busy or idle only as a job
starts or ends, and Slurm's power saving resumes nodes for a job, so the
poll first asks whether any job changed (`GET /jobs/?update_time=`, the
same cost at any fleet size). Only then, or when a node read is due
(`NodeReads`: a node between power states, or an idle node whose SuspendTime
runs out; or a node whose slurmd the last reconcile awaits), does it ask
whether a node changed: `GET /nodes/?update_time=`, whose empty 304 still
costs slurmctld time in proportion to the fleet (it sets every node's select
data before it compares times, proc_req.c). When nodes changed, the poll
reads them and patches the busy label of only the pods whose label differs
from what Slurm shows (`busy_labels`). An autoscaled cluster also reconciles
then: Slurm's power saving is no Kubernetes event. Nor are a job's end and a
slurmd's registration, so any cluster reconciles when a node whose slurmd pod
goes once idle (a scale-in, a rollout) is, and when an awaited slurmd
registers (a scale-out: the status counts it then). Any cluster reconciles
when Slurm stops or starts answering the poll, so its Ready condition says so
within a poll, not at the next resync (on real kubelets nothing else may
trigger one for 30 s). Other node changes (an admin's drain, a slurmd lost)
are read by the cluster's reconcile: its resync, or the event behind it.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from slurmkube.plan.autoscale import POWER_DOWN_REQUESTED, RESUMING, SUSPENDING, UP
from slurmkube.plan.model import SlurmNodeView
from slurmkube.plan.removal import LabelledPod, RemovalNode, busy_labels

# How long past its SuspendTime an idle node is still expected to power down:
# slurmctld's power saving looks every 10 s and SuspendRate may hold it back.
# A node idle longer (kept up by SuspendExcNodes' count) is no longer waited on.
SUSPEND_GRACE_S: Final = 30.0
_TRANSITIONS: Final = frozenset({RESUMING, POWER_DOWN_REQUESTED, SUSPENDING})


@dataclass(frozen=True, slots=True)
class NodeReads:
    """When the poll reads Slurm's nodes although no job changed."""

    # Every poll: no node read yet, or a node between power states.
    always: bool = True
    # When each idle powered-up node's SuspendTime runs out (epoch seconds, sorted).
    suspends: tuple[float, ...] = ()

    def due(self, now: float) -> bool:
        """A read is due: `always`, or some node's SuspendTime ran out within the grace."""
        if self.always:
            return True
        first = bisect.bisect_left(self.suspends, now - SUSPEND_GRACE_S)
        return first < len(self.suspends) and self.suspends[first] <= now


def node_reads(
    nodes: Mapping[str, SlurmNodeView] | None, suspend_time: int | None, now: float
) -> NodeReads:
    """From the nodes just read: `suspend_time` is slurm.conf's SuspendTime (None:
    no power saving, so job changes alone move a node)."""
    if nodes is None:
        return NodeReads()
    if suspend_time is None:
        return NodeReads(always=False)
    if any(v.power in _TRANSITIONS for v in nodes.values()):
        return NodeReads()
    ends = {
        v.last_busy + suspend_time
        for v in nodes.values()
        if v.power == UP and not v.busy and v.last_busy
    }
    waited = sorted(t for t in ends if t >= now - SUSPEND_GRACE_S)
    return NodeReads(always=False, suspends=tuple(waited))


@dataclass(frozen=True, slots=True)
class PollStep:
    # pod -> the busy label it gets.
    labels: Mapping[str, bool] = field(default_factory=dict)
    reconcile: bool = False


def polled(*, autoscaling: bool, pods: int, creating: int) -> bool:
    """Whether the cluster is polled: it autoscales, or has (or is making) slurmd pods."""
    return autoscaling or pods > 0 or creating > 0


def plan_poll(
    *,
    autoscaling: bool,
    changed: bool,
    pods: Sequence[LabelledPod],
    slurm_nodes: Mapping[str, RemovalNode] | None,
    answered: bool = True,
    answered_before: bool | None = None,
    go_when_idle: Collection[str] = (),
    awaited: Collection[str] = (),
) -> PollStep:
    """`changed`: Slurm changed a node since the last read, or cannot say it did
    not; `slurm_nodes`: the nodes read then (None: not read, or Slurm silent);
    `answered`: Slurm answered this poll, `answered_before` the last one (None:
    no poll yet); `go_when_idle`: the last plan's drained nodes whose pod goes
    once their job ends (plan.model.Plan.pods_go_when_idle); `awaited`: its nodes
    whose slurmd Slurm did not hear yet (plan.model.Plan.awaited)."""
    flipped = answered_before is not None and answered != answered_before
    if not changed:
        return PollStep(reconcile=flipped)
    # A waited-on node is idle (or gone from Slurm): its pod may go now, not at the resync.
    went_idle = slurm_nodes is not None and any(
        n not in slurm_nodes or not slurm_nodes[n].busy for n in go_when_idle
    )
    # A new slurmd registered: the status counts it now, not at the resync.
    came_up = slurm_nodes is not None and any(
        n in slurm_nodes and slurm_nodes[n].responding for n in awaited
    )
    return PollStep(
        labels=busy_labels(pods, slurm_nodes),
        reconcile=autoscaling or flipped or went_idle or came_up,
    )
