"""How the fleet is shared: the three policies issue 9 compares.

- `StaticSplit`: whole NVLink blocks belong to Kubernetes, the rest to Slurm,
  for the whole run (what sites do today). Swept to find the best ratio.
- `Sharing`: slurmkube. Every node starts as Slurm's. A Kubernetes workload
  that does not fit on Kubernetes-owned nodes gets a node lent by the bridge,
  after the reservation's drain and the pod's start; an empty Kubernetes node
  goes back to Slurm when Slurm needs it (power-saving resume of a slurmd
  pod). Kueue's quota caps how much is lent. Which node, and whether Slurm can
  spare one, is `slurmkube.lending.sharing` (`lending`); with
  `lending=None`, the earlier policy: any node `slurmkube.placement` finds
  (free first, idle Slurm nodes next, busy ones with `WaitForIdle`).
- `UpperBound`: one ideal pool of GPUs, no nodes, no topology, no delays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmkube.lending.sharing import SharingPolicy


@dataclass(frozen=True, slots=True)
class StaticSplit:
    kubernetes_blocks: int

    @property
    def label(self) -> str:
        return f"static-{self.kubernetes_blocks}"


@dataclass(frozen=True, slots=True)
class Sharing:
    # Reservation created, node idle, slurmd pod drained and removed, lease label set.
    drain_s: float = 60.0
    # Kubernetes pod scheduled on the lent node until running (image cached).
    pod_start_s: float = 30.0
    # slurmd pod started again on an empty Kubernetes node (Slurm ResumeTimeout side).
    slurmd_start_s: float = 90.0
    # Kueue quota for the lending flavor: at most this share of nodes lent at once.
    max_lent_share: float = 0.6
    # Busy Slurm nodes may be reserved and lent once their job ends (WaitForIdle).
    wait_for_idle: bool = True
    # Whether and where to lend, and when lent nodes go back (None: any node placement finds).
    lending: SharingPolicy | None = field(default_factory=SharingPolicy)
    # Kubernetes' entitlement as a share of the nodes (None: its teams' weights).
    kubernetes_share: float | None = None

    @property
    def label(self) -> str:
        return f"sharing-drain{self.drain_s:g}s"


@dataclass(frozen=True, slots=True)
class UpperBound:
    @property
    def label(self) -> str:
        return "upper-bound"


Policy = StaticSplit | Sharing | UpperBound
