"""What the health controller keeps, shows and writes around `plan_health` (pure).

- The record kept between passes, in an annotation of the SlurmCluster so an
  operator restart forgets no first-sick time, failure or running check: the
  planner's memory plus the id of each node's check job (the planner knows a
  check by its start time; the controller needs the job to read its result).
- The check job's result from Slurm's job states.
- The Node's taints with slurmkube's own added or removed, every other
  taint kept as it is.
- `status.health` of the SlurmCluster, its HealthCircuitOpen condition, the
  Events of a pass (one per action, names aggregated as plan/events.py) and
  what the metrics count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final

from slurmkube.api import well_known as wk
from slurmkube.plan.events import aggregate
from slurmkube.plan.health_model import (
    ActionKind,
    CheckResult,
    HealthPlan,
    HealthSnapshot,
    NodeMemory,
    NodeVerdict,
)
from slurmkube.plan.health_rules import CHECK_FAILED

# squeue(1) JOB STATE CODES that end a job without success.
JOB_FAILED_STATES: Final = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
# Every state a check job can be in, for a job list that finds it whatever its state.
JOB_STATES: Final = JOB_FAILED_STATES | {
    "COMPLETED",
    "COMPLETING",
    "CONFIGURING",
    "PENDING",
    "REQUEUED",
    "RUNNING",
    "STOPPED",
    "SUSPENDED",
}
# Nodes listed by name in status.health; the counts cover the rest.
STATUS_NODES: Final = 100
CIRCUIT_CONDITION: Final = "HealthCircuitOpen"
_MEMORY_KEYS: Final = {
    "sick_since": "sickSince",
    "acted_at": "actedAt",
    "failures": "failures",
    "check_started": "checkStarted",
    "check_failed_at": "checkFailedAt",
    "held": "held",
    "held_seen": "heldSeen",
}


@dataclass(frozen=True, slots=True)
class HealthRecord:
    """The planner's memory and each checking node's job id, as kept across restarts."""

    memory: Mapping[str, NodeMemory] = field(default_factory=dict)
    checks: Mapping[str, int] = field(default_factory=dict)


def _memory_json(memory: NodeMemory) -> dict[str, Any]:
    default = NodeMemory()
    out: dict[str, Any] = {}
    for f in fields(NodeMemory):
        value = getattr(memory, f.name)
        if value != getattr(default, f.name):
            out[_MEMORY_KEYS[f.name]] = list(value) if isinstance(value, tuple) else value
    return out


def record_text(record: HealthRecord) -> str:
    """The annotation's value: compact, sorted, so an unchanged record is the same text."""
    doc = {
        "nodes": {n: _memory_json(m) for n, m in sorted(record.memory.items())},
        "checks": dict(sorted(record.checks.items())),
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _node_memory(raw: Mapping[str, Any]) -> NodeMemory:
    """Fields of the wrong type read as unset: a hand-edited record costs history,
    never a crash (a held node stays held by its Slurm reason alone)."""
    values: dict[str, Any] = {}
    for name, key in _MEMORY_KEYS.items():
        value = raw.get(key)
        if name in ("held", "held_seen"):
            values[name] = value is True
        elif name == "failures":
            items = value if isinstance(value, list) else []
            values[name] = tuple(t for t in map(_number, items) if t is not None)
        else:
            values[name] = _number(value)
    return NodeMemory(**values)


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_record(text: str | None) -> HealthRecord:
    """The record from the annotation; missing or unreadable: an empty record."""
    try:
        doc = json.loads(text or "{}")
    except json.JSONDecodeError:
        return HealthRecord()
    if not isinstance(doc, dict):
        return HealthRecord()
    nodes = _object(doc.get("nodes"))
    checks = _object(doc.get("checks"))
    return HealthRecord(
        memory={n: _node_memory(m) for n, m in nodes.items() if isinstance(m, dict)},
        checks={n: j for n, j in checks.items() if isinstance(j, int) and not isinstance(j, bool)},
    )


def check_result(states: frozenset[str] | None) -> CheckResult:
    """The check job's result from its Slurm states (None: Slurm lists no such job)."""
    if states is None:
        return "none"
    if "COMPLETED" in states:
        return "passed"
    if states & JOB_FAILED_STATES:
        return "failed"
    return "running"


def next_checks(
    checks: Mapping[str, int], plan: HealthPlan, submitted: Mapping[str, int]
) -> dict[str, int]:
    """Check job ids still wanted: a node keeps its job while the planner's memory has
    a check started; a job submitted in this pass replaces the one before."""
    running = {n for n, m in plan.memory.items() if m.check_started is not None}
    kept = {n: j for n, j in checks.items() if n in running}
    kept.update({n: j for n, j in submitted.items() if n in running})
    return dict(sorted(kept.items()))


def with_health_taint(taints: Sequence[Mapping[str, Any]], tainted: bool) -> list[dict[str, Any]]:
    """The Node's taints with slurmkube's own present or not; every other taint,
    whoever set it, kept as it was and where it was."""
    others = [dict(t) for t in taints if t.get("key") != wk.TAINT_UNHEALTHY]
    if tainted:
        others.append({"key": wk.TAINT_UNHEALTHY, "effect": "NoSchedule"})
    return others


def _verdict_summary(verdicts: Iterable[NodeVerdict], gpus: Mapping[str, int]) -> dict[str, Any]:
    """Counts by verdict, the GPUs of healthy nodes, the first STATUS_NODES not healthy."""
    counts = {"sick": 0, "held": 0, "checking": 0, "waiting": 0}
    unhealthy, healthy_gpus = [], 0
    for v in verdicts:
        if v.verdict == "healthy":
            healthy_gpus += gpus.get(v.node, 0)
            continue
        counts["waiting" if v.waiting else v.verdict] += 1
        entry: dict[str, Any] = {"name": v.node, "verdict": v.verdict}
        if v.severity:
            entry["severity"] = v.severity
        if v.causes:
            entry["causes"] = list(v.causes)
        if v.waiting:
            entry["waiting"] = True
        unhealthy.append(entry)
    return {**counts, "healthyGpus": healthy_gpus, "nodes": unhealthy[:STATUS_NODES]}


def health_status(plan: HealthPlan, gpus: Mapping[str, int]) -> dict[str, Any]:
    """`status.health`: counts by verdict, the GPUs of healthy nodes, the breaker,
    escalated domains, and the first STATUS_NODES nodes that are not healthy."""
    summary = _verdict_summary(plan.verdicts, gpus)
    return {
        **{k: v for k, v in summary.items() if k != "nodes"},
        "circuit": {
            "open": plan.circuit.open,
            "acted": plan.circuit.acted,
            "allowed": plan.circuit.allowed,
        },
        "domains": [
            {"domain": e.domain, "out": e.out, "size": len(e.nodes), "reason": e.reason}
            for e in plan.escalations
        ],
        "nodes": summary["nodes"],
    }


def node_set_health(
    plan: HealthPlan, gpus: Mapping[str, int], node_set_of: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Each NodeSet's `status.health`: the summary of its own nodes' verdicts."""
    by_set: dict[str, list[NodeVerdict]] = {}
    for v in plan.verdicts:
        if v.node in node_set_of:
            by_set.setdefault(node_set_of[v.node], []).append(v)
    return {name: _verdict_summary(found, gpus) for name, found in by_set.items()}


def node_set_health_empty() -> dict[str, Any]:
    """A NodeSet none of whose nodes health has a verdict for."""
    return _verdict_summary((), {})


def circuit_condition(plan: HealthPlan, generation: int | None, now: str) -> dict[str, Any]:
    """HealthCircuitOpen (metav1.Condition): True while sick nodes wait on the breaker."""
    circuit = plan.circuit
    if circuit.open:
        reason = "TooManySick"
        message = (
            f"{len(circuit.waiting)} sick nodes wait: health acted on {circuit.acted} of "
            f"at most {circuit.allowed} in its window ({', '.join(circuit.waiting[:10])})"
        )
    else:
        reason, message = "Closed", f"health acted on {circuit.acted} of at most {circuit.allowed}"
    return {
        "type": CIRCUIT_CONDITION,
        "status": "True" if circuit.open else "False",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": now,
        "observedGeneration": generation,
    }


@dataclass(frozen=True, slots=True)
class HealthEvent:
    reason: str
    message: str
    warning: bool


_EVENTS: Final = (
    (ActionKind.DRAIN, "HealthDrained", "drained in Slurm", True),
    (ActionKind.REQUEUE, "HealthRequeued", "requeued the jobs of", True),
    (ActionKind.RUN_CHECK, "HealthCheckStarted", "started the active check on", False),
    (ActionKind.RESUME, "HealthResumed", "resumed in Slurm", False),
    (ActionKind.UNTAINT, "HealthRecovered", "returned to Kubernetes", False),
)


def health_events(
    plan: HealthPlan, done: Sequence[tuple[ActionKind, str]], *, circuit_opened: bool
) -> list[HealthEvent]:
    """One Event per kind of action applied in a pass (`done`: kind and node), names
    aggregated; and one when the circuit breaker opens (not every pass it stays open)."""
    events = []
    for kind, reason, action, warning in _EVENTS:
        nodes = [n for k, n in done if k == kind]
        if nodes:
            events.append(HealthEvent(reason, aggregate(action, "nodes", nodes), warning))
    held = [v.node for v in plan.verdicts if v.verdict == "held" and v.actions]
    if held:
        message = aggregate("holding until an admin resumes", "nodes", held)
        events.append(HealthEvent("HealthHeld", message, True))
    if circuit_opened:
        message = aggregate("circuit breaker holds back", "sick nodes", plan.circuit.waiting)
        events.append(HealthEvent(CIRCUIT_CONDITION, message, True))
    return events


def check_outcomes(snap: HealthSnapshot, plan: HealthPlan) -> dict[str, int]:
    """Checks that ended in this pass: passed, or failed (the job failed, or the
    check timed out: the node was checking and is now sick or held)."""
    outcomes = {"passed": 0, "failed": 0}
    nodes = {n.name: n for n in snap.nodes}
    for v in plan.verdicts:
        before = snap.memory.get(v.node, NodeMemory())
        after = plan.memory.get(v.node, NodeMemory())
        if before.check_started is None or after.check_started is not None:
            continue
        if v.verdict == "healthy" and nodes[v.node].check == "passed":
            outcomes["passed"] += 1
        elif v.verdict in ("sick", "held") and CHECK_FAILED in v.causes:
            outcomes["failed"] += 1
    return outcomes
