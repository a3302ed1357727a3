"""The slurmd step of a Slurm upgrade: which nodes' pods get the new image, and
which nodes are drained for it (pure).

A unit is an NVLink block of one NodeSet (topology plan; a node in no block
is a unit of its own). A unit is upgraded whole, so no block ever runs jobs
half old, half new:

- its nodes are drained (our prefix) and held drained;
- once every node still on the old image is drained and idle, the whole unit
  gets the new image; plan/rollout.py then replaces each outdated pod whose
  node Slurm shows drained with no job (never a busy one);
- a node stays held until it runs a Ready pod of the new image, then the usual
  undrain resumes it (no old pod is left in its unit by then).

Units start while the NodeSet's `maxUnavailable` allows (one unit at a time
when a unit is larger), idle ones first, and with `updateStrategy.window` only
while the window is open; a unit not yet switched when the window closes is
released. OnDelete NodeSets get the new image for every pod (replaced as
someone deletes them); autoscaled ones give it to pods made from then on, so
their old pods go as Slurm powers their nodes down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmkube.api.models import UpdateStrategy
from slurmkube.plan.model import PodView, SlurmNodeView


@dataclass(frozen=True, slots=True)
class NodeSetNodes:
    """A NodeSet as the slurmd step sees it: the nodes that should run slurmd."""

    name: str
    nodes: tuple[str, ...]
    strategy: UpdateStrategy = field(default_factory=UpdateStrategy)
    autoscaled: bool = False


@dataclass(frozen=True, slots=True)
class SlurmdStep:
    images: Mapping[str, str]  # node -> image, where not the new one
    drain: tuple[str, ...] = ()
    holding: frozenset[str] = frozenset()
    done: int = 0
    total: int = 0
    # Nodes whose job the step waits for, and new pods not Ready yet.
    busy: tuple[str, ...] = ()
    not_ready: tuple[str, ...] = ()
    # NodeSets whose window is closed while they still have old pods.
    outside_window: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Unit:
    nodes: tuple[str, ...]
    old: tuple[str, ...]  # nodes whose live pod runs another image than the new one
    old_image: str


def plan_slurmd_step(
    to: str,
    node_sets: Sequence[NodeSetNodes],
    pods: Sequence[PodView],
    *,
    slurm_nodes: Mapping[str, SlurmNodeView] | None,
    blocks: Mapping[str, str],
    now: float,
    stalled: bool = False,
) -> SlurmdStep:
    """`stalled`: a step past its deadline; no further unit starts."""
    live = {p.node: p for p in pods if not p.deleting}
    # Old pods still terminating: their slurmd may be up until they are gone.
    leaving = {p.node for p in pods if p.deleting and _old(p, to)}
    out = _Step()
    for ns in node_sets:
        units = _units(ns, live, blocks, to)
        settling = [u for u in units if not u.old and not _settled(u, live, to)]
        for unit in settling:
            # Once no old pod is left, a node resumes as soon as its new pod is Ready.
            coming = [n for n in unit.nodes if not _runs(live.get(n), to)]
            out.holding.update(unit.nodes if leaving.intersection(unit.nodes) else coming)
            out.not_ready += coming
        waiting = [u for u in units if u.old]
        if ns.strategy.type == "OnDelete":
            continue  # every pod gets the new image; replaced as someone deletes it
        if ns.autoscaled or slurm_nodes is None or not _window_open(ns, now):
            # Power saving replaces autoscaled pods; without Slurm nothing moves.
            out.images |= _keep(waiting, live)
            if ns.strategy.window is not None and not _window_open(ns, now):
                out.outside.append(ns.name)
            continue
        going = _going(ns, waiting, settling, slurm_nodes, stalled=stalled)
        for unit in waiting:
            _drain_or_switch(unit, unit in going, live, slurm_nodes, out)
    every = [n for ns in node_sets for n in ns.nodes]
    return SlurmdStep(
        images=out.images,
        drain=tuple(out.drain),
        holding=frozenset(out.holding),
        done=sum(_runs(live.get(n), to) for n in every),
        total=len(every),
        busy=tuple(out.busy),
        not_ready=tuple(sorted(out.not_ready)),
        outside_window=tuple(out.outside),
    )


@dataclass
class _Step:
    images: dict[str, str] = field(default_factory=dict)
    drain: list[str] = field(default_factory=list)
    holding: set[str] = field(default_factory=set)
    busy: list[str] = field(default_factory=list)
    not_ready: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)


def _window_open(ns: NodeSetNodes, now: float) -> bool:
    window = ns.strategy.window
    return window is None or window.start.timestamp() <= now < window.end.timestamp()


def _going(
    ns: NodeSetNodes,
    waiting: Sequence[_Unit],
    settling: Sequence[_Unit],
    slurm_nodes: Mapping[str, SlurmNodeView],
    *,
    stalled: bool,
) -> list[_Unit]:
    """Units under way (a node of theirs drained by us), then idle ones first while
    maxUnavailable allows; always one, whatever its size, when none is under way."""
    going = [u for u in waiting if any(_ours(slurm_nodes.get(n)) for n in u.old)]
    used = sum(len(u.nodes) for u in (*settling, *going))
    idle_first = sorted(
        (u for u in waiting if u not in going),
        key=lambda u: (sum(_busy(slurm_nodes.get(n)) for n in u.old), u.nodes),
    )
    for unit in idle_first:
        if stalled or (used and used + len(unit.nodes) > ns.strategy.max_unavailable):
            break
        going.append(unit)
        used += len(unit.nodes)
    return going


def _drain_or_switch(
    unit: _Unit,
    going: bool,
    live: Mapping[str, PodView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    out: _Step,
) -> None:
    """A unit under way is held; once its old nodes are drained and idle it switches
    to the new image whole (plan/rollout.py replaces the pods), else it drains."""
    if going:
        out.holding.update(unit.nodes)
        if all(_replaceable(slurm_nodes.get(n)) for n in unit.old):
            return
        out.drain += [n for n in unit.nodes if _undrained(slurm_nodes.get(n))]
        out.busy += [n for n in unit.old if _busy(slurm_nodes.get(n))]
    out.images |= _keep([unit], live)


def _units(
    ns: NodeSetNodes, live: Mapping[str, PodView], blocks: Mapping[str, str], to: str
) -> list[_Unit]:
    grouped: dict[str, list[str]] = {}
    for node in ns.nodes:
        grouped.setdefault(blocks.get(node, f"node:{node}"), []).append(node)
    units = []
    for _, nodes in sorted(grouped.items()):
        old = tuple(n for n in nodes if n in live and _old(live[n], to))
        units.append(_Unit(tuple(nodes), old, live[old[0]].image if old else to))
    return units


def _keep(units: Sequence[_Unit], live: Mapping[str, PodView]) -> dict[str, str]:
    """Each node keeps the image its pod runs; a node without one takes its unit's
    old image, so a unit never mixes images before it is switched whole."""
    return {
        n: (live[n].image if n in live and live[n].image else u.old_image)
        for u in units
        for n in u.nodes
    }


def _old(pod: PodView, to: str) -> bool:
    return bool(pod.image) and pod.image != to


def _runs(pod: PodView | None, to: str) -> bool:
    return pod is not None and pod.ready and not _old(pod, to)


def _settled(unit: _Unit, live: Mapping[str, PodView], to: str) -> bool:
    return all(_runs(live.get(n), to) for n in unit.nodes)


def _ours(view: SlurmNodeView | None) -> bool:
    return view is not None and view.drained_by_us


def _busy(view: SlurmNodeView | None) -> bool:
    return view is not None and view.busy


def _undrained(view: SlurmNodeView | None) -> bool:
    return view is not None and not view.drain


def _replaceable(view: SlurmNodeView | None) -> bool:
    """What plan/rollout.py replaces at once: a node Slurm does not know, or one
    drained (by us or an admin) or not answering, with no job."""
    return view is None or (not view.busy and (view.drain or not view.responding))
