"""A slurmd pod lost while its node ran a job: Slurm is told the job is dead (pure).

Guarded deletes never take a busy slurmd pod (plan/removal.py drains first,
the admission policy refuses others), but a pod still goes when its Kubernetes
node fails, the pod GC removes it, or an admin forces it. Its job's processes
die with it; slurmctld does not know. The operator makes the pod again (same
name, same node), and the new slurmd registers with the same boot time (pods
share the host kernel), so slurmctld sees no reboot and keeps the job RUNNING
until its time limit: a ghost.

So when the plan creates a slurmd pod for a node Slurm shows busy (ALLOCATED,
MIXED or COMPLETING) and powered up, that node is set DOWN first, with a
reason under slurmkube's prefix (`LOST_REASON`): slurmctld ends its jobs as on
any node failure (NODE_FAIL; requeued where the job and JobRequeue allow). The
pod is created only after that succeeded. slurm.conf renders
`ReturnToService=2` (a rendered key, not settable in extraConfig), under which
a DOWN node returns to service on a valid registration whatever set it DOWN:
the new slurmd's registration resumes the node, without a second call that
could come before it. Slurm 24.11 keeps the reason on the IDLE node then
(`scontrol show node` shows it; `sinfo -R` lists only down, drained and failed
nodes); nothing of slurmkube acts on the reason of a node neither drained nor
down.

Not this path: a node Slurm is powering up (autoscaling: its job waits for the
pod being created), and a node already DOWN or FAIL (Slurm has ended its jobs).
Not covered: a pod re-created while Slurm does not answer (nothing tells a
busy node then; the pod is made, as a new cluster's pods are before slurmctld
answers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from slurmkube.api import well_known as wk
from slurmkube.plan.autoscale import UP, PowerNode

LOST_REASON: Final = f"{wk.DRAIN_REASON_PREFIX} slurmd pod lost while a job ran"


def lost_while_busy(
    created: Iterable[str], slurm_nodes: Mapping[str, PowerNode] | None
) -> tuple[str, ...]:
    """Of the nodes whose slurmd pod the plan creates, those whose job died with
    the pod before: busy, powered up and not DOWN in Slurm (None: Slurm silent)."""
    views = slurm_nodes or {}
    return tuple(
        sorted(
            node
            for node in created
            if (v := views.get(node)) is not None and v.busy and not v.down and v.power == UP
        )
    )
