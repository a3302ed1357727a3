"""Admission gates: what each scheduler may start for a team now.

The concurrent quota holds for the sum over Slurm and Kueue. Each scheduler
admits on its own, so the team's headroom (quota - Slurm use - Kueue use) is
split between them, by pending demand (evenly when neither waits): if both
took `quota - other's use`, two admissions at once could each take the same
headroom. The parts are moved to whole waiting requests: a part smaller than
its side's smallest waiting job starts nothing, so two such parts would hold
both queues forever (4 GPUs of headroom, 4-GPU jobs on both sides, 2 + 2).
A gate is never below what runs (nothing is killed or preempted); only
admission is gated:
- Slurm: the association's `GrpTRES=gres/gpu=<gate>` and the budget QOS's
  tier; Slurm starts no job that would take the account above it;
- Kueue: the ClusterQueue's `nominalQuota` + `borrowingLimit` (kueue.py: the
  nominal is the team's share of the Cohort, at most the gate, and borrowing
  fills up to the gate, out of what the other teams neither use nor wait for:
  shares.py) and `stopPolicy: Hold` (admitted workloads run to completion).
At the budget's 120% both gates are the current use and Kueue holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from slurmkube.plan.policy.ledger import (
    BudgetLevel,
    Observation,
    TeamUsage,
    budget_level,
    entitlement,
)
from slurmkube.plan.policy.model import Policy, TeamAllocation
from slurmkube.plan.policy.shares import borrowable, nominal_quotas


@dataclass(frozen=True, slots=True)
class SlurmGate:
    grp_tres_gpus: int
    tier: str
    """The tier (QOS Priority, Preempt) the team's new jobs run at."""


@dataclass(frozen=True, slots=True)
class KueueGate:
    max_gpus: int
    """The most GPUs the team's admitted Kueue work may hold (nominal + borrowing)."""
    stop_policy: Literal["None", "Hold"]
    priority_class: str
    """The WorkloadPriorityClass new workloads of the team should get."""
    reason: str = ""
    """Why the team's work is gated (the budget), on its ClusterQueue."""
    borrowable: int | None = None
    """GPUs of other teams' nominal quota the team may borrow now (shares.borrowable);
    None: as much as the Cohort lends."""


@dataclass(frozen=True, slots=True)
class TeamGates:
    team: str
    level: BudgetLevel
    slurm: SlurmGate
    kueue: KueueGate
    reason: str
    """Why, naming the allocation; empty when nothing is gated beyond the quota."""
    notice: str = ""
    """The reason without the figures, which change at every sync: what goes on
    each held Slurm job (plan/policy/held.py), written once."""


def split_headroom(
    headroom: int,
    slurm_pending: int,
    kueue_pending: int,
    smallest: tuple[int, int] = (0, 0),
    used: tuple[int, int] = (0, 0),
) -> tuple[int, int]:
    """Headroom -> (Slurm's part, Kueue's part), adding up to it exactly.

    By pending demand, then fitted to whole requests: `smallest` is each side's
    smallest waiting request (0: none waits). When the demand split leaves a side
    that waits below its smallest request, it gets that request if the other side's
    smallest still fits in the rest; when both cannot start something at once, the
    side running less (`used`; then the one with more demand, then Slurm) gets the
    whole headroom, so the two take turns rather than both waiting."""
    if headroom <= 0:
        return 0, 0
    total = slurm_pending + kueue_pending
    slurm = headroom // 2 if total == 0 else headroom * slurm_pending // total
    need_s, need_k = smallest
    if need_s == 0 and need_k == 0:
        return slurm, headroom - slurm
    kueue = headroom - slurm
    fits_s, fits_k = slurm >= need_s, kueue >= need_k
    if fits_s and fits_k:
        return slurm, kueue
    if need_s + need_k <= headroom:  # both can start something: give each its request
        slurm = need_s if not fits_s else headroom - need_k
        return slurm, headroom - slurm
    candidates = [side for side, need in ((0, need_s), (1, need_k)) if need and need <= headroom]
    if not candidates:
        return slurm, kueue
    demand = (slurm_pending, kueue_pending)
    side = min(candidates, key=lambda c: (used[c], -demand[c], c))
    return (headroom, 0) if side == 0 else (0, headroom)


def _reason(
    policy: Policy, team: TeamAllocation, level: BudgetLevel, used_h: float, entitled_h: float
) -> tuple[str, str]:
    """(the reason with this period's figures, the same without them)."""
    if level == BudgetLevel.OK:
        return "", ""
    lower = policy.lower_tier(team.tier).name
    action = {
        BudgetLevel.NOTIFY: "notice: 80% of the budget used",
        BudgetLevel.LOWER_TIER: f"budget used up: new work runs at tier {lower}",
        BudgetLevel.HOLD: "120% of the budget used: new work is held",
    }[level]
    allocation = f"allocation {team.name} ({policy.source})"
    figures = f"{used_h:.1f} of {entitled_h:.1f} GPU-hours this period"
    return f"{allocation}: {figures}; {action}", f"{allocation}: {action}"


def plan_gates(
    policy: Policy,
    team: TeamAllocation,
    obs: Observation,
    usage: TeamUsage,
    carried_gpu_hours: float = 0.0,
) -> TeamGates:
    """The gates for one team from what runs now and its ledger."""
    level = BudgetLevel.OK
    used_h = usage.period_gpu_seconds / 3600.0
    entitled_h = 0.0
    if team.budget is not None:
        entitled_h = entitlement(team.budget.gpu_hours, carried_gpu_hours)
        level = budget_level(usage.period_gpu_seconds, entitled_h)
    slurm_used, kueue_used = obs.slurm_used, obs.kueue_gpus
    headroom = 0 if level == BudgetLevel.HOLD else team.gpus - slurm_used - kueue_used
    slurm_part, kueue_part = split_headroom(
        headroom,
        obs.slurm_pending_gpus,
        obs.kueue_pending_gpus,
        (obs.slurm_smallest_pending, obs.kueue_smallest_pending),
        (slurm_used, kueue_used),
    )
    tier = (
        policy.lower_tier(team.tier) if level >= BudgetLevel.LOWER_TIER else policy.tier(team.tier)
    )
    reason, notice = _reason(policy, team, level, used_h, entitled_h)
    return TeamGates(
        team=team.name,
        level=level,
        slurm=SlurmGate(grp_tres_gpus=slurm_used + slurm_part, tier=tier.name),
        kueue=KueueGate(
            max_gpus=kueue_used + kueue_part,
            stop_policy="Hold" if level == BudgetLevel.HOLD else "None",
            priority_class=tier.name,
            reason=reason,
        ),
        reason=reason,
        notice=notice,
    )


def plan_all_gates(
    policy: Policy,
    observations: dict[str, Observation],
    ledgers: dict[str, TeamUsage],
    carried: dict[str, float] | None = None,
) -> dict[str, TeamGates]:
    """Every team's gates; a team nobody reported on uses nothing yet. Kueue
    borrowing is bounded by what the other teams neither use nor wait for."""
    gates = {
        t.name: plan_gates(
            policy,
            t,
            observations.get(t.name, Observation()),
            ledgers.get(t.name, TeamUsage()),
            (carried or {}).get(t.name, 0.0),
        )
        for t in policy.teams
    }
    shares = nominal_quotas(policy)
    nominal: dict[str, int] = {n: min(shares[n], g.kueue.max_gpus) for n, g in gates.items()}
    lendable = borrowable(policy, nominal, observations)
    return {
        name: replace(g, kueue=replace(g.kueue, borrowable=lendable[name]))
        for name, g in gates.items()
    }
