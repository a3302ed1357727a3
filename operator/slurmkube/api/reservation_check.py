"""The SlurmReservationCheck CRD: parameters of the Kueue AdmissionCheck that lends Slurm nodes."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from slurmkube.api.meta import (
    ObjectMeta,
    StrictModel,
    Toleration,
)

# --- SlurmReservationCheck (Kueue AdmissionCheck parameters) --------------------------


class ClusterRef(StrictModel):
    namespace: str = Field(max_length=63, json_schema_extra={"pattern": r"^[a-z0-9-]+$"})
    """Namespace of the SlurmCluster."""
    name: str = Field(max_length=63, json_schema_extra={"pattern": r"^[a-z0-9-]+$"})
    """Name of the SlurmCluster."""


# busyNodes rules, checked by the API server (CEL) and again by the model.
_REQUEUE_ONLY = "graceSeconds and requeueBelowPriority apply only to policy Requeue"
_REQUEUE_NEEDS_PRIORITY = (
    "policy Requeue needs requeueBelowPriority: the Slurm job priority below which "
    "running jobs may be requeued"
)
_GRACE_BELOW_TIMEOUT = (
    "graceSeconds must be less than timeoutSeconds, or the workload gives up before "
    "any job is requeued"
)


class BusyNodePolicy(StrictModel):
    """What to do when the chosen nodes still run Slurm jobs.

    The nodes are reserved in Slurm first under either policy, so Slurm starts
    nothing new on them; the policies differ in what happens to the jobs running.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.policy == 'Requeue' || "
                    "!(has(self.graceSeconds) || has(self.requeueBelowPriority))",
                    "message": _REQUEUE_ONLY,
                    "fieldPath": ".policy",
                },
                {
                    "rule": "self.policy != 'Requeue' || has(self.requeueBelowPriority)",
                    "message": _REQUEUE_NEEDS_PRIORITY,
                    "fieldPath": ".requeueBelowPriority",
                },
                {
                    "rule": "!has(self.graceSeconds) || !has(self.timeoutSeconds) || "
                    "self.graceSeconds < self.timeoutSeconds",
                    "message": _GRACE_BELOW_TIMEOUT,
                    "fieldPath": ".graceSeconds",
                },
            ]
        }
    )

    policy: Literal["WaitForIdle", "Requeue"] = "WaitForIdle"
    """WaitForIdle: the workload waits until the running jobs end; no Slurm job is
    ever stopped. Requeue: after `graceSeconds`, running batch jobs whose priority is
    below `requeueBelowPriority` are requeued (`scontrol requeue`: PENDING again,
    same job id; they run later elsewhere, or here once the nodes are back); jobs at
    or above it, and jobs Slurm cannot requeue (`--no-requeue`, not batch), are
    waited for as with WaitForIdle."""
    timeout_seconds: int = Field(3600, ge=1, le=7 * 24 * 3600, alias="timeoutSeconds")
    """Give the nodes back to Slurm and answer Retry after waiting this long
    (counted from the reservation, under either policy)."""
    grace_seconds: int | None = Field(None, ge=0, le=7 * 24 * 3600, alias="graceSeconds")
    """Requeue only: how long after the reservation running jobs may still end on
    their own before they are requeued (as Slurm's preemption GraceTime); unset: 0."""
    requeue_below_priority: int | None = Field(
        None, ge=1, le=4_294_967_295, alias="requeueBelowPriority"
    )
    """Requeue only, and required there: the Slurm job priority (squeue %Q, uint32)
    below which a running job may be requeued for the workload."""

    @model_validator(mode="after")
    def _requeue_fields(self) -> BusyNodePolicy:
        if self.policy != "Requeue":
            if self.grace_seconds is not None or self.requeue_below_priority is not None:
                raise ValueError(_REQUEUE_ONLY)
        elif self.requeue_below_priority is None:
            raise ValueError(_REQUEUE_NEEDS_PRIORITY)
        elif (self.grace_seconds or 0) >= self.timeout_seconds:
            raise ValueError(_GRACE_BELOW_TIMEOUT)
        return self


class SlurmQueueProtection(StrictModel):
    """Which idle nodes stay Slurm's (the sharing policy, docs/goodput.md): nodes the
    first `protectedJobs` pending Slurm jobs can start on soon (idle, held by
    Slurm's backfill, or running a job whose time limit ends within
    `horizonSeconds`) are not lent, beyond Kubernetes' `entitledNodes`."""

    protected_jobs: int = Field(4, ge=0, le=1000, alias="protectedJobs")
    """Pending Slurm jobs, from the queue head, whose nodes are kept; 0 keeps none."""
    horizon_seconds: int = Field(1800, ge=0, le=604800, alias="horizonSeconds")
    """How far ahead a running job's end counts as soon."""


class SlurmReservationCheckSpec(StrictModel):
    """Parameters of a Kueue AdmissionCheck with controllerName
    `slurmkube.io/slurm-reservation`: which Slurm nodes may be lent, and how."""

    cluster_ref: ClusterRef = Field(alias="clusterRef")
    """The SlurmCluster whose nodes are lent."""
    node_sets: list[str] = Field(
        default_factory=list,
        alias="nodeSets",
        json_schema_extra={"items": {"type": "string", "maxLength": 63}},
    )
    """NodeSets (of that cluster) that may lend nodes; empty: all of them."""
    busy_nodes: BusyNodePolicy = Field(default_factory=BusyNodePolicy, alias="busyNodes")
    max_nodes: int | None = Field(None, ge=1, alias="maxNodes")
    """At most this many nodes lent through this check at once; unset: no limit."""
    entitled_nodes: int = Field(0, ge=0, alias="entitledNodes")
    """Nodes Kubernetes may hold whatever Slurm's queue waits for, as a static split
    would give it; beyond them only what Slurm's queue does not need soon is lent."""
    slurm_queue: SlurmQueueProtection = Field(
        default_factory=SlurmQueueProtection, alias="slurmQueue"
    )
    reservation_flags: list[Literal["MAINT", "PURGE_COMP", "NO_HOLD_JOBS_AFTER"]] = Field(
        default_factory=list, alias="reservationFlags"
    )
    """Extra Slurm reservation flags (scontrol(1) Flags=). IGNORE_JOBS is always set,
    so a reservation can be made on nodes whose jobs are still running."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Added to every PodSet of an admitted workload (when lent nodes are tainted)."""
    retry_after_seconds: int = Field(30, ge=1, le=3600, alias="retryAfterSeconds")
    """requeueAfterSeconds of a Retry for trouble that should pass (Slurm unreachable,
    nodes not free yet)."""


class SlurmReservationCheck(StrictModel):
    api_version: Literal["slurmkube.io/v1alpha1"] = Field(
        "slurmkube.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["SlurmReservationCheck"] = "SlurmReservationCheck"
    metadata: ObjectMeta
    spec: SlurmReservationCheckSpec
