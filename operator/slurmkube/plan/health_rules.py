"""Node signals -> severity, and the texts health writes into Slurm (pure).

Each signal (a condition, a taint) takes the severity of the first rule that
matches it, so an `ignore` rule placed first can exempt one value of a taint
a later rule drains on; the node takes the worst severity of its signals.
slurmkube's own taint is never a signal (it would hold a node sick forever).

Every reason passes `grammar.node_reason`, the guard the Slurm adapter
applies to what it sends, so a plan never holds a reason Slurm would refuse
or a value that could smuggle a second `Key=` into scontrol's argv.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from slurmkube.api import grammar
from slurmkube.api import well_known as wk
from slurmkube.api.models import HealthRule
from slurmkube.plan.health_model import SEVERITY_ORDER, HealthNode, NodeTaint

_REASON_MAX: Final = 200
_NAME_MAX: Final = 63
HELD_PREFIX: Final = f"{wk.HEALTH_REASON_PREFIX} held"
CHECK_FAILED: Final = "active check failed"
CHECK_WAITS_FOR_LEASE: Final = "signals cleared, the check waits for its lease to end"


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str | None  # fatal, drain, or None (healthy)
    causes: tuple[str, ...] = ()


def _taint_matches(rule: HealthRule, taint: NodeTaint) -> bool:
    match = rule.taint
    return (
        match is not None
        and match.key == taint.key
        and (match.value is None or match.value == taint.value)
        and (match.effect is None or match.effect == taint.effect)
    )


def _condition_matches(rule: HealthRule, condition: tuple[str, str]) -> bool:
    match = rule.condition
    return match is not None and (match.type, match.status) == condition


def assess(node: HealthNode, rules: Sequence[HealthRule]) -> Finding:
    """The node's severity and the signals that set it, in the node's order."""
    found: list[tuple[str, str]] = []  # (severity, cause)
    for condition in node.conditions:
        rule = next((r for r in rules if _condition_matches(r, condition)), None)
        if rule is not None:
            found.append((rule.severity, f"condition {condition[0]} {condition[1]}"))
    for taint in node.taints:
        if taint.key == wk.TAINT_UNHEALTHY:
            continue
        rule = next((r for r in rules if _taint_matches(r, taint)), None)
        if rule is not None:
            found.append((rule.severity, f"taint {taint.key}"))
    sick = [(s, c) for s, c in found if s in SEVERITY_ORDER]
    if not sick:
        return Finding(None)
    worst = max(sick, key=lambda item: SEVERITY_ORDER[item[0]])[0]
    return Finding(worst, tuple(dict.fromkeys(c for _, c in sick)))


def _guarded(text: str) -> str:
    cut = text[:_REASON_MAX].rstrip()
    return grammar.node_reason(cut, "health drain reason")


def sick_reason(severity: str, causes: Sequence[str]) -> str:
    """`slurmkube:health: fatal condition GpuXidError True, taint nvidia.com/gpu-error`."""
    return _guarded(f"{wk.HEALTH_REASON_PREFIX} {severity} {', '.join(causes)}")


def held_reason(failures: int, window: int, causes: Sequence[str]) -> str:
    why = ", ".join(causes) or CHECK_FAILED
    return _guarded(f"{HELD_PREFIX} after {failures} failures in {window}s, resume by hand: {why}")


def domain_reason(domain: str, out: int, size: int) -> str:
    return _guarded(f"{wk.HEALTH_REASON_PREFIX} rack {domain}: {out} of {size} nodes out")


def is_held_reason(reason: str) -> bool:
    """Our hold, recognised from Slurm alone: a lost memory never resumes a held node."""
    return reason.startswith(HELD_PREFIX)


def check_reservation(node: str) -> str:
    """The reservation of a node's active check; long node names end in a digest so
    the name stays within Slurm's reservation grammar (63 of [A-Za-z0-9_.-])."""
    name = f"{wk.CHECK_RESERVATION_PREFIX}{node}"
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    keep = _NAME_MAX - len(wk.CHECK_RESERVATION_PREFIX) - len(digest) - 1
    return f"{wk.CHECK_RESERVATION_PREFIX}{node[:keep].rstrip('.-')}-{digest}"
