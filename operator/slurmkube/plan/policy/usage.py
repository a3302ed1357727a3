"""What each scheduler runs and wants per team now -> `Observation`s, and the team status.

Slurm: jobs charged to the team's account (running: the GPUs bound to them,
else as requested; pending: as requested). Kueue: Workloads in the team's
namespaces (admitted: QuotaReserved and not Finished; pending: active, not
admitted, not finished), nvidia.com/gpu of every pod of every podSet.
A node lent to a Kueue workload carries no Slurm job of the team (the
reservation's jobs are the workload's pods), so `lent_gpus_in_slurm` is 0 here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.api.allocation_source import TeamStatus
from slurmkube.plan.policy.gates import TeamGates
from slurmkube.plan.policy.ledger import BudgetLevel, Observation, TeamUsage, accrue, entitlement
from slurmkube.plan.policy.model import Policy, TeamAllocation


@dataclass(frozen=True, slots=True)
class JobUse:
    """One Slurm job as the policy counts it."""

    account: str
    running: bool
    gpus: int
    job_id: int = 0
    pending: bool = False
    admin_comment: str = ""
    start: float | None = None
    """When it started (epoch seconds); None: it has not."""
    end: float | None = None
    """Slurm's end_time (epoch seconds): when it ended, or, while it runs, when its
    time limit would end it (read as now); None: not given."""


def slurm_gpu_seconds(jobs: Iterable[JobUse], since: float, until: float) -> dict[str, float]:
    """Per account, the GPU-seconds its jobs ran within [since, until]: a job that
    started and ended between two syncs counts, one that started mid-interval counts
    from its start. Jobs slurmctld still lists (MinJobAge, 300 s by default, is
    longer than a sync) are all there is to read."""
    used: dict[str, float] = {}
    for job in jobs:
        if job.start is None or job.gpus <= 0 or job.pending:
            continue
        end = until if job.running or job.end is None else min(job.end, until)
        overlap = end - max(job.start, since)
        if overlap > 0:
            used[job.account] = used.get(job.account, 0.0) + job.gpus * overlap
    return used


def workload_gpus(raw: Mapping[str, Any]) -> int:
    total = 0
    for pod_set in (raw.get("spec") or {}).get("podSets") or []:
        containers = ((pod_set.get("template") or {}).get("spec") or {}).get("containers") or []
        per_pod = sum(wk.container_gpus(c.get("resources") or {}) for c in containers)
        total += int(pod_set.get("count", 1)) * per_pod
    return total


def workload_state(raw: Mapping[str, Any]) -> str | None:
    """ "admitted", "pending" or None (finished or inactive: counts for nothing)."""
    conditions = {
        c.get("type"): c.get("status") == "True"
        for c in (raw.get("status") or {}).get("conditions") or []
    }
    if conditions.get("Finished"):
        return None
    if conditions.get("QuotaReserved"):
        return "admitted"
    return "pending" if (raw.get("spec") or {}).get("active", True) is not False else None


def observe_teams(
    policy: Policy, jobs: Iterable[JobUse] | None, workloads: Iterable[Mapping[str, Any]]
) -> dict[str, Observation]:
    """Every team's Observation; `jobs` None: Slurm was not read (counts 0)."""
    namespace_team = policy.namespace_teams()
    counts: dict[str, list[int]] = {t.name: [0, 0, 0, 0] for t in policy.teams}
    smallest: dict[str, list[int]] = {t.name: [0, 0] for t in policy.teams}

    def waits(team: str, side: int, gpus: int) -> None:
        if gpus > 0:
            least = smallest[team][side]
            smallest[team][side] = gpus if not least else min(least, gpus)

    for job in jobs or ():
        if job.account in counts:
            counts[job.account][0 if job.running else 1] += job.gpus
            if not job.running:
                waits(job.account, 0, job.gpus)
    for raw in workloads:
        team = namespace_team.get((raw.get("metadata") or {}).get("namespace", ""))
        state = workload_state(raw)
        if team is None or state is None:
            continue
        gpus = workload_gpus(raw)
        counts[team][2 if state == "admitted" else 3] += gpus
        if state == "pending":
            waits(team, 1, gpus)
    return {
        team: Observation(
            slurm_gpus=c[0],
            slurm_pending_gpus=c[1],
            kueue_gpus=c[2],
            kueue_pending_gpus=c[3],
            slurm_smallest_pending=smallest[team][0],
            kueue_smallest_pending=smallest[team][1],
        )
        for team, c in counts.items()
    }


def _hours(seconds: float) -> float:
    return round(seconds / 3600.0, 3)


def team_status(
    team: TeamAllocation, obs: Observation, usage: TeamUsage, gates: TeamGates
) -> dict[str, Any]:
    """One team's entry in AllocationSource.status.teams."""
    entitled = entitlement(team.budget.gpu_hours) if team.budget is not None else None
    return {
        "name": str(team.name),
        "gpus": team.gpus,
        "gpuHours": entitled,
        "tier": gates.slurm.tier,
        "budgetLevel": gates.level.name,
        "usage": {
            "slurmGPUs": obs.slurm_used,
            "kueueGPUs": obs.kueue_gpus,
            "periodGPUHours": _hours(usage.period_gpu_seconds),
            "slurmPeriodGPUHours": _hours(usage.slurm_period_gpu_seconds),
            "kueuePeriodGPUHours": _hours(usage.kueue_period_gpu_seconds),
            "decayedGPUHours": _hours(usage.decayed_gpu_seconds),
        },
        "headroom": max(0, team.gpus - obs.used),
        "gates": {
            "slurmGrpTRES": gates.slurm.grp_tres_gpus,
            "kueueNominalQuota": gates.kueue.max_gpus,
            "kueueStopPolicy": gates.kueue.stop_policy,
        },
        "reason": gates.reason,
    }


def teams_status(
    policy: Policy,
    observations: Mapping[str, Observation],
    ledgers: Mapping[str, TeamUsage],
    gates: Mapping[str, TeamGates],
) -> list[dict[str, Any]]:
    return [
        team_status(
            t,
            observations.get(t.name, Observation()),
            ledgers.get(t.name, TeamUsage()),
            gates[t.name],
        )
        for t in policy.teams
    ]


@dataclass(frozen=True, slots=True)
class Ledgers:
    """Every team's ledger, and the budget period it was counting."""

    usage: Mapping[str, TeamUsage]
    periods: Mapping[str, datetime]


def advance_ledgers(
    policy: Policy,
    ledgers: Ledgers,
    observations: Mapping[str, Observation],
    seconds: float,
    now: datetime,
    *,
    slurm_used: Mapping[str, float] | None = None,
) -> Ledgers:
    """The ledgers `seconds` later, each team having used what it uses now (on
    Slurm: `slurm_used`, its jobs' GPU-seconds in the interval, when read); a
    team whose budget period turned over starts the new one at 0 (its decayed
    usage carries on: fair share has no periods)."""
    usage: dict[str, TeamUsage] = {}
    periods: dict[str, datetime] = {}
    for team in policy.teams:
        current = ledgers.usage.get(team.name, TeamUsage())
        if team.budget is not None:
            period = team.budget.period_of(now)[0]
            if ledgers.periods.get(team.name, period) != period:
                current = TeamUsage(decayed_gpu_seconds=current.decayed_gpu_seconds)
            periods[team.name] = period
        obs = observations.get(team.name, Observation())
        exact = None if slurm_used is None else slurm_used.get(team.name, 0.0)
        usage[team.name] = accrue(current, seconds, obs, policy.half_life_hours * 3600.0, exact)
    return Ledgers(usage, periods)


def ledgers_from_status(
    allocations: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, TeamUsage], dict[str, BudgetLevel]]:
    """After an operator restart: the usage and levels the status last reported."""
    usage, levels = {}, {}
    for raw in allocations:
        team = TeamStatus.model_validate(raw)
        usage[team.name] = TeamUsage(
            decayed_gpu_seconds=team.usage.decayed_gpu_hours * 3600,
            period_gpu_seconds=team.usage.period_gpu_hours * 3600,
            slurm_period_gpu_seconds=team.usage.slurm_period_gpu_hours * 3600,
            kueue_period_gpu_seconds=team.usage.kueue_period_gpu_hours * 3600,
        )
        levels[team.name] = BudgetLevel[team.budget_level]
    return usage, levels
