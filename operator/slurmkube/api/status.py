"""The status slurmkube writes on its objects."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from slurmkube.api.meta import (
    LenientModel,
)

# --- status (written by the operator) -------------------------------------------------


class Condition(LenientModel):
    """metav1.Condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(None, alias="lastTransitionTime")
    observed_generation: int | None = Field(None, alias="observedGeneration")


class NodeCounts(LenientModel):
    """Slurm node states, as `sinfo` reports them, folded (slurmkube.plan.status).

    `total` counts the nodes that should run slurmd, and idle + allocated + mixed +
    drain + down add up to it (a wanted node that has not registered is down).
    """

    total: int = 0
    idle: int = 0
    allocated: int = 0
    mixed: int = 0
    drain: int = 0
    down: int = 0
    cloud: int = 0
    """Powered down (State=CLOUD without a slurmd pod)."""


class GpuCounts(LenientModel):
    """GPUs (Slurm gres/gpu) of the registered nodes, and how many jobs hold."""

    total: int = 0
    allocated: int = 0


class NodeProblem(LenientModel):
    """A node the config leaves out or holds as Slurm registered it, and why."""

    node: str
    reason: str
    """NodeSetOverlap, MemoryBelowReserved or GpusBelowRegistered."""
    message: str


class HealthNodeStatus(LenientModel):
    """A node node health has out of service (controllers/health.py)."""

    name: str
    verdict: Literal["sick", "held", "checking"]
    severity: str | None = None
    causes: list[str] = Field(default_factory=list)
    waiting: bool = False
    """Sick, but the circuit breaker holds its actions back."""


class HealthDomainStatus(LenientModel):
    """An NVLink domain with at least `rackEscalation.domainSickShare` of its nodes out."""

    domain: str
    out: int = 0
    size: int = 0
    reason: str = ""


class HealthCircuitStatus(LenientModel):
    open: bool = False
    acted: int = 0
    """Nodes health began acting on within the breaker's window."""
    allowed: int = 0


class HealthStatus(LenientModel):
    """Node health (`spec.health`): counts by verdict, healthy GPU capacity, the circuit
    breaker, escalated domains, and up to 100 nodes that are not healthy."""

    sick: int = 0
    held: int = 0
    checking: int = 0
    waiting: int = 0
    healthy_gpus: int = Field(0, alias="healthyGpus")
    circuit: HealthCircuitStatus = Field(default_factory=HealthCircuitStatus)
    domains: list[HealthDomainStatus] = Field(default_factory=list)
    nodes: list[HealthNodeStatus] = Field(default_factory=list)


class UpgradeStatus(LenientModel):
    """A change of spec.image, carried out in Slurm's order (docs/upgrades.md)."""

    from_image: str = Field("", alias="from")
    """The image the cluster ran when the upgrade began."""
    to_image: str = Field("", alias="to")
    """spec.image."""
    phase: Literal["Slurmdbd", "Slurmctld", "Clients", "Slurmd", "Complete", "Refused"] = "Complete"
    """The step under way: slurmdbd, then slurmctld, then slurmrestd and login, then the
    slurmd pods; Refused (a downgrade, or more releases apart than Slurm accepts)."""
    nodes_done: int = Field(0, alias="nodesDone")
    """slurmd pods that run `to` and are Ready."""
    nodes_total: int = Field(0, alias="nodesTotal")
    message: str = ""
    since: str | None = None
    """When the phase or the nodes done last changed (a step's deadline counts from it)."""


class SlurmClusterStatus(LenientModel):
    observed_generation: int | None = Field(None, alias="observedGeneration")
    conditions: list[Condition] = Field(default_factory=list)
    nodes: NodeCounts = Field(default_factory=NodeCounts)
    gpus: GpuCounts = Field(default_factory=GpuCounts)
    pending_gpus: dict[str, int] = Field(default_factory=dict, alias="pendingGpus")
    """GPUs pending jobs ask for, per partition (the demand autoscaling follows)."""
    config_hash: str | None = Field(None, alias="configHash")
    """Hash of the Slurm configuration slurmctld runs with."""
    slurm_version: str | None = Field(None, alias="slurmVersion")
    """The Slurm release the configuration is rendered for: spec.slurm.version, or the
    series the tag of spec.image names, or 26.05."""
    node_problems: list[NodeProblem] = Field(
        default_factory=list, alias="nodeProblems", max_length=1000
    )
    """Nodes the config leaves out or holds (the first 1000; NodesValid counts them all)."""
    health: HealthStatus | None = None
    upgrade: UpgradeStatus | None = None
    slurmd_registered: bool | None = Field(None, alias="slurmdRegistered")
    """A slurmd of this cluster has registered with its slurmctld, as the operator saw
    (set once, never cleared). False: none has since the cluster was created, so no
    job can run on it; absent: not known (status written by an older operator)."""


class AutoscalingStatus(LenientModel):
    """Where an autoscaled NodeSet's nodes are in Slurm's power cycle."""

    up: int = 0
    """Powered up with a registered slurmd."""
    resuming: int = 0
    """Slurm chose them (POWERING_UP); their slurmd pods are starting."""
    suspending: int = 0
    """Slurm is powering them down (POWER_DOWN requested or POWERING_DOWN)."""
    suspended: int = 0
    """Powered down (idle~), no slurmd pod."""
    held: int = 0
    """Powered down and drained by slurmkube so Slurm cannot pick them (lent to Kueue,
    maxNodes, maxConcurrentResumes)."""
    failed: int = 0
    """Resumes that failed: DOWN and powered down, left for an admin (`scontrol update
    NodeName=... State=RESUME`)."""
    failed_nodes: list[str] = Field(default_factory=list, alias="failedNodes")


class NodeSetHealthStatus(LenientModel):
    """Node health of one NodeSet's nodes: counts by verdict, healthy GPU capacity and
    up to 100 nodes that are not healthy (the cluster-wide view is the SlurmCluster's)."""

    sick: int = 0
    held: int = 0
    checking: int = 0
    waiting: int = 0
    healthy_gpus: int = Field(0, alias="healthyGpus")
    nodes: list[HealthNodeStatus] = Field(default_factory=list)


class NodeSetStatus(LenientModel):
    observed_generation: int | None = Field(None, alias="observedGeneration")
    conditions: list[Condition] = Field(default_factory=list)
    replicas: int = 0
    """slurmd pods that exist."""
    ready_replicas: int = Field(0, alias="readyReplicas")
    selector: str = ""
    """Label selector of the slurmd pods, for the scale subresource (HPA/KEDA)."""
    nodes: NodeCounts = Field(default_factory=NodeCounts)
    gpus: GpuCounts = Field(default_factory=GpuCounts)
    autoscaling: AutoscalingStatus | None = None
    health: NodeSetHealthStatus | None = None
