"""Each team's decayed GPU usage against its decayed, demand-capped entitlement.

Usage and entitlement are integrated with the same exponential decay (the
weight is 1 at the window's end and halves every half-life before it, as
Slurm's `PriorityDecayHalfLife`), folded in lazily: a team's sum is brought up
to date only when its allocation changes, so a stream of events costs what
changed, not the number of teams.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from slurmkube.goodput.formulas import water_fill
from slurmkube.goodput.report import TeamShare

_LN2 = math.log(2.0)


class DecayedShares:
    def __init__(
        self, window: tuple[float, float], weights: Mapping[str, float], half_life_s: float
    ) -> None:
        self._start, self._end = window
        self.weights = dict(weights)
        self._half_life = half_life_s
        self._alloc: dict[str, int] = dict.fromkeys(self.weights, 0)
        # Cumulative decay weight now, and when each team's allocation last changed.
        self._now_weight = self.decay_weight(self._start)
        self._since: dict[str, float] = dict.fromkeys(self.weights, self._now_weight)
        self.demand: dict[str, int] = dict.fromkeys(self.weights, 0)
        self._usage: dict[str, float] = dict.fromkeys(self.weights, 0.0)
        self._entitled: dict[str, float] = dict.fromkeys(self.weights, 0.0)
        self._entitled_since = self._start
        self._entitled_decayed: dict[str, float] = dict.fromkeys(self.weights, 0.0)

    def weigh(self, team: str, weight: float) -> None:
        """A team's weight from now on; a new team starts with no usage and no demand
        (the live exporter learns teams as it sees them)."""
        if team not in self.weights:
            for sums in (self._usage, self._entitled, self._entitled_decayed):
                sums[team] = 0.0
            self._alloc[team] = self.demand[team] = 0
            self._since[team] = self._now_weight
        self.weights[team] = weight

    def decay_weight(self, t: float) -> float:
        # Integral of 2**((x - end)/H) from -inf to t (clamped to the window).
        t = min(max(t, self._start), self._end)
        h = self._half_life
        return float(h / _LN2 * 2.0 ** ((t - self._end) / h))

    def advance(self, t: float) -> None:
        self._now_weight = self.decay_weight(t)

    def use(self, team: str, delta: int) -> None:
        """The team's allocated GPUs change by `delta` now."""
        if team not in self._alloc:
            return
        self._fold_usage(team)
        self._alloc[team] += delta

    def ask(self, team: str, delta: int) -> bool:
        """The team's queued demand changes by `delta`; whether it is a known team."""
        if team not in self.demand:
            return False
        self.demand[team] += delta
        return True

    def _fold_usage(self, team: str) -> None:
        weight = self._now_weight - self._since[team]
        if weight:
            self._usage[team] += self._alloc[team] * weight
            self._since[team] = self._now_weight

    def _fold_entitlement(self, t: float) -> None:
        weight = self.decay_weight(t) - self.decay_weight(self._entitled_since)
        if weight:
            for team, owed in self._entitled.items():
                self._entitled_decayed[team] += owed * weight
        self._entitled_since = t

    def entitle(self, now: float, healthy_gpus: float) -> None:
        """Re-share the healthy GPUs by weight, capped by each team's demand, from now."""
        if not self.weights:
            return
        self._fold_entitlement(now)
        demand = {t: float(d) for t, d in self.demand.items()}
        self._entitled = water_fill(healthy_gpus, self.weights, demand)

    def shares(self, now: float) -> dict[str, TeamShare]:
        for team in self.weights:
            self._fold_usage(team)
        self._fold_entitlement(now)
        usage_total = sum(self._usage.values())
        entitled_total = sum(self._entitled_decayed.values())
        out: dict[str, TeamShare] = {}
        for team in sorted(self.weights):
            used = self._usage[team] / usage_total if usage_total else 0.0
            owed = self._entitled_decayed[team] / entitled_total if entitled_total else 0.0
            if owed > 0:
                out[team] = TeamShare(used, owed, used / owed)
        return out
