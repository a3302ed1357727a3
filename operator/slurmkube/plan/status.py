"""Pure: what the status of a SlurmCluster, its NodeSets and its slurmd pods says
about Slurm's nodes.

The counts follow sinfo(1)'s NODE STATE CODES, folded into the classes an
operator acts on (`SlurmNodeView.state`). Only nodes that should run slurmd count
towards `total`; the powered-down rest of a NodeSet (`State=CLOUD`, sinfo's
`idle~`) is `cloud`. A slurmd pod carries its node's Slurm state as the pod
condition `slurmkube.io/SlurmNode`, so `kubectl get pod -o wide` and anything
reading pod conditions see drains and downs without asking Slurm.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from slurmkube.build.names import Manifest
from slurmkube.plan.conditions import timestamp
from slurmkube.plan.model import Plan, PodView, SlurmNodeView
from slurmkube.plan.upgrade_model import REFUSED, UpgradeMemory, UpgradeStatus

POD_CONDITION: Final = "slurmkube.io/SlurmNode"
STATES: Final = ("idle", "allocated", "mixed", "drain", "down")


def node_counts(
    slurm_nodes: Mapping[str, SlurmNodeView], up: Collection[str], members: Iterable[str] = ()
) -> dict[str, int]:
    """`up`: nodes that should run slurmd; `members`: every node of the config (for `cloud`).

    A wanted node Slurm does not know yet, or that does not answer, is `down`:
    it is why the cluster is not Ready.
    """
    states: Counter[str] = Counter()
    for name in up:
        view = slurm_nodes.get(name)
        states["down" if view is None or not view.responding else view.state] += 1
    cloud = sum(
        1
        for name in members
        if name not in up and (view := slurm_nodes.get(name)) is not None and view.state == "cloud"
    )
    return {"total": len(up), **{s: states[s] for s in STATES}, "cloud": cloud}


def gpu_counts(slurm_nodes: Mapping[str, SlurmNodeView], up: Iterable[str]) -> dict[str, int]:
    views = [v for n in up if (v := slurm_nodes.get(n)) is not None and v.responding]
    return {
        "total": sum(v.gpus for v in views),
        "allocated": sum(v.gpus_allocated for v in views),
    }


@dataclass(frozen=True, slots=True)
class PodCondition:
    pod: str
    status: bool
    reason: str
    message: str

    def as_manifest(self, now: str) -> dict[str, Any]:
        return {
            "type": POD_CONDITION,
            "status": "True" if self.status else "False",
            "reason": self.reason,
            "message": self.message[:1024],
            "lastTransitionTime": now,
        }


_REASONS: Final = {
    "idle": "Idle",
    "allocated": "Allocated",
    "mixed": "Mixed",
    "drain": "Drained",
    "down": "Down",
    "cloud": "PoweredDown",
}


def pod_condition(pod: str, view: SlurmNodeView | None) -> PodCondition:
    """True while Slurm can schedule on the node (idle, allocated or mixed)."""
    if view is None:
        return PodCondition(pod, False, "NotRegistered", "Slurm does not know this node yet")
    if not view.responding:
        return PodCondition(pod, False, "NotResponding", view.reason or "slurmd does not answer")
    reason = "Draining" if view.drain and view.busy else _REASONS[view.state]
    usable = view.state in ("idle", "allocated", "mixed") and not view.drain
    return PodCondition(pod, usable, reason, view.reason or f"Slurm node is {view.state}")


def pod_condition_updates(
    pods: Iterable[PodView], slurm_nodes: Mapping[str, SlurmNodeView]
) -> list[PodCondition]:
    """Only the pods whose condition would change: a steady fleet costs no writes."""
    out = []
    for pod in pods:
        if pod.deleting:
            continue
        wanted = pod_condition(pod.name, slurm_nodes.get(pod.node))
        if pod.slurm_condition != (wanted.status, wanted.reason, wanted.message[:1024]):
            out.append(wanted)
    return out


# status.nodeProblems is a list in an object the API server stores whole: bounded.
NODE_PROBLEMS_SHOWN: Final = 1000


def node_problems_status(plan: Plan) -> list[dict[str, str]]:
    """status.nodeProblems: one entry per node the config leaves out or holds
    (the NodesValid condition counts them all)."""
    return [
        {"node": p.node, "reason": p.reason, "message": p.message[:1024]}
        for p in plan.node_problems[:NODE_PROBLEMS_SHOWN]
    ]


def upgrade_status(upgrade: UpgradeStatus | None) -> Manifest | None:
    """status.upgrade (api/status.py UpgradeStatus); None removes it (a merge patch)."""
    if upgrade is None:
        return None
    return {
        "from": upgrade.from_image,
        "to": upgrade.to_image,
        "phase": upgrade.phase,
        "nodesDone": upgrade.nodes_done,
        "nodesTotal": upgrade.nodes_total,
        "message": upgrade.message,
        "since": timestamp(dt.datetime.fromtimestamp(upgrade.since, dt.UTC)),
    }


def upgrade_event(
    before: UpgradeMemory | None, upgrade: UpgradeStatus | None
) -> tuple[str, str, bool] | None:
    """(reason, message, warning) of the Event an upgrade's new phase is worth: once
    per phase, judged against the status.upgrade the reconcile read."""
    if upgrade is None:
        return None
    if before is not None and (before.to_image, before.phase) == (upgrade.to_image, upgrade.phase):
        return None
    message = f"{upgrade.from_image} -> {upgrade.to_image}: {upgrade.message}"
    return f"Upgrade{upgrade.phase}", message, upgrade.phase == REFUSED
