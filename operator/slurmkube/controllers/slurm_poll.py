"""The 2 s poll of a cluster's Slurm nodes (plan/slurm_poll.py decides): read
what changed, patch the busy labels that differ from Slurm."""

from __future__ import annotations

from slurmkube.controllers.apply import patch_busy_labels
from slurmkube.controllers.clients import SlurmClients
from slurmkube.controllers.observe import NodesRead, read_changed_nodes
from slurmkube.kube.client import Kube
from slurmkube.plan.model import PodView
from slurmkube.plan.slurm_poll import PollStep, plan_poll


def poll_slurm(
    kube: Kube,
    clients: SlurmClients,
    key: tuple[str, str],
    pods: tuple[PodView, ...],
    *,
    since: int,
    autoscaling: bool,
    answered_before: bool | None,
) -> tuple[PollStep, NodesRead]:
    """The step taken (its labels patched) and the read it was planned from."""
    read = read_changed_nodes(kube, *key, clients, since)
    step = plan_poll(
        autoscaling=autoscaling,
        changed=read.changed,
        pods=pods,
        slurm_nodes=read.nodes,
        answered=read.answered,
        answered_before=answered_before,
    )
    patch_busy_labels(kube, key[0], step.labels)
    return step, read
