"""Upgrading a cluster's Slurm in Slurm's order, never killing a job (pure).

A change of `spec.image` is an upgrade (docs/upgrades.md). Slurm's Upgrade
Guide (upgrades.html, "Upgrade Procedure") orders it: slurmdbd first, then
slurmctld, then the commands (slurmrestd, login's sackd), slurmd last; a
daemon accepts peers up to two (three from 24.11) releases older, never
newer (plan/slurm_release.py). So each reconcile builds every component
with the image its step allows, judged from what runs (the objects' images,
the slurmd pods'), not from memory:

- the first step whose objects do not all run the new image rolled out and
  Ready is the current one: its objects get the new image, later ones keep
  theirs; slurmctld's step also waits for Slurm to answer (its state stays
  on its PVC across the pod's replacement; without one, slurmctld is not
  replaced while a job runs);
- then slurmd, unit by unit (plan/upgrade_slurmd.py), and with a NodeSet's
  `updateStrategy.window` only inside it, under a MAINT reservation;
- a downgrade, or a jump wider than Slurm accepts, is refused: nothing
  changes and the condition names spec.image;
- a step that makes no progress for STEP_DEADLINE_SECONDS (a pod not Ready,
  slurmctld not answering) stops the upgrade with a condition naming it; it
  goes on by itself once the cause is gone, and from the start once
  spec.image changes. Waiting for jobs to end is not a failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmkube.api import well_known as wk
from slurmkube.plan.model import Condition, PodView, SlurmNodeView
from slurmkube.plan.slurm_release import release_of, upgrade_refusal
from slurmkube.plan.upgrade_model import (
    COMPLETE,
    REFUSED,
    SLURMCTLD,
    SLURMD_PHASE,
    STEPS,
    ComponentView,
    Images,
    MaintenanceReservation,
    ReservationView,
    UpgradeMemory,
    UpgradeStatus,
)
from slurmkube.plan.upgrade_slurmd import NodeSetNodes, SlurmdStep, plan_slurmd_step
from slurmkube.plan.upgrade_window import plan_reservations

STEP_DEADLINE_SECONDS = 600.0
CONDITION = "SlurmUpgrade"


@dataclass(frozen=True, slots=True)
class UpgradeInput:
    subject: str  # what the user set, for messages: "SlurmCluster gpu spec.image"
    to: str
    components: Mapping[str, ComponentView]
    pods: Sequence[PodView]
    slurm_nodes: Mapping[str, SlurmNodeView] | None
    node_sets: Sequence[NodeSetNodes]
    blocks: Mapping[str, str] = field(default_factory=dict)
    memory: UpgradeMemory | None = None
    # Our maintenance reservations as Slurm shows them; None: not read.
    reservations: Mapping[str, ReservationView] | None = None
    now: float = 0.0
    # slurmctld's state is on a volume that outlives its pod (controller.persistence).
    state_kept: bool = True


@dataclass(frozen=True, slots=True)
class UpgradePlan:
    images: Images
    drain: tuple[str, ...] = ()
    reason: str = ""
    holding: frozenset[str] = frozenset()
    reservations: tuple[MaintenanceReservation, ...] = ()
    release: tuple[str, ...] = ()  # reservation names to delete
    status: UpgradeStatus | None = None
    condition: Condition | None = None


def plan_upgrade(inp: UpgradeInput) -> UpgradePlan:
    to = inp.to
    running = _running(inp)
    memory = inp.memory if inp.memory is not None and inp.memory.to_image == to else None
    everything_new = all(image == to for image in running)
    if everything_new and (memory is None or memory.phase in (COMPLETE, REFUSED)):
        return _settled(inp, memory)
    from_image = memory.from_image if memory is not None else _first_old(inp, running)
    refusal = _refusal(inp, running)
    if refusal is not None:
        control = {n: c.image for n, c in inp.components.items() if c.image}
        keep = Images(control, _pod_images(inp, from_image), from_image)
        since = _since(memory, REFUSED, inp.now, done=None)
        status = UpgradeStatus(from_image, to, REFUSED, 0, 0, refusal, since)
        return UpgradePlan(
            keep, status=status, condition=Condition(CONDITION, False, "Refused", refusal)
        )
    # slurmctld proves it came up with its state by answering; once the upgrade
    # went past it, a slurmrestd hiccup is no reason to go back a step.
    past = memory is not None and memory.phase in ("Clients", SLURMD_PHASE)
    phase, components = _control_phase(
        inp, from_image, answered=past or inp.slurm_nodes is not None
    )
    since = _since(memory, phase, inp.now, done=None)
    stalled = inp.now - since > STEP_DEADLINE_SECONDS
    lost = _state_would_be_lost(inp, phase)
    if lost is not None:
        components[SLURMCTLD] = inp.components[SLURMCTLD].image
        stalled = True
    if phase != SLURMD_PHASE:
        images = Images(components, _pod_images(inp, from_image), to)
        message, reason = lost or _control_message(phase, inp, stalled)
        status = UpgradeStatus(from_image, to, phase, 0, _total(inp), message, since)
        return UpgradePlan(
            images,
            reservations=plan_reservations(inp, running_old=True)[0],
            status=status,
            condition=Condition(CONDITION, not stalled, reason, message),
        )
    step = _slurmd_step(inp, stalled=False)
    since = _since(memory, phase, inp.now, done=step.done)
    stalled = inp.now - since > STEP_DEADLINE_SECONDS and bool(step.not_ready)
    if stalled:
        step = _slurmd_step(inp, stalled=True)
    if everything_new and step.done == step.total:
        return _settled(inp, memory)
    wanted, release = plan_reservations(inp, running_old=False)
    message, reason = _slurmd_message(step, stalled)
    status = UpgradeStatus(from_image, to, SLURMD_PHASE, step.done, step.total, message, since)
    return UpgradePlan(
        Images(components, step.images, to),
        drain=step.drain,
        reason=f"{wk.DRAIN_REASON_PREFIX} Slurm upgrade to {_version(to)}",
        holding=step.holding,
        reservations=wanted,
        release=release,
        status=status,
        condition=Condition(CONDITION, not stalled, reason, message),
    )


def _state_would_be_lost(inp: UpgradeInput, phase: str) -> tuple[str, str] | None:
    """Without a volume for its state, replacing slurmctld forgets every job: it is
    not replaced while Slurm shows a job running (or cannot be asked)."""
    ctld = inp.components.get(SLURMCTLD)
    if inp.state_kept or phase != "Slurmctld" or ctld is None or ctld.image in ("", inp.to):
        return None
    busy = sorted(n for n, v in (inp.slurm_nodes or {}).items() if v.busy)
    if inp.slurm_nodes is not None and not busy:
        return None
    running = f"jobs run on {', '.join(busy[:10])}" if busy else "Slurm does not answer"
    message = (
        f"stopped: {inp.subject.rsplit(' ', 1)[0]} spec.controller.persistence.enabled is "
        f"false, so slurmctld's replacement would forget its jobs, and {running}; it waits "
        "for them to end (pending jobs are lost with it too)"
    )
    return message, "SlurmctldStateNotKept"


def _slurmd_step(inp: UpgradeInput, *, stalled: bool) -> SlurmdStep:
    return plan_slurmd_step(
        inp.to,
        inp.node_sets,
        inp.pods,
        slurm_nodes=inp.slurm_nodes,
        blocks=inp.blocks,
        now=inp.now,
        stalled=stalled,
    )


def _running(inp: UpgradeInput) -> list[str]:
    """Every image observed: the control plane's, then the live slurmd pods'."""
    images = [c.image for c in inp.components.values() if c.image]
    return images + [p.image for p in inp.pods if p.image and not p.deleting]


def _settled(inp: UpgradeInput, memory: UpgradeMemory | None) -> UpgradePlan:
    """Nothing runs another image (and the slurmd pods an upgrade made are Ready):
    the last upgrade to it stays reported, Complete."""
    images = Images({}, {}, inp.to)
    release = tuple(sorted(inp.reservations or {}))
    if memory is None:
        return UpgradePlan(images, release=release)
    total = _total(inp)
    message = f"every component runs {inp.to}"
    status = UpgradeStatus(memory.from_image, inp.to, COMPLETE, total, total, message, memory.since)
    if memory.phase != COMPLETE:
        status = UpgradeStatus(memory.from_image, inp.to, COMPLETE, total, total, message, inp.now)
    return UpgradePlan(
        images,
        release=release,
        status=status,
        condition=Condition(CONDITION, True, COMPLETE, message),
    )


def _first_old(inp: UpgradeInput, running: Sequence[str]) -> str:
    """The image the upgrade starts from: slurmctld's when it is not the new one."""
    ctld = inp.components.get(SLURMCTLD)
    if ctld is not None and ctld.image and ctld.image != inp.to:
        return ctld.image
    return next(image for image in running if image != inp.to)


def _refusal(inp: UpgradeInput, running: Sequence[str]) -> str | None:
    new = release_of(inp.to)
    if new is None:
        return None  # the tag names no version: Slurm's order still holds, unchecked
    for image in sorted(set(running)):
        old = release_of(image)
        refusal = None if old is None else upgrade_refusal(old, new, inp.subject)
        if refusal is not None:
            return refusal
    return None


def _control_phase(inp: UpgradeInput, old: str, *, answered: bool) -> tuple[str, dict[str, str]]:
    """The first step not done, and the image of each control-plane object: the new
    one up to that step, after it the one it runs (`old` for one not made yet)."""
    images: dict[str, str] = {}
    current = SLURMD_PHASE
    for phase, names in STEPS:
        if current == SLURMD_PHASE:
            for name in names:
                images[name] = inp.to
            present = [inp.components[n] for n in names if n in inp.components]
            waiting = any(c.image != inp.to or not c.rolled_out for c in present)
            if waiting or (phase == "Slurmctld" and not answered):
                current = phase
            continue
        for name in names:
            seen = inp.components.get(name)
            images[name] = seen.image if seen is not None and seen.image else old
    return current, images


def _pod_images(inp: UpgradeInput, old: str) -> dict[str, str]:
    """Every slurmd pod keeps its image; a node without one gets `old`."""
    live = {p.node: p.image for p in inp.pods if p.image and not p.deleting}
    nodes = {n for ns in inp.node_sets for n in ns.nodes}
    return {n: live.get(n) or old for n in sorted(nodes)}


def _since(memory: UpgradeMemory | None, phase: str, now: float, done: int | None) -> float:
    """Since when the upgrade has stood where it stands (phase, nodes done)."""
    if memory is None or memory.phase != phase:
        return now
    if done is not None and memory.nodes_done != done:
        return now
    return memory.since


def _total(inp: UpgradeInput) -> int:
    return sum(len(ns.nodes) for ns in inp.node_sets)


_WHAT = {
    "Slurmdbd": "slurmdbd (its database is converted on first start)",
    "Slurmctld": "slurmctld",
    "Clients": "slurmrestd and the login pods",
}


def _control_message(phase: str, inp: UpgradeInput, stalled: bool) -> tuple[str, str]:
    what = _WHAT[phase]
    if not stalled:
        return f"upgrading {what} to {inp.to}", "InProgress"
    deadline = f"{STEP_DEADLINE_SECONDS:.0f}s"
    if phase == "Slurmctld" and inp.slurm_nodes is None:
        return f"stopped: slurmctld on {inp.to} did not answer within {deadline}", (
            "SlurmctldNotAnswering"
        )
    return f"stopped: {what} not Ready on {inp.to} within {deadline}", f"{phase}NotReady"


def _slurmd_message(step: SlurmdStep, stalled: bool) -> tuple[str, str]:
    counts = f"{step.done}/{step.total} slurmd pods upgraded"
    if stalled:
        sample = ", ".join(step.not_ready[:10])
        deadline = f"{STEP_DEADLINE_SECONDS:.0f}s"
        return f"stopped: {counts}; new slurmd pods not Ready within {deadline}: {sample}", (
            "SlurmdNotReady"
        )
    parts = [counts]
    if step.busy:
        parts.append(f"waiting for jobs on {', '.join(step.busy[:10])}")
    if step.outside_window:
        parts.append(f"outside the update window of {', '.join(step.outside_window)}")
    return "; ".join(parts), "InProgress"


def _version(image: str) -> str:
    release = release_of(image)
    return str(release) if release is not None else image.rsplit("/", 1)[-1]
