"""The event log that goodput is computed from.

An event says what happened to a job or a node at time `t` (seconds, any
epoch). The simulator emits them; the operator's live exporter derives them
from observed Slurm and Kubernetes state (`goodput/live.py`). Nothing here
knows which.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Side(enum.Enum):
    """The control plane that owns a node or runs a job."""

    SLURM = "slurm"
    KUBERNETES = "kubernetes"

    @property
    def other(self) -> Side:
        return Side.KUBERNETES if self is Side.SLURM else Side.SLURM


class Health(enum.Enum):
    UP = "up"
    DOWN = "down"  # failed; Slurm state DOWN or NotReady in Kubernetes
    DRAINED = "drained"  # taken out of service by an admin or a health check


@dataclass(frozen=True, slots=True)
class NodeAdded:
    """A node joins the fleet, healthy and empty.

    `pool` groups nodes and jobs that can use each other (a static split has
    one pool per side); `transferable` nodes can change owner when empty
    (slurmkube sharing), so a queued job of the other side can use them too.
    """

    t: float
    node: str
    gpus: int
    owner: Side
    pool: str = "fleet"
    transferable: bool = False


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    """A node leaves the fleet (powered down, or gone from the cluster) with no job on
    it; its GPUs count nowhere until it is added again."""

    t: float
    node: str


@dataclass(frozen=True, slots=True)
class NodeHealthChanged:
    t: float
    node: str
    health: Health


@dataclass(frozen=True, slots=True)
class NodeTransferBegan:
    """Lending (or return) is in flight: reserved, draining, pods or slurmd starting."""

    t: float
    node: str
    to: Side


@dataclass(frozen=True, slots=True)
class NodeTransferEnded:
    t: float
    node: str
    owner: Side


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    """A gang of `members` (pods or Slurm nodes) becomes eligible to start."""

    t: float
    job: str
    team: str
    side: Side
    members: int
    gpus_per_member: int
    pool: str = "fleet"

    @property
    def gpus(self) -> int:
        return self.members * self.gpus_per_member


@dataclass(frozen=True, slots=True)
class JobStarted:
    """Some members of a gang are placed, one per entry of `nodes`.

    A gang may start in several steps (pods bound at different times); it is
    only "placed" once all its members are.
    """

    t: float
    job: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobEnded:
    """The job finished, failed or was cancelled; all its members are released."""

    t: float
    job: str


@dataclass(frozen=True, slots=True)
class JobPreempted:
    """All members are released and the job is eligible again (requeued)."""

    t: float
    job: str


Event = (
    NodeAdded
    | NodeRemoved
    | NodeHealthChanged
    | NodeTransferBegan
    | NodeTransferEnded
    | JobSubmitted
    | JobStarted
    | JobEnded
    | JobPreempted
)
