"""The policy as the compilers see it: validated teams and tiers, frozen.

Every source (an AllocationSource's inline teams, the plain JSON document,
ColdFront's answers) ends up as `api.allocation_source.Team`s; `build_policy`
checks what no single team can (unique names, known tiers, a namespace in one
team only) and freezes the result. Errors name the source, the team and the
field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurmkube.api.allocation_source import AllocationSourceSpec, Team
from slurmkube.api.grammar import SlurmToken, slurm_account, slurm_user


class PolicyError(ValueError):
    """Allocations that cannot be compiled; says which source, team and field."""


@dataclass(frozen=True, slots=True)
class Budget:
    gpu_hours: int
    period_start: datetime
    period_days: int

    def period_of(self, now: datetime) -> tuple[datetime, datetime]:
        """The period `now` falls in (periods repeat from `period_start`)."""
        length = timedelta(days=self.period_days)
        index = max(0, (now - self.period_start) // length)
        start = self.period_start + index * length
        return start, start + length


@dataclass(frozen=True, slots=True)
class TierLevel:
    name: SlurmToken
    priority: int


@dataclass(frozen=True, slots=True)
class TeamAllocation:
    name: SlurmToken
    users: tuple[SlurmToken, ...]
    namespaces: tuple[str, ...]
    groups: tuple[str, ...]
    gpus: int
    budget: Budget | None
    weight: int
    tier: SlurmToken
    borrowing: bool


@dataclass(frozen=True, slots=True)
class Policy:
    """A fleet's allocations: `source` names them in every reason and error."""

    source: str
    teams: tuple[TeamAllocation, ...]
    tiers: tuple[TierLevel, ...]  # highest priority first
    half_life_hours: int
    cohort: str
    resource_flavor: str
    kueue_gpus: int | None = None
    """The Kueue side's capacity (spec.kueueGPUs); None: the sum of the teams' gpus."""

    def tier(self, name: str) -> TierLevel:
        return next(t for t in self.tiers if t.name == name)

    def lower_tier(self, name: str) -> TierLevel:
        """The tier below `name`; the lowest tier is its own lower tier."""
        index = [str(t.name) for t in self.tiers].index(name)
        return self.tiers[min(index + 1, len(self.tiers) - 1)]

    def namespace_teams(self) -> dict[str, str]:
        """Namespace -> the team whose Kueue work runs there (a namespace is one team's)."""
        return {ns: str(t.name) for t in self.teams for ns in t.namespaces}

    def tiers_below(self, priority: int) -> tuple[TierLevel, ...]:
        return tuple(t for t in self.tiers if t.priority < priority)


def _team(team: Team, spec: AllocationSourceSpec, where: str) -> TeamAllocation:
    tier = team.tier or spec.default_tier
    known = [t.name for t in spec.tiers]
    if tier not in known:
        raise PolicyError(f"{where}.tier: {tier!r} is not one of the tiers {known}")
    budget = None
    if team.gpu_hours is not None and team.period is not None:
        budget = Budget(team.gpu_hours, team.period.start, team.period.length_days)
    return TeamAllocation(
        name=slurm_account(team.name, f"{where}.name"),
        users=tuple(
            slurm_user(u, f"{where}.members.slurmUsers[{i}]")
            for i, u in enumerate(team.members.slurm_users)
        ),
        namespaces=tuple(team.members.namespaces),
        groups=tuple(team.members.groups),
        gpus=team.gpus,
        budget=budget,
        weight=team.fair_share_weight,
        tier=slurm_account(tier, f"{where}.tier"),
        borrowing=team.borrowing,
    )


def build_policy(source: str, spec: AllocationSourceSpec, teams: Sequence[Team]) -> Policy:
    """Teams + the source's knobs -> a `Policy`, or a `PolicyError` naming the field."""
    built: list[TeamAllocation] = []
    owner: dict[str, str] = {}
    for index, team in enumerate(teams):
        where = f"{source}: teams[{index}] ({team.name})"
        allocation = _team(team, spec, where)
        if any(t.name == allocation.name for t in built):
            raise PolicyError(f"{where}.name: team {team.name!r} is defined twice")
        for ns in allocation.namespaces:
            if ns in owner:
                raise PolicyError(
                    f"{where}.members.namespaces: {ns!r} already belongs to team "
                    f"{owner[ns]!r} (a namespace's workloads count for one team)"
                )
            owner[ns] = allocation.name
        built.append(allocation)
    tiers = sorted(spec.tiers, key=lambda t: (-t.priority, t.name))
    priorities = [t.priority for t in tiers]
    if len(set(priorities)) != len(priorities):
        raise PolicyError(f"{source}: spec.tiers: two tiers have the same priority")
    return Policy(
        source=source,
        teams=tuple(sorted(built, key=lambda t: t.name)),
        tiers=tuple(
            TierLevel(slurm_account(t.name, f"{source}: spec.tiers"), t.priority) for t in tiers
        ),
        half_life_hours=spec.half_life_hours,
        cohort=spec.cohort,
        resource_flavor=spec.resource_flavor,
        kueue_gpus=spec.kueue_gpus,
    )
