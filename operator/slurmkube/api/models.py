"""Pydantic models of slurmkube's CRDs and of the Kubernetes objects it reads.

These are the edge types: they parse what a user or the API server hands us
and reject bad input with the field's path. CRD schemas are generated from
them, so a field documented here is documented in `kubectl explain`.
Field names are the camelCase JSON names, as in every Kubernetes API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from slurmkube.api import grammar
from slurmkube.api import well_known as wk


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Lenient(BaseModel):
    """Kubernetes objects carry many fields we do not read; ignore them."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ObjectMeta(_Lenient):
    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


# --- label selectors (metav1.LabelSelector) -------------------------------------------


class LabelSelectorRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        needs_values = self.operator in ("In", "NotIn")
        if needs_values and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if not needs_values and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(_Model):
    """metav1.LabelSelector; an empty selector selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
            if req.operator == "In" and labels.get(req.key) not in req.values:
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
        return True


# --- SlurmCluster ---------------------------------------------------------------------


class BackfillSpec(_Model):
    """sched/backfill parameters (slurm.conf(5) SchedulerParameters bf_*).

    Unset fields are derived from the fleet and `expectedQueueDepth` so that a
    backfill cycle reaches the end of a deep queue while the controller stays
    responsive (see `slurmkube.render.scheduler`).
    """

    expected_queue_depth: int = Field(20000, ge=1, le=10_000_000, alias="expectedQueueDepth")
    max_job_test: int | None = Field(None, ge=1, alias="maxJobTest")
    window_minutes: int | None = Field(None, ge=1, le=43200, alias="windowMinutes")
    resolution_seconds: int | None = Field(None, ge=1, le=3600, alias="resolutionSeconds")
    interval_seconds: int = Field(30, ge=1, le=10800, alias="intervalSeconds")
    max_time_seconds: int | None = Field(None, ge=1, le=3600, alias="maxTimeSeconds")
    yield_interval_us: int = Field(300_000, ge=1000, le=10_000_000, alias="yieldIntervalMicros")
    yield_sleep_us: int = Field(100_000, ge=1000, le=10_000_000, alias="yieldSleepMicros")


class PriorityWeights(_Model):
    """priority/multifactor weights (slurm.conf(5) PriorityWeight*)."""

    age: int = Field(1000, ge=0, le=4_294_967_295)
    fairshare: int = Field(10000, ge=0, le=4_294_967_295)
    job_size: int = Field(1000, ge=0, le=4_294_967_295, alias="jobSize")
    partition: int = Field(1000, ge=0, le=4_294_967_295)
    qos: int = Field(10000, ge=0, le=4_294_967_295)


class SchedulerSpec(_Model):
    backfill: BackfillSpec = Field(default_factory=BackfillSpec)
    priority_weights: PriorityWeights = Field(
        default_factory=PriorityWeights,
        alias="priorityWeights",
    )


class PartitionSpec(_Model):
    """One Slurm partition. Its nodes are those of `nodeSets` plus those `nodeSelector` selects
    among the cluster's NodeSet nodes."""

    name: str
    node_sets: list[str] = Field(default_factory=list, alias="nodeSets")
    node_selector: LabelSelector | None = Field(None, alias="nodeSelector")
    default: bool = False
    max_time: str | None = Field(None, alias="maxTime")
    default_time: str | None = Field(None, alias="defaultTime")
    max_nodes: int | None = Field(None, ge=1, alias="maxNodes")
    priority_tier: int = Field(1, ge=0, le=65533, alias="priorityTier")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return grammar.partition_name(v, "")

    @field_validator("max_time", "default_time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        return None if v is None else grammar.slurm_time(v, "")

    @model_validator(mode="after")
    def _has_nodes(self) -> PartitionSpec:
        if not self.node_sets and self.node_selector is None:
            raise ValueError("set nodeSets or nodeSelector (or both)")
        return self


class TopologySpec(_Model):
    """Where the fleet topology comes from (node labels) and how Slurm sees it."""

    plugin: Literal["block", "tree", "none"] = "block"
    nvlink_domain_label: str = Field(wk.LABEL_GPU_CLIQUE, alias="nvlinkDomainLabel")
    # Ordered from the tier closest to the nodes (leaf) up (spine, core).
    tier_labels: list[str] = Field(
        default_factory=lambda: [wk.LABEL_LEAF, wk.LABEL_SPINE], alias="tierLabels"
    )
    # Base block size (topology.conf(5) BlockSizes). Unset: the largest NVLink
    # domain. Smaller than the domain keeps spare nodes out of the base block.
    block_size: int | None = Field(None, ge=1, le=4096, alias="blockSize")


class SlurmClusterSpec(_Model):
    cluster_name: str | None = Field(None, alias="clusterName")
    image: str = wk.DEFAULT_SLURM_IMAGE
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    partitions: list[PartitionSpec] = Field(default_factory=list)
    topology: TopologySpec = Field(default_factory=TopologySpec)
    # Extra slurm.conf directives, one `Key=Value` each, for keys slurmkube does not manage.
    extra_config: list[str] = Field(default_factory=list, alias="extraConfig")

    @field_validator("cluster_name")
    @classmethod
    def _cluster_name(cls, v: str | None) -> str | None:
        return None if v is None else grammar.cluster_name(v, "")

    @field_validator("extra_config")
    @classmethod
    def _extra(cls, v: list[str]) -> list[str]:
        return [grammar.config_line(line, f"[{i}]") for i, line in enumerate(v)]

    @model_validator(mode="after")
    def _unique_partitions(self) -> SlurmClusterSpec:
        names = [p.name for p in self.partitions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"partitions: duplicate names {dupes}")
        if sum(p.default for p in self.partitions) > 1:
            raise ValueError("partitions: at most one partition may be default")
        return self


class SlurmCluster(_Model):
    api_version: Literal["slurmkube.io/v1alpha1"] = Field(
        "slurmkube.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["SlurmCluster"] = "SlurmCluster"
    metadata: ObjectMeta
    spec: SlurmClusterSpec = Field(default_factory=SlurmClusterSpec)

    @property
    def slurm_cluster_name(self) -> str:
        return self.spec.cluster_name or self.metadata.name


# --- NodeSet --------------------------------------------------------------------------


class NodeSetSpec(_Model):
    """A set of Kubernetes GPU nodes that each run one slurmd pod.

    The Slurm node name is the Kubernetes node name."""

    cluster_ref: str = Field(alias="clusterRef")
    node_selector: LabelSelector = Field(alias="nodeSelector")
    # How many of the selected nodes run slurmd; the rest stay State=CLOUD.
    # Unset: all of them.
    replicas: int | None = Field(None, ge=0)
    features: list[str] = Field(default_factory=list)
    # Memory kept back from Slurm for the kubelet and the pod itself.
    memory_reserved_mib: int = Field(4096, ge=0, alias="memoryReservedMiB")
    # slurm.conf(5) Weight: lower is allocated first.
    weight: int = Field(1, ge=1, le=65533)

    @field_validator("features")
    @classmethod
    def _features(cls, v: list[str]) -> list[str]:
        return [grammar.feature(f, f"[{i}]") for i, f in enumerate(v)]


class NodeSet(_Model):
    api_version: Literal["slurmkube.io/v1alpha1"] = Field(
        "slurmkube.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["NodeSet"] = "NodeSet"
    metadata: ObjectMeta
    spec: NodeSetSpec


# --- Kubernetes Node (only what we read) ----------------------------------------------


class NodeCondition(_Lenient):
    type: str
    status: str


class NodeStatus(_Lenient):
    capacity: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, str] = Field(default_factory=dict)
    conditions: list[NodeCondition] = Field(default_factory=list)


class NodeSpecK8s(_Lenient):
    unschedulable: bool = False


class KubeNode(_Lenient):
    api_version: str = Field("v1", alias="apiVersion")
    kind: Literal["Node"] = "Node"
    metadata: ObjectMeta
    spec: NodeSpecK8s = Field(default_factory=NodeSpecK8s)
    status: NodeStatus = Field(default_factory=NodeStatus)

    @property
    def ready(self) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)
