"""What deleting a SlurmCluster does to the jobs on it (pure).

Deletion takes slurmctld and every slurmd pod with it (the pods belong to their
NodeSets; the delete handler removes them), so a job still running dies. With
`deletionPolicy: Drain` (the default) a cluster whose Slurm shows a busy node
is drained first, nothing new starts, and the deletion waits until
its jobs end; the force annotation or `deletionPolicy: Delete` skips the wait.
When the slurmctld pod itself is gone or being deleted (its namespace is going)
no job can be kept and the deletion goes on.

Slurm silent while its slurmctld pod runs: a job can run only on a slurmd that
registered with that slurmctld, so the deletion waits only if one ever did.
The operator records that in `status.slurmdRegistered` (`slurmd_registered`):
false from the cluster's first status, true from the first read of Slurm that
shows a node registered (responding, not powered down) or busy, and never
cleared. A cluster whose slurmd never registered (slurmctld never came up, or
its pods sit on nodes that run no container) is deleted at once. The field
absent (status written by an older operator, Slurm silent since) is not known:
the deletion waits as before. What the field cannot see: a slurmd that
registered, ran a job and lost slurmctld between two reads of Slurm (the 2 s
poll, a reconcile) of an operator that never got an answer since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.plan.conditions import metav1_conditions
from slurmkube.plan.model import Condition, SlurmNodeView

DRAIN_REASON = "SlurmCluster deleted"


@dataclass(frozen=True, slots=True)
class DeletionStep:
    proceed: bool
    message: str
    drain: tuple[str, ...] = ()


def slurmd_registered(
    status: Mapping[str, Any] | None, slurm_nodes: Mapping[str, SlurmNodeView] | None
) -> bool | None:
    """`status.slurmdRegistered` after a reconcile that read `slurm_nodes` (None: Slurm
    did not answer), from the status the cluster had (None: none written yet)."""
    before = (status or {}).get("slurmdRegistered")
    if before is True:
        return True
    if slurm_nodes is not None:
        return any(
            v.busy or (v.responding and v.state not in ("cloud", "down"))
            for v in slurm_nodes.values()
        )
    if before is False or not (status or {}).get("observedGeneration"):
        return False
    return None


def _goes_anyway(*, policy: str, forced: bool, controller_running: bool) -> str | None:
    """Why the deletion proceeds whatever Slurm says; None when Slurm's answer decides."""
    if policy == "Delete":
        return "deletionPolicy Delete"
    if forced:
        return f"forced by {wk.ANNOTATION_FORCE_DELETE}"
    if not controller_running:
        return "slurmctld is gone or going: no job can be kept"
    return None


def reads_slurm(*, policy: str, forced: bool, controller_running: bool) -> bool:
    """Whether Slurm's answer can change the step: not when the deletion goes
    anyway. A read then would only wait on a slurmctld going away, which
    slurmrestd retries for half a minute before it answers."""
    return _goes_anyway(policy=policy, forced=forced, controller_running=controller_running) is None


def plan_deletion(
    *,
    policy: str,
    forced: bool,
    slurm_nodes: Mapping[str, SlurmNodeView] | None,
    controller_running: bool,
    registered: bool | None = None,
) -> DeletionStep:
    """The next step of a SlurmCluster's deletion. `slurm_nodes` None: Slurm did not
    answer; `controller_running`: the slurmctld pod runs and is not being deleted;
    `registered`: status.slurmdRegistered (False: no slurmd ever registered)."""
    force = f"annotate {wk.ANNOTATION_FORCE_DELETE}=true to delete now (running jobs die)"
    anyway = _goes_anyway(policy=policy, forced=forced, controller_running=controller_running)
    if anyway is not None:
        return DeletionStep(True, anyway)
    if slurm_nodes is None and registered is False:
        return DeletionStep(True, "no slurmd ever registered with slurmctld: no job can run")
    if slurm_nodes is None:
        return DeletionStep(False, f"Slurm does not answer, jobs may run; waiting; {force}")
    busy = sorted(n for n, v in slurm_nodes.items() if v.busy)
    if not busy:
        return DeletionStep(True, "no job runs")
    sample = ", ".join(busy[:5]) + (", ..." if len(busy) > 5 else "")
    return DeletionStep(
        False,
        f"{len(busy)} nodes still run jobs ({sample}); every node is drained and the "
        f"deletion waits for the jobs to end; {force}",
        drain=tuple(sorted(n for n, v in slurm_nodes.items() if not v.drain)),
    )


def deletion_conditions(
    previous: Sequence[Mapping[str, Any]], step: DeletionStep, generation: int | None, now: str
) -> list[dict[str, Any]]:
    """The status conditions while a deletion waits: `Deleting` says why, the rest
    stay as the last reconcile left them."""
    kept = [
        Condition(str(c["type"]), c.get("status") == "True", str(c["reason"]), str(c["message"]))
        for c in previous
        if c.get("type") != "Deleting" and "reason" in c
    ]
    reason = "Deleting" if step.proceed else "WaitingForJobs"
    return metav1_conditions(
        previous, [*kept, Condition("Deleting", True, reason, step.message)], generation, now
    )
