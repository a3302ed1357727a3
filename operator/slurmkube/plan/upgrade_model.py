"""What the upgrade planner reads and returns (plan/upgrade.py): the control
plane's images as observed, the last status it wrote, the maintenance
reservations Slurm holds, and the images each component is built with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

# The control plane in Slurm's upgrade order (upgrades.html, "Upgrade
# Procedure"): slurmdbd, then slurmctld, then the other commands (slurmrestd,
# and sackd with the client commands in login pods); slurmd last.
SLURMDBD: Final = "slurmdbd"
SLURMCTLD: Final = "slurmctld"
SLURMRESTD: Final = "slurmrestd"
LOGIN: Final = "login"
STEPS: Final = (
    ("Slurmdbd", (SLURMDBD,)),
    ("Slurmctld", (SLURMCTLD,)),
    ("Clients", (SLURMRESTD, LOGIN)),
)
SLURMD_PHASE: Final = "Slurmd"
COMPLETE: Final = "Complete"
REFUSED: Final = "Refused"


@dataclass(frozen=True, slots=True)
class ComponentView:
    """A control-plane Deployment or StatefulSet: its template's Slurm image, and
    whether every replica runs that template and is Ready."""

    image: str
    rolled_out: bool = True


@dataclass(frozen=True, slots=True)
class UpgradeMemory:
    """The status.upgrade the last reconcile wrote (`since` in epoch seconds)."""

    from_image: str
    to_image: str
    phase: str
    nodes_done: int = 0
    since: float = 0.0


@dataclass(frozen=True, slots=True)
class ReservationView:
    """A maintenance reservation slurmkube made, as Slurm shows it (epoch seconds)."""

    name: str
    nodes: tuple[str, ...]
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class MaintenanceReservation:
    """A Flags=MAINT reservation to create, or to update when `exists`, lasting
    `minutes` from `start` (epoch seconds; None: now, or as it started)."""

    name: str
    nodes: tuple[str, ...]
    start: float | None
    minutes: int
    exists: bool = False


@dataclass(frozen=True, slots=True)
class Images:
    """The image each component is built with this reconcile."""

    control: Mapping[str, str]  # SLURMDBD, SLURMCTLD, SLURMRESTD, LOGIN -> image
    slurmd: Mapping[str, str] = field(default_factory=dict)  # node -> image, where not `to`
    to: str = ""

    def of(self, component: str) -> str:
        return self.control.get(component, self.to)

    def of_node(self, node: str) -> str:
        return self.slurmd.get(node, self.to)


@dataclass(frozen=True, slots=True)
class UpgradeStatus:
    """status.upgrade (api/status.py UpgradeStatus)."""

    from_image: str
    to_image: str
    phase: str
    nodes_done: int
    nodes_total: int
    message: str
    since: float
