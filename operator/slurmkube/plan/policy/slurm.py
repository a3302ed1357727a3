"""A policy -> the Slurm accounting objects and slurm.conf keys that enforce it.

Per team: an account (association with `Fairshare=<weight>`,
`GrpTRES=gres/gpu=<gate>`), a user association per member, and, when it has a
budget, a QOS `budget-<team>` with `GrpTRESMins=gres/gpu=<minutes>` and
`Flags=NoDecay` (sacctmgr(1): NoDecay keeps GrpTRESMins usage from decaying,
so the QOS is a budget that is used up, not a rate). Per tier: a QOS
`tier-<tier>` with the tier's `Priority`.

Slurm applies one QOS per job, so a budgeted team's jobs run under its budget
QOS, which carries its tier's Priority and Preempt list; teams without a
budget run under their tier's QOS. A QOS preempts every QOS of a lower
priority (`PreemptType=preempt/qos`).

`GrpTRESMins` is the fixed hard limit (120% of the entitlement): Slurm kills
running jobs when a GrpTRESMins limit is reached, so the ledger never lowers
it; new work is held through `GrpTRES` instead (`plan.policy.gates`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from slurmkube.api.grammar import SlurmToken, slurm_qos, slurm_time
from slurmkube.plan.policy.gates import SlurmGate
from slurmkube.plan.policy.ledger import entitlement, hard_limit_gpu_minutes
from slurmkube.plan.policy.model import Policy, TeamAllocation

# Description (and Organization) of every account and QOS slurmkube manages:
# objects without it are someone else's and are never modified or deleted.
OWNER = "slurmkube"
ENFORCE = "associations,limits,qos,safe"

Kind = Literal["qos", "account", "user"]


@dataclass(frozen=True, slots=True)
class SlurmEntity:
    """One sacctmgr object: a QOS, an account (its association) or a user's association."""

    kind: Kind
    name: str
    account: str = ""  # users: the account of the association
    attrs: tuple[tuple[str, str], ...] = ()  # sacctmgr Key=Value, sorted by key

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.name, self.account)

    def attr(self, key: str) -> str | None:
        return dict(self.attrs).get(key)


@dataclass(frozen=True, slots=True)
class SlurmPolicy:
    entities: tuple[SlurmEntity, ...]
    config: tuple[tuple[SlurmToken, SlurmToken], ...]
    """slurm.conf keys the policy needs (merged into the rendered slurm.conf)."""


def _entity(kind: Kind, name: str, account: str = "", **attrs: str) -> SlurmEntity:
    return SlurmEntity(kind, name, account, tuple(sorted(attrs.items())))


def tier_qos(tier: str) -> SlurmToken:
    return slurm_qos(f"tier-{tier}", "tier QOS name")


def budget_qos(team: str) -> SlurmToken:
    return slurm_qos(f"budget-{team}", "budget QOS name")


def half_life(hours: int) -> SlurmToken:
    """slurm.conf(5) PriorityDecayHalfLife as days-hh:mm:ss."""
    return slurm_time(f"{hours // 24}-{hours % 24:02d}:00:00", "halfLifeHours")


def slurm_config(policy: Policy) -> tuple[tuple[SlurmToken, SlurmToken], ...]:
    return slurm_config_keys(policy.half_life_hours)


def slurm_config_keys(half_life_hours: int) -> tuple[tuple[SlurmToken, SlurmToken], ...]:
    # Fair Tree is the default PriorityFlags algorithm since 19.05: nothing to set.
    pairs = (
        ("PriorityType", SlurmToken("priority/multifactor")),
        ("PriorityDecayHalfLife", half_life(half_life_hours)),
        ("AccountingStorageEnforce", SlurmToken(ENFORCE)),
        # GrpTRES/GrpTRESMins on gres/gpu need the TRES tracked: slurmctld
        # registers it with slurmdbd, else sacctmgr says "no TRES known".
        ("AccountingStorageTRES", SlurmToken("gres/gpu")),
        ("PreemptType", SlurmToken("preempt/qos")),
        ("PreemptMode", SlurmToken("REQUEUE")),
    )
    return tuple((SlurmToken(key), value) for key, value in pairs)


def _job_qos(policy: Policy, gates: Mapping[str, SlurmGate]) -> dict[str, tuple[str, int]]:
    """Every QOS jobs run under -> (name, priority): the tiers', the budgets'."""
    qos: dict[str, tuple[str, int]] = {tier_qos(t.name): (t.name, t.priority) for t in policy.tiers}
    for team in policy.teams:
        if team.budget is not None:
            tier = policy.tier(gates[team.name].tier if team.name in gates else team.tier)
            qos[budget_qos(team.name)] = (tier.name, tier.priority)
    return qos


def _preempt(job_qos: Mapping[str, tuple[str, int]], priority: int) -> str:
    return ",".join(sorted(name for name, (_, p) in job_qos.items() if p < priority))


def _team_entities(
    team: TeamAllocation,
    gate: SlurmGate | None,
    job_qos: Mapping[str, tuple[str, int]],
    carried_gpu_hours: float,
) -> list[SlurmEntity]:
    out: list[SlurmEntity] = []
    if team.budget is not None:
        name = budget_qos(team.name)
        minutes = hard_limit_gpu_minutes(entitlement(team.budget.gpu_hours, carried_gpu_hours))
        priority = job_qos[name][1]
        out.append(
            _entity(
                "qos",
                name,
                Description=OWNER,
                Flags="NoDecay",
                GrpTRESMins=f"gres/gpu={minutes}",
                Preempt=_preempt(job_qos, priority),
                Priority=str(priority),
            )
        )
        qos = name
    else:
        qos = tier_qos(team.tier)
    gpus = gate.grp_tres_gpus if gate is not None else team.gpus
    out.append(
        _entity(
            "account",
            team.name,
            DefaultQOS=qos,
            Description=OWNER,
            Fairshare=str(team.weight),
            GrpTRES=f"gres/gpu={gpus}",
            Organization=OWNER,
            QOS=qos,
        )
    )
    out.extend(_entity("user", user, team.name) for user in team.users)
    return out


def compile_slurm(
    policy: Policy,
    gates: Mapping[str, SlurmGate] | None = None,
    carried_gpu_hours: Mapping[str, float] | None = None,
) -> SlurmPolicy:
    """The desired Slurm objects; `gates` (from the ledger) set GrpTRES and tiers."""
    gates = gates or {}
    job_qos = _job_qos(policy, gates)
    entities = [
        _entity(
            "qos",
            tier_qos(t.name),
            Description=OWNER,
            Priority=str(t.priority),
            Preempt=_preempt(job_qos, t.priority),
        )
        for t in policy.tiers
    ]
    for team in policy.teams:
        entities.extend(
            _team_entities(
                team, gates.get(team.name), job_qos, (carried_gpu_hours or {}).get(team.name, 0.0)
            )
        )
    return SlurmPolicy(entities=tuple(entities), config=slurm_config(policy))
