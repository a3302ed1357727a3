"""The small formulas goodput is built from, each with where it comes from."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (the smallest value with at least p% of values <= it).

    Nearest rank, not interpolation, so a reported p95 is a time some job
    actually waited. NaN for no values.
    """
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return float(ordered[rank - 1])


def jain_index(xs: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all equal, 1/n at worst.

    R. Jain, D. Chiu, W. Hawe, "A Quantitative Measure of Fairness and
    Discrimination for Resource Allocation in Shared Computer Systems",
    DEC-TR-301, 1984.
    """
    if not xs:
        return math.nan
    square_sum = sum(x * x for x in xs)
    if square_sum == 0.0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * square_sum)


def water_fill(
    capacity: float, weights: Mapping[str, float], demand: Mapping[str, float]
) -> dict[str, float]:
    """Weighted max-min fair shares of `capacity`, each capped by its demand.

    The entitlement of a team is its weight's share of the fleet, but never
    more than it asks for; what a team leaves unused goes to the others in
    proportion to their weights. This is the fair share of Kueue's fair sharing
    (cohort borrowing by weight, KEP-1714) and of KAI scheduler's "fair share"
    (deserved quota plus over-quota by weight).
    """
    shares = dict.fromkeys(weights, 0.0)
    active = {t for t, w in weights.items() if w > 0 and demand.get(t, 0.0) > 0}
    left = capacity
    while active and left > 1e-9:
        total_weight = sum(weights[t] for t in active)
        offer = {t: left * weights[t] / total_weight for t in active}
        capped = {t for t in active if demand[t] - shares[t] <= offer[t]}
        if not capped:
            for t in active:
                shares[t] += offer[t]
            break
        for t in capped:
            left -= demand[t] - shares[t]
            shares[t] = demand[t]
        active -= capped
    return shares


def size_bucket(gpus: int) -> str:
    """Gang size bucket by GPUs (issue 9: 1, 8, 64, 512+)."""
    if gpus >= 512:
        return "512+"
    if gpus >= 64:
        return "64-511"
    if gpus >= 8:
        return "8-63"
    return "1-7"


SIZE_BUCKETS = ("1-7", "8-63", "64-511", "512+")
