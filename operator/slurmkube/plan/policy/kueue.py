"""A policy -> the Kueue objects that enforce it (kueue.x-k8s.io/v1beta2).

A Cohort for the fleet; per team a ClusterQueue in it and a LocalQueue, named
after the team, in each of its namespaces; a WorkloadPriorityClass per tier.

The Cohort's capacity is the Kueue side of the fleet (`spec.kueueGPUs`; unset,
the sum of the teams' gpus), held as the sum of its ClusterQueues'
nominalQuota: each team's nominalQuota of nvidia.com/gpu is its weight's share
of that capacity (`nominal_quotas`), so quotas never add up past the fleet and
two saturating teams each get their share. Kueue's fair sharing (the
ClusterQueue's `fairSharing.weight`) orders only borrowing of idle quota, so a
team that may borrow gets `borrowingLimit` = its gpus - its nominalQuota (it
lends its idle quota), at most what the other teams neither use nor wait for
(shares.py: the policy never preempts, so lent quota would not come back while
the borrower runs); one that may not gets both limits at 0. The combined cap
(gates.py) bounds nominalQuota + borrowingLimit, never only the nominal.
CPU and memory are unmetered; usage-based Admission Fair Sharing orders a
team's own LocalQueues.

Kueue's Admission Fair Sharing has no default half-life (unset, it does
nothing), so the Configuration fragment sets `usageHalfLifeTime` to Slurm's
`PriorityDecayHalfLife`: one decay for both schedulers' fair share. In
config.kueue.x-k8s.io/v1beta2 a `fairSharing` section turns fair sharing on
(v1beta1's `enable` field is gone), so the fragment always carries it.
Field names follow Kueue's apis/kueue/v1beta2 and apis/config/v1beta2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.plan.policy.gates import KueueGate
from slurmkube.plan.policy.model import Policy, TeamAllocation
from slurmkube.plan.policy.shares import nominal_quotas

KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# How often Kueue folds admitted usage into consumedResources (its default).
USAGE_SAMPLING_INTERVAL = "5m"
# Kueue admits a workload only into a ClusterQueue that covers every resource it
# requests (flavorassigner: "resource cpu unavailable in ClusterQueue"), and Jobs ask
# for CPU and memory. The policy meters GPUs; these get quotas no team reaches (small
# enough that a cohort's sum stays far inside Kueue's int64 arithmetic).
UNMETERED: dict[str, str] = {"cpu": "1M", "memory": "1Pi"}
# On a team's ClusterQueue past 80% of its budget: the threshold, naming the
# allocation (`kubectl describe clusterqueue`; Kueue's own message for a held
# workload says only that the queue is inactive).
BUDGET_ANNOTATION = f"{wk.GROUP}/budget"


def _metadata(name: str, policy: Policy, **extra: str) -> dict[str, Any]:
    return {
        "name": str(name),  # names are SlurmTokens; YAML wants plain strings
        **extra,
        "labels": {"app.kubernetes.io/managed-by": "slurmkube"},
        "annotations": {f"{wk.GROUP}/allocation-source": policy.source},
    }


def _quota(team: TeamAllocation, nominal_share: int, gate: KueueGate | None) -> dict[str, Any]:
    """nominalQuota and borrowingLimit: together never above the gate (what the team
    may hold on Kueue now), nominal never above the team's share of the Cohort."""
    limit = gate.max_gpus if gate is not None else team.gpus
    nominal = min(nominal_share, limit)
    quota: dict[str, Any] = {"name": wk.RESOURCE_GPU, "nominalQuota": nominal}
    if team.borrowing:
        borrowing = max(0, limit - nominal)
        if gate is not None and gate.borrowable is not None:
            # Below what the team already borrowed is fine: Kueue evicts nothing for it.
            borrowing = min(borrowing, gate.borrowable)
        quota["borrowingLimit"] = borrowing
    else:
        quota["borrowingLimit"] = 0
        quota["lendingLimit"] = 0
    return quota


def cluster_queue(
    policy: Policy,
    team: TeamAllocation,
    gate: KueueGate | None = None,
    nominal_share: int | None = None,
) -> dict[str, Any]:
    """`nominal_share`: the team's part of the Cohort (`nominal_quotas`); None: its gpus."""
    metadata = _metadata(team.name, policy)
    if gate is not None and gate.reason:
        metadata["annotations"][BUDGET_ANNOTATION] = gate.reason
    share = team.gpus if nominal_share is None else nominal_share
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": metadata,
        "spec": {
            "cohortName": policy.cohort,
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": list(team.namespaces)}
                ]
            }
            if team.namespaces
            else None,
            "resourceGroups": [
                {
                    "coveredResources": [wk.RESOURCE_GPU, *UNMETERED],
                    "flavors": [
                        {
                            "name": policy.resource_flavor,
                            "resources": [
                                _quota(team, share, gate),
                                *({"name": r, "nominalQuota": q} for r, q in UNMETERED.items()),
                            ],
                        }
                    ],
                }
            ],
            "fairSharing": {"weight": str(team.weight)},
            "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
            "stopPolicy": gate.stop_policy if gate is not None else "None",
        },
    }


def _drop_none(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
    return obj


def compile_kueue(
    policy: Policy, gates: Mapping[str, KueueGate] | None = None
) -> list[dict[str, Any]]:
    """Every Kueue object of the policy, deterministic (sorted by kind, then name)."""
    gates = gates or {}
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": KUEUE_API,
            "kind": "Cohort",
            "metadata": _metadata(policy.cohort, policy),
            "spec": {},
        }
    ]
    for tier in policy.tiers:
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "WorkloadPriorityClass",
                "metadata": _metadata(tier.name, policy),
                "value": tier.priority,
                "description": f"slurmkube tier {tier.name} (Slurm QOS tier-{tier.name})",
            }
        )
    shares = nominal_quotas(policy)
    for team in policy.teams:
        queue = cluster_queue(policy, team, gates.get(team.name), shares[team.name])
        objects.append(_drop_none(queue))
        for namespace in team.namespaces:
            objects.append(
                {
                    "apiVersion": KUEUE_API,
                    "kind": "LocalQueue",
                    "metadata": _metadata(team.name, policy, namespace=namespace),
                    "spec": {"clusterQueue": str(team.name)},
                }
            )
    return objects


# Which AllocationSource made a Kueue object: what it lists to delete a removed
# team's queues, never touching another source's or a hand-made object.
SOURCE_LABEL = f"{wk.GROUP}/allocation-source"
KINDS = ("Cohort", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue")


def source_label(namespace: str, name: str) -> str:
    """A label value (at most 63 characters) naming one AllocationSource."""
    value = f"{namespace}.{name}"
    if len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    return f"{value[:46].rstrip('.-_')}.{digest}"


def owned_by(objects: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    """The objects with the source's label (new dicts; `objects` is left alone)."""
    out = []
    for obj in objects:
        meta = {**obj["metadata"], "labels": {**obj["metadata"]["labels"], SOURCE_LABEL: label}}
        out.append({**obj, "metadata": meta})
    return out


def stale(
    desired: list[dict[str, Any]], existing: list[dict[str, Any]]
) -> list[tuple[str, str, str | None]]:
    """(kind, name, namespace) of the source's objects no longer desired."""
    want = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in desired}
    have = [(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in existing]
    return sorted((k for k in have if k not in want), key=lambda k: (k[0], k[2] or "", k[1]))


def kueue_configuration(policy: Policy) -> dict[str, Any]:
    """The part of Kueue's Configuration the policy needs (merged by whoever deploys Kueue)."""
    return {
        "apiVersion": KUEUE_CONFIG_API,
        "kind": "Configuration",
        "fairSharing": {
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
        },
        "admissionFairSharing": admission_fair_sharing(policy.half_life_hours),
    }


def admission_fair_sharing(half_life_hours: int) -> dict[str, Any]:
    """Kueue's `admissionFairSharing` with Slurm's half-life (unset, Kueue's
    usage-based admission does nothing)."""
    return {
        "usageHalfLifeTime": f"{half_life_hours}h",
        "usageSamplingInterval": USAGE_SAMPLING_INTERVAL,
        # Usage is GPUs, as on Slurm's side; unweighted, memory's bytes would swamp it.
        "resourceWeights": {wk.RESOURCE_GPU: 1.0, **{r: 0.0 for r in UNMETERED}},
    }
