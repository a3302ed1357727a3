"""When a burst of fleet changes has settled enough to rebuild a cluster's config (pure).

A rack being relabelled, a node pool joining, GPU Feature Discovery starting
on 100 nodes: each is a burst of Node events, and each rebuild that lands in
the middle of one is a slurmctld reconfigure for a half-done change. A
cluster is rebuilt once its events have been quiet for `quiet` seconds
(`SlurmCluster.spec.topology.debounceSeconds`), or `MAX_WAIT_FACTOR` times
that after the first event of the burst, so a fleet that never stops
changing is still followed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MAX_WAIT_FACTOR: Final = 5.0


@dataclass(frozen=True, slots=True)
class Burst:
    """Monotonic seconds of the first and the latest event since the last rebuild."""

    first: float
    last: float


def extend(burst: Burst | None, now: float) -> Burst:
    return Burst(now, now) if burst is None else Burst(burst.first, now)


def settles_at(burst: Burst, quiet: float) -> float:
    """The monotonic instant the burst is settled, unless another event comes first."""
    return min(burst.last + quiet, burst.first + quiet * MAX_WAIT_FACTOR)


def settled(burst: Burst, now: float, quiet: float) -> bool:
    return now >= settles_at(burst, quiet)
