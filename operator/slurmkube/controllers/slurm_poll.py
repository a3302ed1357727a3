"""The 2 s poll of a cluster's Slurm nodes (plan/slurm_poll.py decides): ask what
changed, read the nodes only when they may have, patch the busy labels that
differ from Slurm."""

from __future__ import annotations

from dataclasses import dataclass

from slurmkube.api.models import SlurmCluster, from_object
from slurmkube.controllers.apply import patch_busy_labels
from slurmkube.controllers.clients import SlurmClients
from slurmkube.controllers.observe import API, slurm_view
from slurmkube.kube.client import Kube
from slurmkube.plan.model import PodView, SlurmNodeView
from slurmkube.plan.slurm_poll import PollStep, plan_poll
from slurmkube.slurm.errors import SlurmError


@dataclass(frozen=True, slots=True)
class NodesRead:
    """The poll's read of Slurm's nodes (plan/slurm_poll.py)."""

    # A node changed since the last read, or Slurm cannot say none did.
    changed: bool
    # The nodes, read when they changed (None: not read, or Slurm silent).
    nodes: dict[str, SlurmNodeView] | None = None
    # slurmctld's update_time of this node read (0: none).
    read_at: int = 0
    # Slurm answered (False: no client yet, or an error reading it).
    answered: bool = True
    # slurmctld's update_time of the last job probe that saw a change (the next asks since).
    jobs_at: int = 0


def read_changed_nodes(
    kube: Kube,
    namespace: str,
    name: str,
    clients: SlurmClients,
    since: int,
    *,
    jobs_since: int,
    nodes_due: bool,
) -> NodesRead:
    """Slurm's nodes if any changed since `since` (the last full read's
    update_time). Unless `nodes_due`, first whether a job changed since
    `jobs_since`: a call whose cost grows with neither the fleet nor the queue,
    where the node probe's grows with the fleet; the full list only when a node
    did change."""
    cluster_obj = kube.get(API, "SlurmCluster", name, namespace)
    if cluster_obj is None:
        return NodesRead(True)
    slurm = clients.rest(kube, from_object(SlurmCluster, cluster_obj))
    if slurm is None:
        return NodesRead(True, answered=False)
    jobs_at = jobs_since
    try:
        if since and not nodes_due:
            answered_at = slurm.jobs_changed_since(jobs_since)
            if not answered_at:
                return NodesRead(False, jobs_at=jobs_since)
            jobs_at = answered_at
        if since and not slurm.nodes_changed_since(since):
            return NodesRead(False, jobs_at=jobs_at)
        listed = slurm.node_list()
    except SlurmError:
        return NodesRead(True, answered=False, jobs_at=jobs_since)
    nodes = {n.name: slurm_view(n) for n in listed.nodes}
    return NodesRead(True, nodes, listed.update_time, jobs_at=jobs_at)


def poll_slurm(
    kube: Kube,
    clients: SlurmClients,
    key: tuple[str, str],
    pods: tuple[PodView, ...],
    *,
    since: int,
    autoscaling: bool,
    answered_before: bool | None,
    jobs_since: int,
    nodes_due: bool,
    go_when_idle: frozenset[str] = frozenset(),
    awaited: frozenset[str] = frozenset(),
) -> tuple[PollStep, NodesRead]:
    """The step taken (its labels patched) and the read it was planned from."""
    read = read_changed_nodes(
        kube, *key, clients, since, jobs_since=jobs_since, nodes_due=nodes_due
    )
    step = plan_poll(
        autoscaling=autoscaling,
        changed=read.changed,
        pods=pods,
        slurm_nodes=read.nodes,
        answered=read.answered,
        answered_before=answered_before,
        go_when_idle=go_when_idle,
        awaited=awaited,
    )
    patch_busy_labels(kube, key[0], step.labels)
    return step, read
