"""A SlurmCluster's conditions: composing Ready and Degraded, and the metav1 rules (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.build.slurmrestd import TLS_CERT
from slurmkube.plan.model import Condition, Plan, SlurmNodeView

# What Ready needs besides enough nodes: the control plane answering with the
# config in force (a config change keeps Ready false until Slurm shows it), and
# the last reconcile done.
READY_NEEDS = ("ConfigApplied", "SlurmReachable", "Reconciled")


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
    """The reconcile's conditions with NodesRegistered, Reconciled, Ready and Degraded added.

    Ready means the control plane is healthy and the config in force, and at
    least `spec.readyNodeShare` of the nodes that should run slurmd answer: at
    fleet scale some node is always down, and NodesRegistered says which.
    Kueue is optional: its absence is reported, not a degradation.
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
    if not any(c.type == "Reconciled" for c in composed):
        composed.append(Condition("Reconciled", True, "Reconciled", "observe, plan, apply done"))
    share = (len(members) - len(missing)) / len(members) if members else 1.0
    enough = share >= plan.ready_node_share
    ready = enough and all(c.status for c in composed if c.type in READY_NEEDS)
    degraded = [c for c in composed if not c.status and c.reason != "KueueNotInstalled"]
    why = [f"{c.type}: {c.message}" for c in degraded if c.type != "NodesRegistered" or not enough]
    return [
        *composed,
        Condition(
            "Ready",
            ready,
            "Ready" if ready else "NotReady",
            "; ".join(why) or _ready_message(len(members) - len(missing), len(members)),
        ),
        Condition(
            "Degraded",
            bool(degraded),
            "Degraded" if degraded else "Healthy",
            ", ".join(c.type for c in degraded),
        ),
    ]


def _ready_message(up: int, total: int) -> str:
    return "all good" if up == total else f"{up}/{total} nodes respond, enough for Ready"


def reconcile_failed(
    previous: Iterable[Mapping[str, Any]],
    error: BaseException,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """The status conditions after a reconcile that raised: Reconciled false with the
    error, Ready false (what is in force is not known), Degraded true; every other
    condition as it was. The controller patches them, then lets the queue retry."""
    reason = type(error).__name__
    message = f"{reason}: {error}" if str(error) else reason
    kept = [
        Condition(str(c["type"]), c.get("status") == "True", str(c["reason"]), str(c["message"]))
        for c in previous
        if c.get("type") not in ("Reconciled", "Ready", "Degraded") and "reason" in c
    ]
    failed = [
        Condition("Reconciled", False, "ReconcileError", message),
        Condition("Ready", False, "ReconcileError", message),
        Condition(
            "Degraded",
            True,
            "Degraded",
            ", ".join([*(c.type for c in kept if not c.status), "Reconciled"]),
        ),
    ]
    return metav1_conditions(previous, [*kept, *failed], generation, now)


def condition(conditions: Sequence[Condition], kind: str) -> Condition:
    return next(c for c in conditions if c.type == kind)


def unreachable_reason(cluster: SlurmCluster, has_certificate: bool, error: str) -> str:
    """SlurmReachable's message when slurmrestd did not answer: the read's error, after
    the cause a user can fix when `spec.restApi.tls.secretName` names a Secret without a
    certificate (its tls container mounts it, so slurmrestd's pod never starts)."""
    tls = cluster.spec.rest_api.tls
    if not tls.enabled or not tls.secret_name or has_certificate:
        return error
    namespace = wk.namespace_or_default(cluster.metadata.namespace)
    return (
        f"Secret {namespace}/{tls.secret_name} (spec.restApi.tls.secretName) has no "
        f"{TLS_CERT}, so slurmrestd's pod cannot start; {error}"
    )
