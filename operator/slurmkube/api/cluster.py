"""The SlurmCluster CRD: the Slurm cluster a user asks for."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from slurmkube.api import grammar, slurm_conf_keys
from slurmkube.api import well_known as wk
from slurmkube.api.health import HealthSpec
from slurmkube.api.login import OBJECT_NAME_PATTERN, LoginSpec
from slurmkube.api.meta import (
    LabelSelector,
    ObjectMeta,
    Resources,
    StrictModel,
    Toleration,
)
from slurmkube.api.slurm_version import (
    SUPPORTED_NAMES,
    SlurmVersion,
    cluster_slurm_version,
    parse_slurm_version,
)

# --- SlurmCluster ---------------------------------------------------------------------


class BackfillSpec(StrictModel):
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


class PriorityWeights(StrictModel):
    """priority/multifactor weights (slurm.conf(5) PriorityWeight*)."""

    age: int = Field(1000, ge=0, le=4_294_967_295)
    fairshare: int = Field(10000, ge=0, le=4_294_967_295)
    job_size: int = Field(1000, ge=0, le=4_294_967_295, alias="jobSize")
    partition: int = Field(1000, ge=0, le=4_294_967_295)
    qos: int = Field(10000, ge=0, le=4_294_967_295)


class SchedulerSpec(StrictModel):
    backfill: BackfillSpec = Field(default_factory=BackfillSpec)
    priority_weights: PriorityWeights = Field(
        default_factory=PriorityWeights,
        alias="priorityWeights",
    )


class PartitionSpec(StrictModel):
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
    topology: Literal["nvlink", "network", "flat"] | None = None
    """Slurm 25.05+ (topology.yaml(5)): the named topology jobs of this partition are
    placed in (slurm.conf(5) partition `Topology=`): `nvlink`, the NVLink domains as
    blocks; `network`, the switch tree of `topology.tierLabels`; `flat`, none. Unset:
    the cluster default, `topology.plugin`. While the fleet gives the named topology no
    block or switch, the partition uses `flat`."""

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


class TopologySpec(StrictModel):
    """Where the fleet topology comes from (node labels) and how Slurm sees it."""

    plugin: Literal["block", "tree", "none"] = "block"
    nvlink_domain_label: str = Field(wk.LABEL_GPU_CLIQUE, alias="nvlinkDomainLabel")
    # Ordered from the tier closest to the nodes (leaf) up (spine, core).
    tier_labels: list[str] = Field(
        default_factory=lambda: [wk.LABEL_LEAF, wk.LABEL_SPINE], alias="tierLabels"
    )
    # Base block size (topology.conf(5) BlockSizes). Unset: the size that puts the
    # most nodes into base blocks (base x domains at least that large; for racks of
    # 18 and 16 nodes, 16). Domains smaller than the base are left out and reported.
    block_size: int | None = Field(None, ge=1, le=4096, alias="blockSize")
    debounce_seconds: float = Field(1.0, ge=0, le=60, alias="debounceSeconds")
    """How long Node and NodeSet changes must be quiet before the config is rebuilt
    and applied: a burst of label changes costs one slurmctld reconfigure. A burst
    that never goes quiet is applied every 5 x this."""


class PersistenceSpec(StrictModel):
    """slurmctld's StateSaveLocation on a PersistentVolumeClaim."""

    enabled: bool = True
    """false: state on an emptyDir (lost with the pod; for tests and throw-away clusters)."""
    size: str = Field("10Gi", json_schema_extra={"pattern": r"^[0-9]+(Ki|Mi|Gi|Ti)$"})
    storage_class_name: str | None = Field(None, alias="storageClassName")


class ControllerSpec(StrictModel):
    persistence: PersistenceSpec = Field(default_factory=PersistenceSpec)
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    """Where slurmctld and slurmrestd pods run (CPU nodes, usually)."""
    tolerations: list[Toleration] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)
    """slurmctld's container requests and limits (its reloader sidecar asks 10m, 16Mi)."""


class SlurmdSpec(StrictModel):
    cgroups: bool = True
    """proctrack/cgroup and task/cgroup (cgroup.conf); false: linuxproc, no task plugin."""
    config_overrides: bool = Field(False, alias="configOverrides")
    """SlurmdParameters=config_overrides: trust slurm.conf's CPUs/memory over what slurmd
    detects. Only for simulated or test nodes; real nodes should report what they have."""


class RestApiTlsSpec(StrictModel):
    """TLS in front of slurmrestd: slurmrestd listens on a UNIX socket in its pod and
    stunnel serves it on the port, so no token or reply leaves the pod in clear."""

    enabled: bool = True
    """false: slurmrestd serves plain HTTP on the port (for a network that encrypts
    pod traffic itself, e.g. a service mesh or WireGuard)."""
    secret_name: str | None = Field(
        None,
        alias="secretName",
        max_length=253,
        json_schema_extra={"pattern": OBJECT_NAME_PATTERN},
    )
    """A `kubernetes.io/tls` Secret (keys `tls.crt`, `tls.key`, `ca.crt`; cert-manager
    writes these) for slurmrestd's Service names. Unset: the operator issues one,
    `<cluster>-restapi-tls`, from a CA of the cluster's own."""

    @field_validator("secret_name")
    @classmethod
    def _object_name(cls, v: str | None) -> str | None:
        if v is not None and re.fullmatch(OBJECT_NAME_PATTERN, v) is None:
            raise ValueError(f"{v!r} is not a Kubernetes object name (lowercase RFC 1123)")
        return v


class RestApiSpec(StrictModel):
    replicas: int = Field(1, ge=0, le=16)
    """slurmrestd replicas; 0 disables the REST API (the operator then uses scontrol)."""
    resources: Resources = Field(default_factory=Resources)
    tls: RestApiTlsSpec = Field(default_factory=RestApiTlsSpec)


class DatabaseRef(StrictModel):
    host: str
    port: int = Field(3306, ge=1, le=65535)
    name: str = Field("slurm_acct_db", json_schema_extra={"pattern": r"^[A-Za-z0-9_]{1,64}$"})
    secret_name: str = Field(alias="secretName")
    """Secret with keys `username` and `password` for the external MariaDB."""


class AccountingSpec(StrictModel):
    enabled: bool = False
    database: DatabaseRef | None = None
    resources: Resources = Field(default_factory=Resources)
    """slurmdbd's container requests and limits."""

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


class AuthSpec(StrictModel):
    """Where the shared keys live. Unset: generated into `<cluster>-auth` once, never logged."""

    slurm_key_secret: str | None = Field(None, alias="slurmKeySecret")
    jwt_key_secret: str | None = Field(None, alias="jwtKeySecret")


class SlurmSpec(StrictModel):
    """The Slurm release the cluster runs: which files and keys slurmkube renders."""

    version: str | None = Field(None, json_schema_extra={"enum": list(SUPPORTED_NAMES)})
    """The release series, `26.05` or `24.11`. Unset: the series the tag of `image`
    names (`slurmkube/slurm:24.11.5` -> 24.11), else 26.05. The version in use is in
    `status.slurmVersion`. 25.05+ reads topology.yaml, 24.11 topology.conf."""

    @field_validator("version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        return None if v is None else str(parse_slurm_version(v, ""))


class SlurmClusterSpec(StrictModel):
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
    cluster_domain: str = Field(
        "cluster.local",
        alias="clusterDomain",
        max_length=63,
        json_schema_extra={"pattern": grammar.SCHEMA_PATTERNS["hostname"]},
    )
    """The Kubernetes cluster's DNS domain (the kubelets' --cluster-domain): slurmd,
    sackd and slurmdbd reach slurmctld by `<pod>.<service>.<namespace>.svc.<domain>`."""
    image: str = wk.DEFAULT_SLURM_IMAGE
    """The slurm image (slurmctld, slurmd, slurmrestd, sackd entrypoints)."""
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)
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
    health: HealthSpec = Field(default_factory=HealthSpec)
    deletion_policy: Literal["Drain", "Delete"] = Field("Drain", alias="deletionPolicy")
    """Drain: deleting the SlurmCluster drains every node and waits while jobs run
    (condition Deleting; the annotation slurmkube.io/force-delete=true skips the
    wait). Delete: it goes at once, running jobs die with their pods."""
    ready_node_share: float = Field(0.9, alias="readyNodeShare", ge=0.0, le=1.0)
    """Ready needs this share of the nodes that should run slurmd to respond in
    Slurm (at fleet scale some node is always down; 1.0: every node)."""
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
                    "rule": "self.all(l, l.split('=')[0].lowerAscii() in ["
                    + ", ".join(f"'{k}'" for k in sorted(slurm_conf_keys.EXTRA_CONFIG_KEYS))
                    + "])",
                    "message": "extraConfig may not set a key slurmkube manages or one "
                    "that runs a program; allowed keys: docs/security.md",
                }
            ],
        },
    )
    """Extra slurm.conf directives, one `Key=Value` each, for keys on the allow-list
    (`slurmkube.api.slurm_conf_keys`): never a key slurmkube renders or a program."""

    @field_validator("cluster_domain")
    @classmethod
    def _cluster_domain(cls, v: str) -> str:
        return grammar.hostname(v, "")

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

    def slurm_version(self, spec: str) -> SlurmVersion:
        """The release the cluster renders for (slurmkube.api.slurm_version); `spec`
        says where this spec is, for errors."""
        return cluster_slurm_version(self.slurm.version, self.image, spec)


class SlurmCluster(StrictModel):
    api_version: Literal["slurmkube.io/v1alpha1"] = Field(
        "slurmkube.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["SlurmCluster"] = "SlurmCluster"
    metadata: ObjectMeta
    spec: SlurmClusterSpec = Field(default_factory=SlurmClusterSpec)

    @property
    def slurm_cluster_name(self) -> str:
        return self.spec.cluster_name or self.metadata.name

    @property
    def slurm_version(self) -> SlurmVersion:
        return self.spec.slurm_version(f"SlurmCluster {self.metadata.name} spec")
