"""Update windows' maintenance reservations (pure): a Flags=MAINT reservation
over each NodeSet with an `updateStrategy.window` whose pods an upgrade still
has to replace, from the window's start to its end (like Slinky's
ScheduledUpdate), so Slurm starts no job there that would run into it."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Protocol

from slurmkube.plan.model import PodView
from slurmkube.plan.upgrade_model import MaintenanceReservation, ReservationView
from slurmkube.plan.upgrade_slurmd import NodeSetNodes

RESERVATION_PREFIX = "slurmkube-upgrade-"


class WindowInput(Protocol):
    """What the reservations are planned from (plan.upgrade.UpgradeInput)."""

    @property
    def to(self) -> str: ...
    @property
    def pods(self) -> Sequence[PodView]: ...
    @property
    def node_sets(self) -> Sequence[NodeSetNodes]: ...
    @property
    def reservations(self) -> Mapping[str, ReservationView] | None: ...
    @property
    def now(self) -> float: ...


def reservation_name(node_set: str) -> str:
    """At most 63 characters (Slurm's reservation names here, slurm/arguments.py)."""
    name = RESERVATION_PREFIX + node_set
    if len(name) <= 63:
        return name
    return RESERVATION_PREFIX + hashlib.sha256(node_set.encode()).hexdigest()[:16]


def plan_reservations(
    inp: WindowInput, *, running_old: bool
) -> tuple[tuple[MaintenanceReservation, ...], tuple[str, ...]]:
    """A MAINT reservation over each windowed NodeSet with pods still to upgrade,
    from its window's start to its end; ours that no NodeSet wants any more go.
    `running_old`: before the slurmd step every pod still counts as old."""
    if inp.reservations is None:
        return (), ()
    live = {p.node: p for p in inp.pods if not p.deleting}
    wanted: list[MaintenanceReservation] = []
    keep: set[str] = set()
    for ns in inp.node_sets:
        window = ns.strategy.window
        if window is None or ns.autoscaled or ns.strategy.type == "OnDelete":
            continue
        start, end = window.start.timestamp(), window.end.timestamp()
        old = [
            n for n in ns.nodes if n in live and (running_old or live[n].image not in ("", inp.to))
        ]
        if not old or inp.now >= end:
            continue
        name = reservation_name(ns.name)
        keep.add(name)
        nodes = tuple(sorted(ns.nodes))
        seen = inp.reservations.get(name)
        # Slurm keeps minutes: an end within one of the window's is the window's.
        if seen is not None and seen.nodes == nodes and abs(seen.end - end) <= 60:
            continue
        begins = start if start > inp.now else None
        since = begins if begins is not None else (seen.start if seen else inp.now)
        minutes = max(1, math.ceil((end - since) / 60))
        wanted.append(MaintenanceReservation(name, nodes, begins, minutes, seen is not None))
    return tuple(wanted), tuple(sorted(set(inp.reservations) - keep))
