"""`spec.health` of a SlurmCluster: which Node signals make a node sick, and how
slurmkube may react (the planner is `slurmkube.plan.health`).

Signals are what node monitors already publish on the Node: conditions (Node
Problem Detector, NVIDIA NVSentinel's health monitors, a DCGM exporter's
adapter) and taints. A rule maps one of them to a severity; nothing is sick
by default (`rules` is empty), because condition names differ between
monitors. docs/health.md has an example for NVSentinel and NPD.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import ConfigDict, Field, model_validator

from slurmkube.api.meta import StrictModel

# What a severity asks for (docs/health.md):
# fatal  - drain in Slurm and requeue the node's running jobs;
# drain  - drain in Slurm, running jobs finish;
# ignore - known and harmless: a signal this rule matches is not sick, even if a
#          later rule would match it.
Severity = Literal["fatal", "drain", "ignore"]

# A Kubernetes qualified name (`[prefix/]name`), the grammar of condition types
# and taint keys (apimachinery validation.IsQualifiedName): it can carry no
# space, `=`, quote or `#`, so it is safe inside a Slurm node reason.
QUALIFIED_NAME: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
# A label value (taint values have the same grammar), at least one character.
LABEL_VALUE: Final = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


class ConditionMatch(StrictModel):
    """A Node condition (`status.conditions[]`) by type and status."""

    type: str = Field(max_length=316, pattern=QUALIFIED_NAME)
    """Condition type, e.g. GpuXidError, NVLinkDown, GpuHealth (as the monitor names it)."""
    status: Literal["True", "False", "Unknown"] = "True"
    """The status that means "sick": NPD and NVSentinel set problem conditions True;
    a health condition such as GpuHealth may mean sick when False."""


class TaintMatch(StrictModel):
    """A Node taint (`spec.taints[]`) by key, and optionally value and effect."""

    key: str = Field(max_length=316, pattern=QUALIFIED_NAME)
    value: str | None = Field(None, max_length=63, pattern=LABEL_VALUE)
    """Unset: any value."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Unset: any effect."""


class HealthRule(StrictModel):
    """One signal -> one severity. Each signal on a node takes the severity of the
    first rule that matches it; the node takes the worst severity of its signals."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.condition) != has(self.taint)",
                    "message": "set exactly one of condition or taint",
                }
            ]
        }
    )

    condition: ConditionMatch | None = None
    taint: TaintMatch | None = None
    severity: Severity

    @model_validator(mode="after")
    def _one_signal(self) -> HealthRule:
        if (self.condition is None) == (self.taint is None):
            raise ValueError("set exactly one of condition or taint")
        return self


class CircuitBreakerSpec(StrictModel):
    """A monitor gone wrong must not take the fleet away: slurmkube acts on at most
    `maxSickShare` of the fleet's nodes within `windowSeconds`; the rest wait, and the
    cluster's HealthCircuitOpen condition says so."""

    max_sick_share: float = Field(0.5, ge=0, le=1, alias="maxSickShare")
    """Share of the fleet's nodes (0-1), rounded down to whole nodes; 1 turns it off."""
    window_seconds: int = Field(300, ge=1, le=86400, alias="windowSeconds")


class RackEscalationSpec(StrictModel):
    """A domain with many sick nodes is withheld from gangs of the block size (a
    rack-level reason), while its healthy nodes still take small jobs."""

    domain_sick_share: float = Field(0.5, gt=0, le=1, alias="domainSickShare")
    """An NVLink domain with at least this share (0-1] of its nodes sick is escalated."""
    gang_nodes: int = Field(2, ge=1, le=100000, alias="gangNodes")
    """Workloads the Kueue bridge places on at least this many nodes are kept off an
    escalated domain; smaller ones may still use its healthy nodes."""


class RecoverySpec(StrictModel):
    """How a node comes back once its signals clear."""

    active_check: bool = Field(True, alias="activeCheck")
    """Run a check job on the node in a reservation only it can use before resuming it.
    false: resume as soon as the signals clear."""
    failures_before_hold: int = Field(2, ge=1, le=100, alias="failuresBeforeHold")
    """A node that fails this many times (turns sick, or fails its check) within
    `windowSeconds` stays drained until an admin resumes it."""
    window_seconds: int = Field(3600, ge=1, le=7 * 86400, alias="windowSeconds")
    check_timeout_seconds: int = Field(600, ge=1, le=86400, alias="checkTimeoutSeconds")
    """A check that has not passed after this long has failed."""
    check_interval_seconds: int = Field(300, ge=0, le=86400, alias="checkIntervalSeconds")
    """After a failed check (not yet a hold), wait this long before checking again."""


# --- the slurmd-side check (slurm.conf HealthCheckProgram) -------------------

# slurm.conf(5) HealthCheckNodeState: the node states on which slurmd runs it.
NodeCheckState = Literal["ANY", "ALLOC", "IDLE", "MIXED", "NONDRAINED_IDLE"]


class NodeCheckSpec(StrictModel):
    """slurmd runs the Slurm image's GPU check (`slurmkube-gpu-check`) every
    `intervalSeconds`; a node whose GPUs are missing or unhealthy drains itself with a
    `slurmkube:health:` reason, and comes back only after its active check passes.
    Off by default: the program must be in the slurmd image (slurmkube's Slurm images
    have it)."""

    enabled: bool = False
    interval_seconds: int = Field(300, ge=10, le=86400, alias="intervalSeconds")
    """slurm.conf HealthCheckInterval."""
    node_state: NodeCheckState = Field("ANY", alias="nodeState")
    """slurm.conf HealthCheckNodeState: ANY, or only nodes in that state."""


class HealthSpec(StrictModel):
    """Node health: Node conditions and taints -> an owned drain in Slurm and a taint
    for Kubernetes, with a circuit breaker, rack escalation and recovery after proof."""

    rules: list[HealthRule] = Field(default_factory=list, max_length=64)
    """Signals and their severity; empty: no node is ever sick (docs/health.md has an
    example for NVSentinel and Node Problem Detector)."""
    circuit_breaker: CircuitBreakerSpec = Field(
        default_factory=CircuitBreakerSpec, alias="circuitBreaker"
    )
    rack_escalation: RackEscalationSpec = Field(
        default_factory=RackEscalationSpec, alias="rackEscalation"
    )
    recovery: RecoverySpec = Field(default_factory=RecoverySpec)
    node_check: NodeCheckSpec = Field(default_factory=NodeCheckSpec, alias="nodeCheck")
    """The slurmd-side GPU check (slurm.conf HealthCheckProgram)."""

    @property
    def acts(self) -> bool:
        """Anything can make a node sick: a rule, or the slurmd-side check."""
        return bool(self.rules) or self.node_check.enabled
