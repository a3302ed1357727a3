"""How the Kueue side of the fleet is shared: each team's nominal quota, and what
each team may borrow now.

A team's nominalQuota is its weight's share of the Cohort (`nominal_quotas`).
Kueue lends a ClusterQueue's unused nominal quota to the Cohort and takes it back
only by preempting the borrower (`reclaimWithinCohort`), which the policy never
asks for: a workload admitted on borrowed quota keeps it until it finishes. So a
team may borrow only quota its owner neither uses nor waits for (`borrowable`):
idle quota of a team whose smallest waiting workload fits in it stays with that
team, and the gate moves it within the policy's reaction time when the owner's
queue changes. Kueue's own ordering (within nominal quota first) does not
suffice: it admits at most one workload per ClusterQueue per scheduling cycle,
so when two GPUs come free at once, a borrower takes the second while the
owner's next workload waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from slurmkube.plan.policy.ledger import Observation
from slurmkube.plan.policy.model import Policy


def nominal_quotas(policy: Policy) -> dict[str, int]:
    """Team -> nominalQuota: the Kueue capacity split by weight, integers adding up to it.

    Water-filling: a team whose exact share reaches its own gpus gets its gpus and
    the rest is split again among the others; the remaining exact shares are
    rounded by largest remainder (ties by name). With the default capacity (the
    sum of the teams' gpus) every team gets its gpus."""
    capped = sum(t.gpus for t in policy.teams)
    left = capped if policy.kueue_gpus is None else min(policy.kueue_gpus, capped)
    quotas: dict[str, int] = {}
    open_teams = list(policy.teams)
    while open_teams:
        weights = sum(t.weight for t in open_teams)
        full = [t for t in open_teams if Fraction(left * t.weight, weights) >= t.gpus]
        if not full:
            break
        for team in full:
            quotas[team.name] = team.gpus
            left -= team.gpus
            open_teams.remove(team)
    if not open_teams:
        return quotas
    weights = sum(t.weight for t in open_teams)
    exact = {t.name: Fraction(left * t.weight, weights) for t in open_teams}
    floors = {name: int(share) for name, share in exact.items()}
    by_remainder = sorted(exact, key=lambda name: (-(exact[name] - floors[name]), name))
    for name in by_remainder[: left - sum(floors.values())]:
        floors[name] += 1
    return quotas | floors


def kept_quota(nominal: int, obs: Observation) -> int:
    """What of its unused nominal quota a team keeps for its own waiting work: the
    waiting GPUs up to the unused quota, when its smallest waiting workload fits in
    that quota (a workload that cannot start there holds nothing back)."""
    unused = max(0, nominal - obs.kueue_gpus)
    if obs.kueue_pending_gpus == 0 or obs.kueue_smallest_pending > unused:
        return 0
    return min(unused, obs.kueue_pending_gpus)


def borrowable(
    policy: Policy, nominal: Mapping[str, int], observations: Mapping[str, Observation]
) -> dict[str, int]:
    """Team -> GPUs of the other teams' nominal quota it may borrow now: what they
    lend (teams without borrowing lend nothing) and neither use nor keep for their
    waiting work. `nominal`: each team's nominalQuota as compiled."""
    idle = {}
    for team in policy.teams:
        quota = nominal.get(team.name, 0)
        obs = observations.get(team.name, Observation())
        unused = max(0, quota - obs.kueue_gpus)
        idle[team.name] = unused - kept_quota(quota, obs) if team.borrowing else 0
    total = sum(idle.values())
    return {team.name: total - idle[team.name] for team in policy.teams}
