"""The AllocationSource CRD: where a fleet's team allocations come from.

One allocation per team (members, concurrent GPUs, a GPU-hour budget for a
period, a fair-share weight, a priority tier, whether it may borrow) is
compiled into Slurm associations/QOS and Kueue queues by
`slurmkube.plan.policy`. The same `Team` model is the item of the plain JSON
document an `http` source serves (docs/allocations.schema.json).

A team name becomes a Slurm account, a QOS name and Kubernetes object names,
so it must pass `grammar.slurm_account`; Slurm users pass `grammar.slurm_user`:
nothing here can add a key or a second command to an `sacctmgr` argument list.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict

from slurmkube.api import grammar
from slurmkube.api.group_directory import GROUP_NAME_PATTERN, GroupDirectory, group_name
from slurmkube.api.meta import LenientModel, ObjectMeta, SecretKeyRef, StrictModel
from slurmkube.api.status import Condition

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_ACCOUNT: JsonDict = {"pattern": grammar.SCHEMA_PATTERNS["account"]}
_URL: JsonDict = {"pattern": r"^https?://[^\s]+$"}


class TeamMembers(StrictModel):
    """Who a team's allocation applies to, on each scheduler."""

    slurm_users: list[str] = Field(
        default_factory=list,
        alias="slurmUsers",
        max_length=10_000,
        json_schema_extra={"items": {"type": "string", "pattern": grammar.SCHEMA_PATTERNS["user"]}},
    )
    """Slurm (login) user names: each gets an association under the team's account."""
    namespaces: list[str] = Field(
        default_factory=list,
        max_length=1_000,
        json_schema_extra={"items": {"type": "string", "pattern": _DNS_LABEL}},
    )
    """Kubernetes namespaces whose workloads count for the team (a LocalQueue in each)."""
    groups: list[str] = Field(
        default_factory=list,
        max_length=1_000,
        json_schema_extra={
            "items": {"type": "string", "maxLength": 256, "pattern": GROUP_NAME_PATTERN}
        },
    )
    """Directory groups (spec.directory): their members are Slurm users of the team
    too, read again every spec.directory.pollSeconds."""

    @field_validator("slurm_users")
    @classmethod
    def _users(cls, v: list[str]) -> list[str]:
        users: list[str] = [grammar.slurm_user(u, f"[{i}]") for i, u in enumerate(v)]
        if len(set(users)) != len(users):
            raise ValueError("a user is listed twice")
        return users

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        names = [group_name(g, f"[{i}]") for i, g in enumerate(v)]
        if len(set(names)) != len(names):
            raise ValueError("a group is listed twice")
        return names

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for i, ns in enumerate(v):
            if not re.fullmatch(_DNS_LABEL, ns):
                raise ValueError(f"[{i}]: {ns!r} is not a namespace name (an RFC 1123 label)")
        return v


class BudgetPeriod(StrictModel):
    """The period a GPU-hour budget is for; the next one starts when it ends."""

    start: datetime
    """When the period starts (RFC 3339, with a time zone)."""
    length_days: int = Field(alias="lengthDays", ge=1, le=3660)
    """Length of one period in days (90 for a quarter)."""

    @field_validator("start")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("needs a time zone (e.g. 2026-10-01T00:00:00Z)")
        return v


class TeamQuota(StrictModel):
    """What a team may use; a `Team` without its name and members."""

    gpus: int = Field(ge=0, le=10_000_000)
    """Concurrent GPUs, summed over Slurm and Kueue."""
    gpu_hours: int | None = Field(None, alias="gpuHours", ge=0, le=10_000_000_000)
    """GPU-hour budget per period, summed over Slurm and Kueue; unset: no budget."""
    period: BudgetPeriod | None = None
    """The budget's period; required with gpuHours."""
    fair_share_weight: int = Field(1, alias="fairShareWeight", ge=1, le=1_000_000)
    """Slurm Fairshare of the account and Kueue fairSharing.weight of its ClusterQueue."""
    tier: str | None = Field(None, json_schema_extra=_ACCOUNT)
    """Priority tier (a name from spec.tiers); unset: spec.defaultTier."""
    borrowing: bool = False
    """Whether the team may borrow idle quota of others in the fleet's Kueue Cohort and
    lend its own; false: its quota is its own and it never exceeds it."""

    @model_validator(mode="after")
    def _budget_needs_period(self) -> TeamQuota:
        if self.gpu_hours is not None and self.period is None:
            raise ValueError("gpuHours needs a period (start, lengthDays)")
        return self


class Team(TeamQuota):
    """One team's allocation."""

    name: str = Field(json_schema_extra=_ACCOUNT)
    """The team: its Slurm account, budget QOS prefix and Kueue queue names."""
    members: TeamMembers = Field(default_factory=TeamMembers)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return grammar.slurm_account(v, "")


class Tier(StrictModel):
    """A priority tier: a Slurm QOS priority and a Kueue WorkloadPriorityClass value."""

    name: str = Field(json_schema_extra=_ACCOUNT)
    priority: int = Field(ge=0, le=1_000_000_000)
    """Higher runs first; a tier preempts the tiers below it (Slurm Preempt=)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return grammar.slurm_account(v, "")


def _default_tiers() -> list[Tier]:
    return [
        Tier(name="high", priority=1000),
        Tier(name="normal", priority=100),
        Tier(name="low", priority=10),
    ]


class ColdFrontProject(StrictModel):
    """A project's account name, namespaces and quota, where its ColdFront allocation
    does not set them: the allocation's attributes (slurm_account_name, slurmkube_gpus,
    "Accelerator Usage (Hours)", ...) override this quota; this account name overrides
    slurm_account_name."""

    title: str = Field(max_length=255)
    """The ColdFront project title (as /api/projects returns it)."""
    account: str = Field(json_schema_extra=_ACCOUNT)
    """The team name (Slurm account) for that project."""
    namespaces: list[str] = Field(
        default_factory=list, json_schema_extra={"items": {"type": "string", "pattern": _DNS_LABEL}}
    )
    """Namespaces of the team (ColdFront has none)."""
    quota: TeamQuota | None = None
    """Overrides defaultQuota for this project."""

    @field_validator("account")
    @classmethod
    def _account(cls, v: str) -> str:
        return grammar.slurm_account(v, "")


class ColdFrontSource(StrictModel):
    """ColdFront's REST API (its `api` plugin): projects with an Active allocation
    on `resourceName` become teams; their active project users become Slurm users;
    the allocation's attributes set the quota (docs/policy.md)."""

    url: str = Field(max_length=2048, json_schema_extra=_URL)
    """Base URL of the API, e.g. https://coldfront.example.org/api."""
    token_secret_ref: SecretKeyRef = Field(alias="tokenSecretRef")
    """Secret key holding a DRF token (`Authorization: Token ...`) of a staff user."""
    resource_name: str = Field(alias="resourceName", max_length=128)
    """The ColdFront Resource that is this fleet."""
    default_quota: TeamQuota = Field(alias="defaultQuota")
    """The quota of a project whose allocation and `projects` entry do not set one."""
    projects: list[ColdFrontProject] = Field(default_factory=list, max_length=10_000)


class HttpSource(StrictModel):
    """A plain JSON document (docs/allocations.schema.json), polled with ETags."""

    url: str = Field(max_length=2048, json_schema_extra=_URL)
    ca_secret_ref: SecretKeyRef | None = Field(None, alias="caSecretRef")
    """PEM bundle to verify the server with; unset: the system's trust store."""
    poll_seconds: int = Field(60, alias="pollSeconds", ge=5, le=86_400)
    """How often to ask (If-None-Match with the last ETag)."""


class InlineSource(StrictModel):
    teams: list[Team] = Field(default_factory=list, max_length=10_000)


_ONE_SOURCE = "set exactly one of coldfront, http, inline"


class AllocationSourceSpec(StrictModel):
    """Where a fleet's team allocations come from, and the fleet-wide policy knobs."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.coldfront), has(self.http), has(self.inline)]"
                    ".filter(x, x).size() == 1",
                    "message": _ONE_SOURCE,
                }
            ]
        }
    )

    coldfront: ColdFrontSource | None = None
    http: HttpSource | None = None
    inline: InlineSource | None = None
    directory: GroupDirectory | None = None
    """The LDAP directory teams' members.groups are read from; required when a team
    names groups."""
    cluster_ref: str | None = Field(
        None, alias="clusterRef", max_length=63, json_schema_extra={"pattern": _DNS_LABEL}
    )
    """The SlurmCluster (same namespace) whose slurmdbd gets the accounts, associations
    and QOS, and whose slurm.conf gets the policy's keys; unset: Kueue only."""
    tiers: list[Tier] = Field(default_factory=_default_tiers, min_length=1, max_length=16)
    """Priority tiers; order does not matter, priority does."""
    default_tier: str = Field("normal", alias="defaultTier", json_schema_extra=_ACCOUNT)
    half_life_hours: int = Field(168, alias="halfLifeHours", ge=1, le=24 * 366)
    """Usage half-life: Slurm PriorityDecayHalfLife and Kueue usageHalfLifeTime."""
    cohort: str = Field("fleet", max_length=63, json_schema_extra={"pattern": _DNS_LABEL})
    """The Kueue Cohort every team's ClusterQueue joins."""
    resource_flavor: str = Field(
        "default-flavor",
        alias="resourceFlavor",
        max_length=253,
        json_schema_extra={"pattern": _DNS_LABEL},
    )
    """The Kueue ResourceFlavor that carries the teams' nvidia.com/gpu quota."""
    kueue_gpus: int | None = Field(None, alias="kueueGPUs", ge=0, le=10_000_000)
    """The GPUs Kueue may hold at once over the Cohort: split among the teams by
    fairShareWeight into their nominalQuota (a team never above its own gpus).
    Unset: the sum of the teams' gpus, so each team's nominalQuota is its gpus."""

    @model_validator(mode="after")
    def _consistent(self) -> AllocationSourceSpec:
        if sum(s is not None for s in (self.coldfront, self.http, self.inline)) != 1:
            raise ValueError(_ONE_SOURCE)
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError("tiers: a tier name is used twice")
        if self.default_tier not in names:
            raise ValueError(f"defaultTier: {self.default_tier!r} is not one of tiers {names}")
        return self


class TeamUsageStatus(LenientModel):
    slurm_gpus: int = Field(0, alias="slurmGPUs")
    kueue_gpus: int = Field(0, alias="kueueGPUs")
    period_gpu_hours: float = Field(0.0, alias="periodGPUHours")
    """GPU-hours this period, Slurm + Kueue (what the budget thresholds read)."""
    slurm_period_gpu_hours: float = Field(0.0, alias="slurmPeriodGPUHours")
    kueue_period_gpu_hours: float = Field(0.0, alias="kueuePeriodGPUHours")
    decayed_gpu_hours: float = Field(0.0, alias="decayedGPUHours")
    """Usage decayed with halfLifeHours (what fair share reads)."""


class TeamGatesStatus(LenientModel):
    slurm_grp_tres: int = Field(0, alias="slurmGrpTRES")
    kueue_nominal_quota: int = Field(0, alias="kueueNominalQuota")
    kueue_stop_policy: str = Field("None", alias="kueueStopPolicy")


class TeamStatus(LenientModel):
    """One team as the operator last enforced it."""

    name: str
    gpus: int = 0
    gpu_hours: float | None = Field(None, alias="gpuHours")
    """The period's entitlement (base + carry-over); unset: no budget."""
    tier: str = ""
    """The tier new work runs at now."""
    budget_level: str = Field("OK", alias="budgetLevel")
    usage: TeamUsageStatus = Field(default_factory=TeamUsageStatus)
    headroom: int = 0
    """GPUs the team may still start, on both schedulers together."""
    gates: TeamGatesStatus = Field(default_factory=TeamGatesStatus)
    reason: str = ""


class AllocationSourceStatus(LenientModel):
    conditions: list[Condition] = Field(default_factory=list)
    last_sync_time: str | None = Field(None, alias="lastSyncTime")
    etag: str | None = None
    """The ETag of the document last applied (http sources)."""
    teams: int = 0
    allocations: list[TeamStatus] = Field(default_factory=list)
    """Per team: quota, budget, usage on each scheduler, headroom, gates, reason."""


class AllocationSource(StrictModel):
    api_version: Literal["slurmkube.io/v1alpha1"] = Field(
        "slurmkube.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["AllocationSource"] = "AllocationSource"
    metadata: ObjectMeta
    spec: AllocationSourceSpec


class AllocationDocument(StrictModel):
    """The plain JSON document an `http` source serves: `{"teams": [...]}`."""

    model_config = ConfigDict(title="slurmkube allocations")

    teams: list[Team] = Field(max_length=10_000)
