"""What the goodput ledger reports: frozen results, one field per metric of docs/goodput.md."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Waste:
    """Fractions of all GPU-seconds in the window (allocated + these = 1)."""

    idle_healthy: float
    drained_down: float
    reserved_unused: float
    fragmentation: float

    def as_dict(self) -> dict[str, float]:
        return {
            "idle_healthy": self.idle_healthy,
            "drained_down": self.drained_down,
            "reserved_unused": self.reserved_unused,
            "fragmentation": self.fragmentation,
        }


@dataclass(frozen=True, slots=True)
class StartTimes:
    count: int
    p50_s: float
    p95_s: float
    p99_s: float


@dataclass(frozen=True, slots=True)
class TeamShare:
    usage_share: float  # decayed GPU-seconds used / everyone's
    entitled_share: float  # decayed demand-capped fair share / everyone's
    ratio: float  # usage / entitlement; 1 is exactly fair


@dataclass(frozen=True, slots=True)
class GoodputReport:
    window_s: tuple[float, float]
    capacity_gpu_s: float
    healthy_gpu_s: float
    allocated_gpu_s: float
    occupancy: float
    waste: Waste
    time_to_start: Mapping[str, StartTimes]
    tts_p95_s_64plus: float
    gangs_finished: int
    gang_goodput_mean: float
    gang_goodput_gpu_weighted: float
    fairness: Mapping[str, TeamShare]
    jain_index: float
    occupancy_series: tuple[tuple[float, float], ...]
    # Every gang's wait, by size bucket (for CDF plots; not part of as_dict).
    waits_by_bucket: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "window_s": list(self.window_s),
            "capacity_gpu_hours": self.capacity_gpu_s / 3600.0,
            "allocated_gpu_hours": self.allocated_gpu_s / 3600.0,
            "occupancy": self.occupancy,
            "waste": self.waste.as_dict(),
            "time_to_start_s": {
                bucket: {"count": s.count, "p50": s.p50_s, "p95": s.p95_s, "p99": s.p99_s}
                for bucket, s in self.time_to_start.items()
            },
            "tts_p95_s_64plus": self.tts_p95_s_64plus,
            "gangs_finished": self.gangs_finished,
            "gang_goodput_mean": self.gang_goodput_mean,
            "gang_goodput_gpu_weighted": self.gang_goodput_gpu_weighted,
            "fairness": {
                team: {
                    "usage_share": s.usage_share,
                    "entitled_share": s.entitled_share,
                    "ratio": s.ratio,
                }
                for team, s in self.fairness.items()
            },
            "jain_index": self.jain_index,
        }
