"""A SlurmCluster's conditions: composing Ready and Degraded, and the metav1 rules (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slurmkube.plan.cluster import Condition, Plan, SlurmNodeView

# What Ready needs: the config in force, slurmrestd answering, every desired node registered.
READY_NEEDS = ("ConfigApplied", "SlurmReachable", "NodesRegistered")


def timestamp(at: dt.datetime) -> str:
    """metav1.Time as the API server writes it (seconds, UTC)."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def transition_time(before: Mapping[str, Any], status: str, now: str) -> str:
    """lastTransitionTime moves only when the status flips (metav1.Condition)."""
    if before.get("status") != status:
        return now
    return str(before.get("lastTransitionTime") or now)


def metav1_conditions(
    previous: Iterable[Mapping[str, Any]],
    conditions: Sequence[Condition],
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    old = {c["type"]: c for c in previous}
    out = []
    for c in conditions:
        status = "True" if c.status else "False"
        out.append(
            {
                "type": c.type,
                "status": status,
                "reason": c.reason,
                "message": c.message[:1024],
                "lastTransitionTime": transition_time(old.get(c.type) or {}, status, now),
                "observedGeneration": generation,
            }
        )
    return out


def _responding(view: SlurmNodeView | None) -> bool:
    return view is not None and view.responding


def compose(
    conditions: Sequence[Condition], plan: Plan, slurm_nodes: Mapping[str, SlurmNodeView]
) -> list[Condition]:
    """The reconcile's conditions with NodesRegistered, Ready and Degraded added.

    Ready means Slurm can use every node it should have: each desired node
    answers. Kueue is optional: its absence is reported, not a degradation.
    """
    members = {n for nodes in plan.desired.values() for n in nodes}
    missing = sorted(n for n in members if not _responding(slurm_nodes.get(n)))
    registered = Condition(
        "NodesRegistered",
        not missing,
        "AllRegistered" if not missing else "Waiting",
        f"{len(members) - len(missing)}/{len(members)} slurmd registered"
        + (f"; waiting for {', '.join(missing[:10])}" if missing else ""),
    )
    composed = [*conditions, registered]
    ready = all(c.status for c in composed if c.type in READY_NEEDS)
    degraded = [c for c in composed if not c.status and c.reason != "KueueNotInstalled"]
    return [
        *composed,
        Condition(
            "Ready",
            ready,
            "Ready" if ready else "NotReady",
            "; ".join(f"{c.type}: {c.message}" for c in degraded) or "all good",
        ),
        Condition(
            "Degraded",
            bool(degraded),
            "Degraded" if degraded else "Healthy",
            ", ".join(c.type for c in degraded),
        ),
    ]


def condition(conditions: Sequence[Condition], kind: str) -> Condition:
    return next(c for c in conditions if c.type == kind)
