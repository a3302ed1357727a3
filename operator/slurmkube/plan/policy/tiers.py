"""The tier of a team's Kueue work that has not started.

On Slurm a team's tier is its QOS: the budget QOS's Priority follows the gate,
and pending jobs take it at the next priority calculation. Kueue takes a
Workload's priority from its job's `kueue.x-k8s.io/priority-class` label: its
job reconciler writes the label's class back onto the Workload, so the label,
not the Workload, is where the tier goes, and Kueue accepts a change of it
only while the job is suspended. So for each of a team's Workloads that has not
reserved quota, the job that owns it gets the allowed tier (the team's, or the
next lower one past 100% of its budget) when:
- it has no class, or a class valued above the allowed tier (a team never runs
  above its tier, as on Slurm where its QOS is the only one it may use);
- its class is one slurmkube set (the Workload's annotation names it): so the
  tier comes back when a new period starts.
A class at or below the allowed tier that the user chose is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.plan.policy.gates import TeamGates
from slurmkube.plan.policy.model import Policy
from slurmkube.plan.policy.usage import workload_state

PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# On the Workload: the class slurmkube gave its job (what it may change again).
TIER_ANNOTATION = f"{wk.GROUP}/tier"
# The owners whose label Kueue reads and that suspend while pending.
LABELLED_OWNERS = frozenset({("batch/v1", "Job"), ("jobset.x-k8s.io/v1alpha2", "JobSet")})
# Jobs labelled per sync, oldest Workloads first (the nearest to admission): at two
# API calls each, a burst of a thousand submissions would otherwise hold the sync's
# quota and GrpTRES updates back for minutes; the rest follow in the next syncs.
LABELS_PER_SYNC = 100


@dataclass(frozen=True, slots=True)
class TierLabel:
    """Give the job owning a Workload the class `priority_class`."""

    namespace: str
    workload: str
    api_version: str
    kind: str
    name: str
    priority_class: str


def _owner(raw: Mapping[str, Any]) -> tuple[str, str, str] | None:
    for ref in (raw.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("apiVersion")), str(ref.get("kind")), str(ref.get("name"))
    return None


def current_class(raw: Mapping[str, Any]) -> str | None:
    """The Workload's WorkloadPriorityClass (None: none, or a Pod PriorityClass)."""
    ref = (raw.get("spec") or {}).get("priorityClassRef") or {}
    if ref.get("kind", "WorkloadPriorityClass") != "WorkloadPriorityClass":
        return None
    name = ref.get("name")
    return str(name) if name else None


def tier_label(allowed: str, values: Mapping[str, int], raw: Mapping[str, Any]) -> TierLabel | None:
    """The label to write for one pending Workload of a team whose allowed tier is
    `allowed` (`values`: class -> value, every WorkloadPriorityClass known); None:
    its job keeps its class, or Kueue reads no label of its owner."""
    limit = values[allowed]
    meta = raw.get("metadata") or {}
    owner = _owner(raw)
    if owner is None or owner[:2] not in LABELLED_OWNERS:
        return None
    now = current_class(raw)
    ours = now is not None and (meta.get("annotations") or {}).get(TIER_ANNOTATION) == now
    above = now is not None and values.get(now, limit) > limit
    if now == allowed or not (now is None or ours or above):
        return None
    return TierLabel(
        namespace=str(meta.get("namespace", "")),
        workload=str(meta.get("name", "")),
        api_version=owner[0],
        kind=owner[1],
        name=owner[2],
        priority_class=allowed,
    )


def plan_tier_labels(
    allowed: str,
    values: Mapping[str, int],
    pending: Iterable[Mapping[str, Any]],
) -> list[TierLabel]:
    """Labels to write for one team's pending Workloads (`tier_label` each)."""
    return [label for raw in pending if (label := tier_label(allowed, values, raw)) is not None]


def _age(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = raw.get("metadata") or {}
    return (
        str(meta.get("creationTimestamp", "")),
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
    )


def plan_policy_tier_labels(
    policy: Policy,
    gates: Mapping[str, TeamGates],
    values: Mapping[str, int],
    workloads: Iterable[Mapping[str, Any]],
    limit: int = LABELS_PER_SYNC,
) -> list[TierLabel]:
    """Every team's labels: its pending Workloads (by namespace) get its gate's tier,
    once that WorkloadPriorityClass exists (`values`: those the cluster lists; a
    label naming a missing one fails Kueue's reconcile of the job). At most `limit`,
    for the oldest Workloads."""
    known = {**values, **{str(t.name): t.priority for t in policy.tiers if t.name in values}}
    allowed = {
        team: gate.kueue.priority_class
        for team, gate in gates.items()
        if gate.kueue.priority_class in known
    }
    team_of = policy.namespace_teams()
    pending = [
        (raw, allowed[team])
        for raw in workloads
        if (team := team_of.get((raw.get("metadata") or {}).get("namespace", ""))) in allowed
        and workload_state(raw) == "pending"
    ]
    labels: list[TierLabel] = []
    for raw, tier in sorted(pending, key=lambda item: _age(item[0])):
        if len(labels) == limit:
            break
        if (label := tier_label(tier, known, raw)) is not None:
            labels.append(label)
    return labels
