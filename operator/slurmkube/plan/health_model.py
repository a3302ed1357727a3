"""What the health planner reads and returns (plan.health): a frozen snapshot in,
verdicts, ordered actions and the next memory out.

The memory is the planner's own record between passes (when a node turned
sick, its failures, its active check); the caller keeps it and hands it back.
Everything else is observed: Node conditions and taints, the node's Slurm
state, and the state of its check job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Literal

from slurmkube.api import grammar
from slurmkube.api import well_known as wk
from slurmkube.api.grammar import InvalidValue
from slurmkube.api.models import KubeNode

Verdict = Literal["healthy", "sick", "held", "checking"]
# The node's check job as Slurm shows it: none seen, running, or ended.
CheckResult = Literal["none", "running", "passed", "failed"]
SEVERITY_ORDER: Final = {"drain": 1, "fatal": 2}
_CONDITION_STATUSES: Final = frozenset({"True", "False", "Unknown"})
_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class SlurmHealthView:
    """What health needs of a Slurm node (the controller converts the adapter's Node)."""

    drain: bool = False
    reason: str = ""
    busy: bool = False  # a job runs there (ALLOCATED, MIXED or COMPLETING)


@dataclass(frozen=True, slots=True)
class NodeTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class HealthNode:
    name: str
    # NVLink domain (the topology's domain label); None: in no domain.
    domain: str | None = None
    conditions: tuple[tuple[str, str], ...] = ()  # (type, status)
    taints: tuple[NodeTaint, ...] = ()
    # None: not a Slurm node: no Slurm action, and nothing to check before the taint
    # goes. When Slurm cannot be asked, do not plan health at all (as plan.cluster).
    slurm: SlurmHealthView | None = None
    check: CheckResult = "none"
    # Lent to a Kueue workload (the lease label): its slurmd pod is gone, so its
    # check waits for the lease to end, and its lease's drain is health's to reword.
    lent: bool = False

    @property
    def tainted(self) -> bool:
        return any(t.key == wk.TAINT_UNHEALTHY for t in self.taints)


@dataclass(frozen=True, slots=True)
class NodeMemory:
    """One node's health record between passes (times in seconds, the caller's clock)."""

    sick_since: float | None = None  # the current episode began
    acted_at: float | None = None  # health last began acting on the node (circuit breaker)
    failures: tuple[float, ...] = ()  # turned sick or failed a check, within the window
    check_started: float | None = None
    check_failed_at: float | None = None
    held: bool = False
    # Our hold's drain was seen in Slurm: from then on, no drain means an admin resumed it.
    held_seen: bool = False


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    nodes: tuple[HealthNode, ...]
    memory: Mapping[str, NodeMemory] = field(default_factory=dict)
    now: float = 0.0


class ActionKind(StrEnum):
    DRAIN = "drain"  # State=DRAIN with `reason` (running jobs finish)
    REQUEUE = "requeue"  # requeue the jobs running on the node
    TAINT = "taint"  # add slurmkube.io/unhealthy:NoSchedule
    UNTAINT = "untaint"  # remove it
    RESERVE = "reserve"  # reservation `reservation` holding only this node
    RESUME = "resume"  # UNDRAIN, only a drain whose reason is health's
    RUN_CHECK = "run-check"  # the active check job, inside `reservation`
    RELEASE = "release"  # delete reservation `reservation`


@dataclass(frozen=True, slots=True)
class HealthAction:
    kind: ActionKind
    node: str
    reason: str = ""
    reservation: str = ""

    def describe(self) -> str:
        detail = {
            ActionKind.DRAIN: f"drain ({self.reason})",
            ActionKind.REQUEUE: "requeue its running jobs",
            ActionKind.TAINT: f"taint {wk.TAINT_UNHEALTHY}:NoSchedule",
            ActionKind.UNTAINT: f"remove taint {wk.TAINT_UNHEALTHY}",
            ActionKind.RESERVE: f"reserve it alone ({self.reservation})",
            ActionKind.RESUME: "resume (undrain)",
            ActionKind.RUN_CHECK: f"run the active check in {self.reservation}",
            ActionKind.RELEASE: f"delete reservation {self.reservation}",
        }
        return detail[self.kind]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: str
    verdict: Verdict
    severity: str | None = None  # fatal or drain while sick
    causes: tuple[str, ...] = ()
    # In the order the controller must apply them.
    actions: tuple[HealthAction, ...] = ()
    # Sick, but the circuit breaker holds its actions back.
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class DomainEscalation:
    """An NVLink domain withheld from gangs of the block size; small jobs still run."""

    domain: str
    nodes: tuple[str, ...]
    out: int  # nodes of the domain health has taken out
    reason: str


@dataclass(frozen=True, slots=True)
class CircuitState:
    open: bool
    acted: int  # nodes acted on within the window, this pass included
    allowed: int  # floor(maxSickShare x fleet)
    waiting: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HealthPlan:
    verdicts: tuple[NodeVerdict, ...]
    memory: Mapping[str, NodeMemory]
    escalations: tuple[DomainEscalation, ...]
    circuit: CircuitState

    @property
    def actions(self) -> tuple[HealthAction, ...]:
        return tuple(a for v in self.verdicts for a in v.actions)


def health_node(
    node: KubeNode,
    domain_label: str,
    slurm: SlurmHealthView | None,
    check: CheckResult = "none",
) -> HealthNode:
    """A Kubernetes Node as the health planner reads it; a value no API server would
    hand out is an error naming the node and field."""
    where = f"Node {node.metadata.name}"
    name = grammar.hostname(node.metadata.name, f"{where} metadata.name")
    for i, c in enumerate(node.status.conditions):
        if c.status not in _CONDITION_STATUSES:
            raise InvalidValue(
                f"{where} status.conditions[{i}].status", c.status, "True, False or Unknown"
            )
    for i, t in enumerate(node.spec.taints):
        if t.effect not in _TAINT_EFFECTS:
            raise InvalidValue(
                f"{where} spec.taints[{i}].effect",
                t.effect,
                "NoSchedule, PreferNoSchedule or NoExecute",
            )
    return HealthNode(
        name=name,
        domain=node.metadata.labels.get(domain_label) or None,
        conditions=tuple((c.type, c.status) for c in node.status.conditions),
        taints=tuple(NodeTaint(t.key, t.value, t.effect) for t in node.spec.taints),
        slurm=slurm,
        check=check,
    )
