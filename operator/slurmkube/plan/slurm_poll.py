"""What the 2 s poll of Slurm's nodes does for a cluster (pure).

The PodDisruptionBudget and the busy-pod admission policy guard slurmd pods
labelled `slurmkube.io/busy=true`; a label a reconcile sets lags a job start
by up to its resync (30 s), and an eviction in between passes. So every
cluster with slurmd pods is polled: one `GET /nodes/?update_time=` whose
answer, when no node changed, is an empty 304 at any fleet size. When nodes
changed, the poll reads them and patches the busy label of only the pods whose
label differs from what Slurm shows (`busy_labels`). An autoscaled cluster
also reconciles then: Slurm's power saving is no Kubernetes event. Any
cluster reconciles when Slurm stops or starts answering the poll, so its
Ready condition says so within a poll, not at the next resync (on real
kubelets nothing else may trigger one for 30 s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmkube.plan.removal import LabelledPod, RemovalNode, busy_labels


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
) -> PollStep:
    """`changed`: Slurm changed a node since the last read, or cannot say it did
    not; `slurm_nodes`: the nodes read then (None: not read, or Slurm silent);
    `answered`: Slurm answered this poll, `answered_before` the last one (None:
    no poll yet)."""
    flipped = answered_before is not None and answered != answered_before
    if not changed:
        return PollStep(reconcile=flipped)
    return PollStep(labels=busy_labels(pods, slurm_nodes), reconcile=autoscaling or flipped)
