"""Builders for the Slurm upgrade tests: the planner's input, piece by piece."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.api.models import UpdateStrategy
from slurmkube.plan.model import PodView, SlurmNodeView
from slurmkube.plan.upgrade import UpgradeInput
from slurmkube.plan.upgrade_model import (
    LOGIN,
    SLURMCTLD,
    SLURMDBD,
    SLURMRESTD,
    ComponentView,
    ReservationView,
    UpgradeMemory,
)
from slurmkube.plan.upgrade_slurmd import NodeSetNodes

OLD = "slurmkube/slurm:24.11.5"
NEW = "slurmkube/slurm:26.05.5"
NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC).timestamp()
NODES = ("n1", "n2", "n3", "n4")
# Two NVLink blocks of two nodes.
BLOCKS = {"n1": "b1", "n2": "b1", "n3": "b2", "n4": "b2"}


def control(
    image: str = OLD, *, pending: Iterable[str] = (), accounting: bool = True, **images: str
) -> dict[str, ComponentView]:
    """The control plane on `image`; `slurmdbd=NEW` and the like set one component,
    `pending` names those whose replicas do not all run their template, Ready."""
    names = [SLURMDBD] if accounting else []
    names += [SLURMCTLD, SLURMRESTD, LOGIN]
    waiting = set(pending)
    return {n: ComponentView(images.get(n, image), n not in waiting) for n in names}


def upgraded_control(accounting: bool = True) -> dict[str, ComponentView]:
    return control(NEW, accounting=accounting)


def pods(
    images: Mapping[str, str] | None = None, *, ready: bool = True, missing: Iterable[str] = ()
) -> list[PodView]:
    """One slurmd pod per node of NODES on OLD, unless `images` says otherwise."""
    gone = set(missing)
    chosen = {n: OLD for n in NODES} | dict(images or {})
    return [
        PodView(f"gpu-{n}", n, "gpu", ready=ready, image=image)
        for n, image in sorted(chosen.items())
        if n not in gone
    ]


def slurm(
    *, drained: Iterable[str] = (), busy: Iterable[str] = (), admin: Iterable[str] = ()
) -> dict[str, SlurmNodeView]:
    """Slurm's view of NODES: drained by us, busy, or drained by an admin."""
    ours, jobs, theirs = set(drained), set(busy), set(admin)
    out = {}
    for n in NODES:
        reason = f"{wk.DRAIN_REASON_PREFIX} x" if n in ours else "RMA" if n in theirs else ""
        out[n] = SlurmNodeView(n, busy=n in jobs, drain=bool(reason), reason=reason)
    return out


def strategy(**fields: Any) -> UpdateStrategy:
    return UpdateStrategy.model_validate(fields)


def window(start_minutes: float, minutes: int = 60) -> dict[str, Any]:
    """A window starting `start_minutes` after NOW (negative: already open)."""
    start = dt.datetime.fromtimestamp(NOW + start_minutes * 60, dt.UTC)
    return {"start": start.isoformat(), "durationMinutes": minutes}


def node_set(
    nodes: Iterable[str] = NODES, *, autoscaled: bool = False, **fields: Any
) -> NodeSetNodes:
    return NodeSetNodes("gpu", tuple(nodes), strategy(**fields), autoscaled=autoscaled)


def memory(phase: str, *, seconds_ago: float = 0, done: int = 0, to: str = NEW) -> UpgradeMemory:
    return UpgradeMemory(OLD, to, phase, done, NOW - seconds_ago)


def reservation(name: str, nodes: Iterable[str] = NODES, *, end: float) -> ReservationView:
    return ReservationView(name, tuple(sorted(nodes)), NOW - 60, end)


def upgrade_input(**fields: Any) -> UpgradeInput:
    """Every step done up to slurmd, all pods on OLD and idle, unless told otherwise."""
    base = UpgradeInput(
        subject="SlurmCluster test spec.image",
        to=NEW,
        components=upgraded_control(),
        pods=pods(),
        slurm_nodes=slurm(),
        node_sets=(node_set(),),
        blocks=BLOCKS,
        now=NOW,
    )
    return replace(base, **fields)
