"""The goodput ledger as a live exporter reads it: totals so far, GPUs by state now,
the teams' shares now, teams learnt as they appear, and ended jobs forgotten.

A live window has no end, but the ledger's decay is anchored at its window's
end: the window is closed `LIVE_WINDOW_S` (ten years) after the exporter
starts. Shares are ratios of decayed sums, so where the anchor lies does not
change them, and 2**(-521) (ten years in half-weeks) is still far from
float underflow.
"""

from __future__ import annotations

from slurmkube.goodput.ledger import DEFAULT_HALF_LIFE_S, GoodputLedger
from slurmkube.goodput.report import TeamShare

LIVE_WINDOW_S = 10 * 365 * 24 * 3600.0

# The exporter's names for the ledger's GPU-second sums (docs/goodput.md, "Waste").
STATES = {
    "allocated": "allocated",
    "idle": "idle",
    "frag": "fragmentation",
    "reserved": "reserved_in_transfer",
    "down": "drained_down",
}


class LiveLedger(GoodputLedger):
    def __init__(self, start: float, *, half_life_s: float = DEFAULT_HALF_LIFE_S) -> None:
        super().__init__((start, start + LIVE_WINDOW_S), {}, half_life_s=half_life_s)

    @property
    def now(self) -> float:
        return self._now

    def gpu_seconds(self) -> dict[str, float]:
        """GPU-seconds since the exporter started, by state (monotonic: Prometheus counters)."""
        return {STATES[key]: value for key, value in self._sums.items()}

    def gpus_now(self) -> dict[str, int]:
        """GPUs by state at the last event or advance."""
        now = {
            "allocated": self._allocated,
            "idle": self._idle_free,
            "frag": self._frag_free,
            "reserved": self._reserved_free,
            "down": self._unhealthy_free,
        }
        return {STATES[key]: count for key, count in now.items()}

    def occupancy_now(self) -> float:
        """Allocated over healthy GPUs now (0 with no healthy GPU)."""
        gpus = self.gpus_now()
        healthy = sum(gpus.values()) - gpus["drained_down"]
        return gpus["allocated"] / healthy if healthy else 0.0

    def weigh(self, team: str, weight: float) -> None:
        """A team's entitlement weight from now on (a new team is learnt)."""
        if self._shares.weights.get(team) != weight:
            self._shares.weigh(team, weight)
            self._entitlement_stale = True

    def shares_now(self) -> dict[str, TeamShare]:
        return self._shares.shares(self._now)

    def forget_ended(self) -> int:
        """Drop ended jobs (they count in the sums already); how many. `report()`
        then covers only the jobs kept."""
        ended = [job for job, state in self._jobs.items() if state.ended is not None]
        for job in ended:
            del self._jobs[job]
        return len(ended)
