"""Pydantic models of slurmkube's CRDs and of the Kubernetes objects it reads.

These are the edge types: they parse what a user or the API server hands us
and reject bad input with the field's path. CRD schemas are generated from
them, so a field documented here is documented in `kubectl explain`.
Field names are the camelCase JSON names, as in every Kubernetes API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from slurmkube.api import grammar
from slurmkube.api import well_known as wk


class _Model(BaseModel):
    # Attribute docstrings become descriptions in the generated CRDs (kubectl explain).
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )


_M = TypeVar("_M", bound=BaseModel)


def from_object(model: type[_M], obj: Mapping[str, Any]) -> _M:
    """A SlurmCluster or NodeSet as read from the API server: its apiVersion, kind,
    metadata and spec (status and server-set fields are not part of the model)."""
    return model.model_validate({k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec")})


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

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.nodeSets) || has(self.nodeSelector)",
                    "message": "set nodeSets or nodeSelector (or both)",
                },
                {
                    "rule": "self.name.lowerAscii() != 'default'",
                    "message": "DEFAULT is a slurm.conf keyword, not a partition name",
                },
            ]
        }
    )

    name: str = Field(
        max_length=63, json_schema_extra={"pattern": grammar.SCHEMA_PATTERNS["partition"]}
    )
    """Slurm PartitionName."""
    node_sets: list[str] = Field(
        default_factory=list,
        alias="nodeSets",
        max_length=64,
        json_schema_extra={"items": {"type": "string", "maxLength": 63}},
    )
    """NodeSets (of this SlurmCluster) whose nodes are in the partition."""
    node_selector: LabelSelector | None = Field(None, alias="nodeSelector")
    """Also include the cluster's NodeSet nodes whose labels match."""
    default: bool = False
    """Default=YES: jobs without -p go here. At most one partition."""
    max_time: str | None = Field(
        None, alias="maxTime", json_schema_extra={"pattern": grammar.SCHEMA_PATTERNS["time"]}
    )
    """MaxTime, in Slurm's time format (e.g. 2-00:00:00)."""
    default_time: str | None = Field(
        None, alias="defaultTime", json_schema_extra={"pattern": grammar.SCHEMA_PATTERNS["time"]}
    )
    """DefaultTime for jobs that give no --time."""
    max_nodes: int | None = Field(None, ge=1, alias="maxNodes")
    """MaxNodes per job."""
    priority_tier: int = Field(1, ge=0, le=65533, alias="priorityTier")
    """PriorityTier: jobs of higher tiers are considered first."""

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
    debounce_seconds: float = Field(1.0, ge=0, le=60, alias="debounceSeconds")
    """How long Node and NodeSet changes must be quiet before the config is rebuilt
    and applied: a burst of label changes costs one slurmctld reconfigure. A burst
    that never goes quiet is applied every 5 x this."""


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, alias="tolerationSeconds")


class PersistenceSpec(_Model):
    """slurmctld's StateSaveLocation on a PersistentVolumeClaim."""

    enabled: bool = True
    """false: state on an emptyDir (lost with the pod; for tests and throw-away clusters)."""
    size: str = Field("10Gi", json_schema_extra={"pattern": r"^[0-9]+(Ki|Mi|Gi|Ti)$"})
    storage_class_name: str | None = Field(None, alias="storageClassName")


class ControllerSpec(_Model):
    persistence: PersistenceSpec = Field(default_factory=PersistenceSpec)
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    """Where slurmctld and slurmrestd pods run (CPU nodes, usually)."""
    tolerations: list[Toleration] = Field(default_factory=list)
    backup: bool = False
    """Run a backup slurmctld (a second SlurmctldHost) sharing the state volume."""


class SlurmdSpec(_Model):
    cgroups: bool = True
    """proctrack/cgroup and task/cgroup (cgroup.conf); false: linuxproc, no task plugin."""
    config_overrides: bool = Field(False, alias="configOverrides")
    """SlurmdParameters=config_overrides: trust slurm.conf's CPUs/memory over what slurmd
    detects. Only for simulated or test nodes; real nodes should report what they have."""


class RestApiSpec(_Model):
    replicas: int = Field(1, ge=0, le=16)
    """slurmrestd replicas; 0 disables the REST API (the operator then uses scontrol)."""


class DatabaseRef(_Model):
    host: str
    port: int = Field(3306, ge=1, le=65535)
    name: str = Field("slurm_acct_db", json_schema_extra={"pattern": r"^[A-Za-z0-9_]{1,64}$"})
    secret_name: str = Field(alias="secretName")
    """Secret with keys `username` and `password` for the external MariaDB."""


class AccountingSpec(_Model):
    enabled: bool = False
    database: DatabaseRef | None = None

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!self.enabled || has(self.database)",
                    "message": "accounting.enabled needs accounting.database",
                }
            ]
        }
    )


class LoginSpec(_Model):
    replicas: int = Field(0, ge=0, le=64)
    """Login pods (sackd) for interactive users."""


class AuthSpec(_Model):
    """Where the shared keys live. Unset: generated into `<cluster>-auth` once, never logged."""

    slurm_key_secret: str | None = Field(None, alias="slurmKeySecret")
    jwt_key_secret: str | None = Field(None, alias="jwtKeySecret")


class SlurmClusterSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.partitions) || self.partitions.filter(p, "
                    "has(p.default) && p.default).size() <= 1",
                    "message": "at most one partition may be default",
                },
            ]
        }
    )

    cluster_name: str | None = Field(
        None, alias="clusterName", json_schema_extra={"pattern": grammar.SCHEMA_PATTERNS["cluster"]}
    )
    """Slurm ClusterName; default: metadata.name."""
    image: str = wk.DEFAULT_SLURM_IMAGE
    """The slurm image (slurmctld, slurmd, slurmrestd, sackd entrypoints)."""
    controller: ControllerSpec = Field(default_factory=ControllerSpec)
    rest_api: RestApiSpec = Field(default_factory=RestApiSpec, alias="restApi")
    slurmd: SlurmdSpec = Field(default_factory=SlurmdSpec)
    accounting: AccountingSpec = Field(default_factory=AccountingSpec)
    login: LoginSpec = Field(default_factory=LoginSpec)
    auth: AuthSpec = Field(default_factory=AuthSpec)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    partitions: list[PartitionSpec] = Field(
        default_factory=list,
        max_length=128,
        # A map-typed list: the API server itself refuses two partitions of one name.
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    topology: TopologySpec = Field(default_factory=TopologySpec)
    extra_config: list[str] = Field(
        default_factory=list,
        alias="extraConfig",
        max_length=256,
        json_schema_extra={
            "items": {
                "type": "string",
                "pattern": grammar.SCHEMA_PATTERNS["config_line"],
                "maxLength": 1065,
            },
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(l, !(l.split('=')[0].lowerAscii() in "
                    + "["
                    + ", ".join(f"'{k}'" for k in sorted(grammar.MANAGED_KEYS))
                    + "]))",
                    "message": "extraConfig may not set a key slurmkube manages "
                    "(NodeName, PartitionName, SlurmctldHost, Include, Prolog, ...)",
                }
            ],
        },
    )
    """Extra slurm.conf directives, one `Key=Value` each, for keys slurmkube does not manage."""

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


class UpdateStrategy(_Model):
    type: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    max_unavailable: int = Field(1, ge=1, alias="maxUnavailable")
    """slurmd pods replaced at once; each is drained first and replaced when idle."""


class AutoscalingSpec(_Model):
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


class NodeSetSpec(_Model):
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


# --- status (written by the operator) -------------------------------------------------


class Condition(_Lenient):
    """metav1.Condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(None, alias="lastTransitionTime")
    observed_generation: int | None = Field(None, alias="observedGeneration")


class NodeCounts(_Lenient):
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


class GpuCounts(_Lenient):
    """GPUs (Slurm gres/gpu) of the registered nodes, and how many jobs hold."""

    total: int = 0
    allocated: int = 0


class SlurmClusterStatus(_Lenient):
    observed_generation: int | None = Field(None, alias="observedGeneration")
    conditions: list[Condition] = Field(default_factory=list)
    nodes: NodeCounts = Field(default_factory=NodeCounts)
    gpus: GpuCounts = Field(default_factory=GpuCounts)
    pending_gpus: dict[str, int] = Field(default_factory=dict, alias="pendingGpus")
    """GPUs pending jobs ask for, per partition (the demand autoscaling follows)."""
    config_hash: str | None = Field(None, alias="configHash")
    """Hash of the Slurm configuration slurmctld runs with."""


class AutoscalingStatus(_Lenient):
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


class NodeSetStatus(_Lenient):
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


# --- SlurmReservationCheck (Kueue AdmissionCheck parameters) --------------------------


class ClusterRef(_Model):
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


class BusyNodePolicy(_Model):
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


class SlurmReservationCheckSpec(_Model):
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


class SlurmReservationCheck(_Model):
    api_version: Literal["slurmkube.io/v1alpha1"] = Field(
        "slurmkube.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["SlurmReservationCheck"] = "SlurmReservationCheck"
    metadata: ObjectMeta
    spec: SlurmReservationCheckSpec
