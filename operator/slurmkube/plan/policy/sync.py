"""One sync's outcome -> the AllocationSource's conditions and Events (pure).

`SourceReachable`: the source answered with allocations that compile.
`Synced`: both schedulers hold what the policy says (a scheduler that could
not be written names itself in the message). A budget threshold crossed,
and drift put back, are Events; nothing else is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmkube.plan.model import Condition
from slurmkube.plan.policy.gates import TeamGates
from slurmkube.plan.policy.ledger import BudgetLevel
from slurmkube.plan.policy.slurm_diff import SlurmChange


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    source_error: tuple[str, str] | None = None
    """(reason, message) when the source could not be read or did not compile."""
    slurm_error: str = ""
    kueue_error: str = ""
    slurm_skipped: str = ""
    """Why Slurm was not written although the source was fine (no clusterRef, ...)."""
    teams: int = 0


@dataclass(frozen=True, slots=True)
class PolicyEvent:
    reason: str
    message: str
    warning: bool = False


def sync_conditions(outcome: SyncOutcome) -> list[Condition]:
    if outcome.source_error is not None:
        reason, message = outcome.source_error
        return [
            Condition("SourceReachable", False, reason, message),
            Condition(
                "Synced", False, "SourceError", "nothing changed; what was applied stays in force"
            ),
        ]
    reachable = Condition("SourceReachable", True, "Read", f"{outcome.teams} teams")
    failed = [
        f"{name}: {error}"
        for name, error in (("slurm", outcome.slurm_error), ("kueue", outcome.kueue_error))
        if error
    ]
    if failed:
        return [reachable, Condition("Synced", False, "ApplyFailed", "; ".join(failed))]
    message = "Slurm and Kueue hold the policy"
    if outcome.slurm_skipped:
        message = f"Kueue holds the policy; Slurm not written: {outcome.slurm_skipped}"
    return [reachable, Condition("Synced", True, "Applied", message)]


_LEVEL_EVENT = {
    BudgetLevel.NOTIFY: ("BudgetNotice", False),
    BudgetLevel.LOWER_TIER: ("BudgetUsedUp", True),
    BudgetLevel.HOLD: ("BudgetHold", True),
}


def policy_events(
    before: Mapping[str, BudgetLevel],
    gates: Mapping[str, TeamGates],
    changes: Sequence[SlurmChange],
) -> list[PolicyEvent]:
    """An Event per team whose budget level rose, and one for drift put back."""
    events = []
    for team, gate in sorted(gates.items()):
        if gate.level > before.get(team, BudgetLevel.OK) and gate.level in _LEVEL_EVENT:
            reason, warning = _LEVEL_EVENT[gate.level]
            events.append(PolicyEvent(reason, gate.reason, warning))
    drift = [c.describe() for c in changes if c.drift]
    if drift:
        sample = "; ".join(drift[:5]) + (f" (and {len(drift) - 5} more)" if len(drift) > 5 else "")
        events.append(
            PolicyEvent("DriftReverted", f"{len(drift)} hand edits put back: {sample}", True)
        )
    return events
