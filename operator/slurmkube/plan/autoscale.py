"""Which slurmd pods an autoscaled NodeSet should have, read from Slurm's power saving (pure).

Level based: Slurm decides, the operator follows its node states
(slurm.conf(5) SuspendTime/ResumeTimeout; power_save.html). Slurm marks the
nodes it picked for a job POWERING_UP and the nodes it suspends POWER_DOWN /
POWERING_DOWN, then POWERED_DOWN; slurmrestd shows those flags, which the
operator reads anyway. So the rule is one line: a node of an autoscaled
NodeSet has a slurmd pod exactly while Slurm has it powered up or powering
up. ResumeProgram and SuspendProgram carry nothing (they only have to exit
0), so slurmctld needs no credentials for the operator and a lost call can
never strand a node: the next reconcile reads the state again.

What Slurm cannot express is enforced by what it may pick: powered-down
nodes beyond `maxNodes` or `maxConcurrentResumes`, and nodes lent to Kueue,
are held drained (reason prefixed `slurmkube:`) so Slurm's scheduler never
chooses them; the offer is made in whole NVLink blocks (`keepWholeBlocks`),
the rest of a partly-up block first. Nodes above `maxNodes` that are up, and
lent nodes still up, are powered down through Slurm (POWER_DOWN_ASAP: drained,
suspended once idle), so no job is ever killed. `minNodes` nodes are kept up by
SuspendExcNodes (render.config) and brought up with POWER_UP.

A resume that fails (the pod never starts) ends in Slurm's ResumeTimeout
handling: the node goes DOWN ("ResumeTimeout reached") and POWERED_DOWN, its
jobs are requeued. Such a node is `failed` here, never offered or held; an
admin returns it with `scontrol update NodeName=... State=RESUME`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from slurmkube.api import well_known as wk
from slurmkube.api.models import AutoscalingSpec

# SlurmNodeView.power values, from the node's state flags (observe.slurm_view).
UP: Final = "up"
RESUMING: Final = "resuming"  # POWERING_UP
POWER_DOWN_REQUESTED: Final = "power_down_requested"  # POWER_DOWN, still up
SUSPENDING: Final = "suspending"  # POWERING_DOWN
SUSPENDED: Final = "suspended"  # POWERED_DOWN
POWER_STATES: Final = (UP, RESUMING, POWER_DOWN_REQUESTED, SUSPENDING, SUSPENDED)
_POWERED: Final = frozenset({UP, RESUMING, POWER_DOWN_REQUESTED})

HOLD_LIMIT: Final = f"{wk.DRAIN_REASON_PREFIX} autoscaling limit"
HOLD_UNAVAILABLE: Final = f"{wk.DRAIN_REASON_PREFIX} not available to Slurm"
HOLD_UNDEPLOYED: Final = f"{wk.DRAIN_REASON_PREFIX} beyond the NodeSet's replicas"
_HOLDS: Final = (HOLD_LIMIT, HOLD_UNAVAILABLE, HOLD_UNDEPLOYED)


class PowerNode(Protocol):
    """What autoscaling needs of a Slurm node (plan.cluster.SlurmNodeView)."""

    @property
    def power(self) -> str: ...
    @property
    def down(self) -> bool: ...
    @property
    def drain(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def busy(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Scaling:
    """One autoscaled NodeSet's plan."""

    pods: tuple[str, ...] = ()  # nodes that should have a slurmd pod
    power_up: tuple[str, ...] = ()  # ask Slurm to POWER_UP (minNodes)
    power_down: tuple[str, ...] = ()  # ask Slurm to POWER_DOWN_ASAP (lent, above maxNodes)
    hold: Mapping[str, str] = field(default_factory=dict)  # node -> drain reason
    release: tuple[str, ...] = ()  # our holds to undo
    counts: Mapping[str, int] = field(default_factory=dict)
    failed: tuple[str, ...] = ()


def is_hold(reason: str) -> bool:
    return reason.startswith(_HOLDS)


def removable(node: PowerNode | None) -> bool:
    """A pod of an autoscaled NodeSet may go once Slurm powers its node down: Slurm
    suspends idle nodes only and schedules nothing on them meanwhile (power_save.c)."""
    return node is None or (node.power in (SUSPENDING, SUSPENDED) and not node.busy)


def plan_scaling(
    spec: AutoscalingSpec,
    members: Sequence[str],
    slurm_nodes: Mapping[str, PowerNode] | None,
    unavailable: Mapping[str, str],
    *,
    blocks: Mapping[str, str],
    with_pod: Collection[str] = (),
) -> Scaling:
    """`members`: the NodeSet's nodes in node order; `blocks`: node -> NVLink block;
    `with_pod`: nodes whose slurmd pod exists; `unavailable`: node -> why (lent, cordoned).

    Without an answer from Slurm: keep the pods there are, change nothing.
    """
    if slurm_nodes is None:
        return Scaling(pods=tuple(n for n in members if n in with_pod))
    known = [n for n in members if n in slurm_nodes]
    power = {n: slurm_nodes[n].power for n in known}
    powered = [n for n in known if power[n] in _POWERED]
    # Never a new pod on a node lent away; one already there stays until Slurm powers it down.
    pods = tuple(n for n in powered if n not in unavailable or n in with_pod)
    failed = tuple(n for n in known if power[n] == SUSPENDED and slurm_nodes[n].down)
    limit = len(members) if spec.max_nodes is None else spec.max_nodes
    lent_up = [n for n in powered if n in unavailable and power[n] == UP]
    kept = [n for n in powered if n not in lent_up]
    excess = _excess([n for n in kept if power[n] != POWER_DOWN_REQUESTED], slurm_nodes, limit)
    # POWER_DOWN_ASAP drains first: a busy node finishes its jobs, then Slurm suspends it.
    power_down = tuple(dict.fromkeys(n for n in (*lent_up, *excess) if power[n] == UP))

    suspended = [n for n in known if power[n] == SUSPENDED and n not in failed]
    free = [n for n in suspended if n not in unavailable and not _foreign_drain(slurm_nodes[n])]
    resuming = sum(1 for n in powered if power[n] == RESUMING)
    # A node still powering down counts as used until it is down: offering another
    # meanwhile would be taken back a moment later.
    going = sum(1 for n in known if power[n] == SUSPENDING and n not in unavailable)
    budget = limit - len(kept) - going
    if spec.max_concurrent_resumes is not None:
        budget = min(budget, spec.max_concurrent_resumes - resuming)
    offer = _offer(free, budget, blocks, set(kept), spec.keep_whole_blocks)
    wanted_up = max(0, min(spec.min_nodes, limit) - len(kept))
    power_up = tuple(n for n in offer if not slurm_nodes[n].drain)[:wanted_up]

    hold: dict[str, str] = {}
    for n in suspended:
        view = slurm_nodes[n]
        if n in offer or _foreign_drain(view):
            continue
        reason = (
            f"{HOLD_UNAVAILABLE} ({unavailable[n]})" if n in unavailable else _limit_reason(spec)
        )
        if not (view.drain and view.reason.startswith(reason.split(" (")[0])):
            hold[n] = reason
    release = tuple(
        n
        for n in offer
        if slurm_nodes[n].drain and is_hold(slurm_nodes[n].reason) and n not in hold
    )
    counts = {
        "up": sum(1 for n in powered if power[n] == UP),
        "resuming": resuming,
        "suspending": sum(1 for n in known if power[n] in (POWER_DOWN_REQUESTED, SUSPENDING)),
        "suspended": len(suspended) + len(failed),
        "held": sum(1 for n in suspended if n not in offer and not _foreign_drain(slurm_nodes[n])),
        "failed": len(failed),
    }
    return Scaling(
        pods=pods,
        power_up=power_up,
        power_down=power_down,
        hold=hold,
        release=release,
        counts=counts,
        failed=failed,
    )


def hold_undeployed(
    members: Sequence[str], desired: Collection[str], slurm_nodes: Mapping[str, PowerNode] | None
) -> dict[str, str]:
    """With power saving on, Slurm could resume any powered-down node; those of a NodeSet
    driven by `replicas` would never get a pod, so they are held drained. (A node wanted
    again is undrained like any of our drains: plan.cluster.undrain_candidates.)"""
    if slurm_nodes is None:
        return {}
    return {
        n: HOLD_UNDEPLOYED
        for n in members
        if n not in desired
        and (view := slurm_nodes.get(n)) is not None
        and view.power == SUSPENDED
        and not view.drain
    }


def _limit_reason(spec: AutoscalingSpec) -> str:
    limits = []
    if spec.max_nodes is not None:
        limits.append(f"maxNodes {spec.max_nodes}")
    if spec.max_concurrent_resumes is not None:
        limits.append(f"maxConcurrentResumes {spec.max_concurrent_resumes}")
    return f"{HOLD_LIMIT} ({', '.join(limits) or 'whole blocks'})"


def _foreign_drain(node: PowerNode) -> bool:
    """Drained by someone else (an admin, or health for a sick node): theirs to undo,
    never autoscaling's to hold, offer or release."""
    return node.drain and (not wk.is_ours(node.reason) or wk.is_health_drain(node.reason))


def _excess(kept: Sequence[str], slurm_nodes: Mapping[str, PowerNode], limit: int) -> list[str]:
    """Powered nodes above maxNodes: idle ones first, last in node order first."""
    over = len(kept) - limit
    if over <= 0:
        return []
    ordered = sorted(reversed(kept), key=lambda n: slurm_nodes[n].busy)
    return ordered[:over]


def _offer(
    free: Sequence[str],
    budget: int,
    blocks: Mapping[str, str],
    active: set[str],
    whole: bool,
) -> tuple[str, ...]:
    """Which powered-down nodes Slurm may pick: the rest of partly-up blocks first,
    then whole blocks in block order, then nodes in no block; never more than `budget`."""
    if budget <= 0:
        return ()
    groups: dict[str, list[str]] = {}
    loose: list[str] = []
    for n in free:
        block = blocks.get(n)
        if block is None:
            loose.append(n)
        else:
            groups.setdefault(block, []).append(n)
    partly_up = {blocks[n] for n in active if n in blocks}
    order = sorted(groups, key=lambda b: (b not in partly_up, list(groups).index(b)))
    chosen: list[str] = []
    for block in order:
        nodes = groups[block]
        left = budget - len(chosen)
        if len(nodes) <= left:
            chosen += nodes
        elif not whole:
            chosen += nodes[:left]
    for n in loose:
        if len(chosen) < budget:
            chosen.append(n)
    return tuple(chosen)
