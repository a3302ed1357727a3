"""One ledger over both schedulers: a team's GPU usage on Slurm plus on Kueue.

Two sums per team, both in GPU-seconds:
- `decayed`: usage weighted by 2^(-age / half-life), the half-life being Slurm's
  `PriorityDecayHalfLife` and Kueue's `usageHalfLifeTime` (one value, so both
  schedulers' fair share see the same history);
- `period`: undecayed usage since the budget period began, as a Slurm QOS with
  `Flags=NoDecay` counts `GrpTRESMins`; the budget thresholds read this one.

A node lent to Kueue is counted once: its GPUs are the Kueue workload's, and
whatever Slurm still attributes to the team on it (`lent_gpus_in_slurm`) is
taken off the Slurm side.

Budget thresholds follow Waldur: 80% notify, 100% run at the next lower tier,
120% hold new work (the hard limit is the grace above the allocation); at most
50% of the base budget carries over from an underused period.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

NOTIFY_AT = 0.8
LOWER_TIER_AT = 1.0
HOLD_AT = 1.2
CARRY_OVER_MAX = 0.5


class BudgetLevel(enum.IntEnum):
    """Ordered: a higher level includes every consequence of the lower ones."""

    OK = 0
    NOTIFY = 1
    LOWER_TIER = 2
    HOLD = 3


_THRESHOLDS = (
    (HOLD_AT, BudgetLevel.HOLD),
    (LOWER_TIER_AT, BudgetLevel.LOWER_TIER),
    (NOTIFY_AT, BudgetLevel.NOTIFY),
)


@dataclass(frozen=True, slots=True)
class Observation:
    """What each scheduler runs and wants for one team, now (GPUs)."""

    slurm_gpus: int = 0
    """GPUs of the team's running Slurm jobs, as Slurm reports them."""
    kueue_gpus: int = 0
    """nvidia.com/gpu of the team's admitted Kueue workloads."""
    lent_gpus_in_slurm: int = 0
    """GPUs of nodes lent to the team's Kueue workloads that Slurm still counts for it."""
    slurm_pending_gpus: int = 0
    kueue_pending_gpus: int = 0
    slurm_smallest_pending: int = 0
    """GPUs of the smallest waiting Slurm job (0: none waits); a gate below it starts
    nothing."""
    kueue_smallest_pending: int = 0

    @property
    def slurm_used(self) -> int:
        return max(0, self.slurm_gpus - self.lent_gpus_in_slurm)

    @property
    def used(self) -> int:
        return self.slurm_used + self.kueue_gpus


@dataclass(frozen=True, slots=True)
class TeamUsage:
    decayed_gpu_seconds: float = 0.0
    period_gpu_seconds: float = 0.0
    slurm_period_gpu_seconds: float = 0.0
    kueue_period_gpu_seconds: float = 0.0


def decay(value: float, seconds: float, half_life_s: float) -> float:
    """`value` after `seconds` of decay."""
    return float(value * 2.0 ** (-seconds / half_life_s))


def _decayed_integral(gpus: float, seconds: float, half_life_s: float) -> float:
    # Integral over the interval of gpus * 2^(-(age)/H): the newest second weighs 1.
    if seconds <= 0 or gpus == 0:
        return 0.0
    return float(gpus * half_life_s / math.log(2.0) * (1.0 - 2.0 ** (-seconds / half_life_s)))


def accrue(
    usage: TeamUsage,
    seconds: float,
    obs: Observation,
    half_life_s: float,
    slurm_gpu_seconds: float | None = None,
) -> TeamUsage:
    """The ledger `seconds` later, the team having used `obs` throughout, or on
    Slurm's side exactly `slurm_gpu_seconds` (from its jobs' start and end times:
    a job shorter than the interval counts too)."""
    if slurm_gpu_seconds is None:
        slurm = obs.slurm_used * seconds
    else:
        slurm = max(0.0, slurm_gpu_seconds - obs.lent_gpus_in_slurm * seconds)
    kueue = obs.kueue_gpus * seconds
    # Spread evenly over the interval for the decay (its length is one sync).
    average = (slurm + kueue) / seconds if seconds > 0 else 0.0
    return TeamUsage(
        decayed_gpu_seconds=decay(usage.decayed_gpu_seconds, seconds, half_life_s)
        + _decayed_integral(average, seconds, half_life_s),
        period_gpu_seconds=usage.period_gpu_seconds + slurm + kueue,
        slurm_period_gpu_seconds=usage.slurm_period_gpu_seconds + slurm,
        kueue_period_gpu_seconds=usage.kueue_period_gpu_seconds + kueue,
    )


def carry_over(base_gpu_hours: float, previous_used_gpu_hours: float) -> float:
    """Unused budget of the previous period, at most half the base."""
    return min(max(0.0, base_gpu_hours - previous_used_gpu_hours), CARRY_OVER_MAX * base_gpu_hours)


def entitlement(base_gpu_hours: float, carried_gpu_hours: float = 0.0) -> float:
    return base_gpu_hours + min(max(0.0, carried_gpu_hours), CARRY_OVER_MAX * base_gpu_hours)


def hard_limit_gpu_minutes(entitled_gpu_hours: float) -> int:
    """Slurm GrpTRESMins of the budget QOS: the 120% grace, in GPU-minutes."""
    return math.floor(entitled_gpu_hours * HOLD_AT * 60)


def budget_level(used_gpu_seconds: float, entitled_gpu_hours: float) -> BudgetLevel:
    if entitled_gpu_hours <= 0:
        return BudgetLevel.HOLD  # a zero budget: already at every threshold
    ratio = used_gpu_seconds / 3600.0 / entitled_gpu_hours
    return next((level for at, level in _THRESHOLDS if ratio >= at), BudgetLevel.OK)
