"""The NodeSet CRD: a group of Kubernetes nodes that run slurmd for one SlurmCluster."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime, ConfigDict, Field, field_validator, model_validator

from slurmkube.api import grammar
from slurmkube.api.meta import (
    LabelSelector,
    ObjectMeta,
    StrictModel,
    Toleration,
)

# --- NodeSet --------------------------------------------------------------------------


class UpdateWindow(StrictModel):
    """When a Slurm upgrade may replace this NodeSet's slurmd pods (docs/upgrades.md).

    Until the window ends, a Slurm reservation with Flags=MAINT covers the
    NodeSet's nodes from `start` (scontrol(1), RESERVATIONS): Slurm starts no
    job there that would still run at `start`. Inside the window the pods are
    replaced whole NVLink blocks at a time, each once drained and idle; a job
    that outlives the window is never killed, its block waits for the next one.
    """

    start: AwareDatetime
    """RFC 3339 with a UTC offset, e.g. 2026-12-05T02:00:00Z."""
    duration_minutes: int = Field(alias="durationMinutes", ge=1, le=10_080)
    """Length of the window (at most a week)."""

    @property
    def end(self) -> datetime:
        return self.start + timedelta(minutes=self.duration_minutes)


class UpdateStrategy(StrictModel):
    type: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    max_unavailable: int = Field(1, ge=1, alias="maxUnavailable")
    """slurmd pods replaced at once; each is drained first and replaced when idle.
    A Slurm upgrade replaces whole NVLink blocks: one block at a time even when it
    has more nodes than this."""
    window: UpdateWindow | None = None
    """Slurm upgrades replace slurmd pods only inside this window (unset: any time)."""


class AutoscalingSpec(StrictModel):
    """Slurm's power saving drives the NodeSet (slurm.conf(5) SuspendTime, ResumeTimeout).

    Nodes without a slurmd pod are `State=CLOUD`, powered down (`idle~`). When
    Slurm schedules a job onto them it marks them POWERING_UP and the operator
    creates their slurmd pods; when a node stays idle `suspendTimeSeconds`,
    Slurm powers it down and the operator removes its pod. Slurm's own
    placement picks the nodes, so `--segment` jobs resume whole blocks.
    While enabled, `spec.replicas` must be unset: Slurm's demand wins, and a
    write through /scale (HPA, KEDA) is refused by the API server.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.maxNodes) || self.minNodes <= self.maxNodes",
                    "message": "minNodes may not exceed maxNodes",
                }
            ]
        }
    )

    enabled: bool = False
    min_nodes: int = Field(0, ge=0, alias="minNodes")
    """Nodes kept powered up when idle (slurm.conf(5) SuspendExcNodes with a count)."""
    max_nodes: int | None = Field(None, ge=0, alias="maxNodes")
    """At most this many nodes powered up or resuming; unset: every selected node."""
    suspend_time_seconds: int = Field(600, ge=5, le=31_536_000, alias="suspendTimeSeconds")
    """Idle time before Slurm powers a node down (SuspendTime). With several autoscaled
    NodeSets the shortest applies (slurm.conf has one SuspendTime)."""
    suspend_timeout_seconds: int = Field(60, ge=5, le=65_533, alias="suspendTimeoutSeconds")
    """Time a powered-down node is kept out of scheduling while its pod goes (SuspendTimeout)."""
    resume_timeout_seconds: int = Field(600, ge=10, le=65_533, alias="resumeTimeoutSeconds")
    """Time a resuming node has to register its slurmd (ResumeTimeout): pod scheduling, image
    pull and start. After it Slurm marks the node DOWN ("ResumeTimeout reached") and requeues
    its jobs. With several autoscaled NodeSets the longest applies."""
    max_concurrent_resumes: int | None = Field(None, ge=1, alias="maxConcurrentResumes")
    """At most this many nodes resuming at once (the rest of the powered-down nodes are held
    drained meanwhile); unset: no limit beyond maxNodes."""
    keep_whole_blocks: bool = Field(True, alias="keepWholeBlocks")
    """Offer powered-down nodes to Slurm in whole NVLink blocks (and the rest of a block that
    is partly up first), so a limit never leaves a block half resumable."""

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSpec:
        if self.max_nodes is not None and self.min_nodes > self.max_nodes:
            raise ValueError("minNodes may not exceed maxNodes")
        return self


class NodeSetSpec(StrictModel):
    """A set of Kubernetes GPU nodes that each run one slurmd pod.

    The Slurm node name is the Kubernetes node name."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.autoscaling) && has(self.autoscaling.enabled) && "
                    "self.autoscaling.enabled && has(self.replicas))",
                    "message": "replicas and autoscaling.enabled exclude each other: Slurm's "
                    "demand drives an autoscaled NodeSet; disable autoscaling to set replicas "
                    "(or scale through /scale with HPA/KEDA)",
                }
            ]
        }
    )

    cluster_ref: str = Field(alias="clusterRef")
    """The SlurmCluster (same namespace) these nodes belong to."""
    node_selector: LabelSelector = Field(alias="nodeSelector")
    """Which Kubernetes nodes are in the set (one slurmd pod each)."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Tolerations of the slurmd pods (GPU nodes are often tainted)."""
    replicas: int | None = Field(None, ge=0)
    """How many of the selected nodes run slurmd; the rest stay State=CLOUD. Unset: all."""
    features: list[str] = Field(
        default_factory=list,
        json_schema_extra={
            "items": {"type": "string", "pattern": grammar.SCHEMA_PATTERNS["feature"]}
        },
    )
    """Slurm node features (for --constraint); the GPU type is added."""
    memory_reserved_mib: int = Field(4096, ge=0, alias="memoryReservedMiB")
    """Memory kept back from Slurm's RealMemory for the kubelet and the pod."""
    cpus_reserved: int = Field(0, ge=0, alias="cpusReserved")
    """CPUs kept back from Slurm's CPUs for the node's other pods (DaemonSets)."""
    pod_qos: Literal["BestEffort", "Guaranteed"] = Field("BestEffort", alias="podQoS")
    """BestEffort: the slurmd pod requests only the node's GPUs; its PriorityClass
    keeps the kubelet from evicting it before other pods. Guaranteed: it also requests
    (and is limited to) exactly the CPUs and memory of its slurm.conf line, so it
    schedules only where every other pod's requests fit beside it: set cpusReserved
    and memoryReservedMiB to cover the node's DaemonSets."""
    weight: int = Field(1, ge=1, le=65533)
    """slurm.conf(5) Weight: lower is allocated first."""
    update_strategy: UpdateStrategy = Field(default_factory=UpdateStrategy, alias="updateStrategy")
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec)
    """Scale with Slurm's demand (power saving) instead of `replicas`."""

    @field_validator("features")
    @classmethod
    def _features(cls, v: list[str]) -> list[str]:
        return [grammar.feature(f, f"[{i}]") for i, f in enumerate(v)]

    @model_validator(mode="after")
    def _one_scaling_mode(self) -> NodeSetSpec:
        if self.autoscaling.enabled and self.replicas is not None:
            raise ValueError(
                "replicas and autoscaling.enabled exclude each other: unset replicas, or "
                "disable autoscaling to drive replicas (HPA/KEDA through /scale)"
            )
        return self


class NodeSet(StrictModel):
    api_version: Literal["slurmkube.io/v1alpha1"] = Field(
        "slurmkube.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["NodeSet"] = "NodeSet"
    metadata: ObjectMeta
    spec: NodeSetSpec
