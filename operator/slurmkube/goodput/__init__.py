"""Goodput: how much of the fleet did useful work, what was wasted and why, who got
their fair share, and how long gangs waited (issue 9). Pure: events in, report out.

Definitions and sources: docs/goodput.md.
"""

from slurmkube.goodput.events import (
    Event,
    Health,
    JobEnded,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeAdded,
    NodeHealthChanged,
    NodeRemoved,
    NodeTransferBegan,
    NodeTransferEnded,
    Side,
)
from slurmkube.goodput.formulas import SIZE_BUCKETS, jain_index, percentile, size_bucket, water_fill
from slurmkube.goodput.ledger import DEFAULT_HALF_LIFE_S, GoodputLedger
from slurmkube.goodput.report import GoodputReport, StartTimes, TeamShare, Waste

__all__ = [
    "DEFAULT_HALF_LIFE_S",
    "SIZE_BUCKETS",
    "Event",
    "GoodputLedger",
    "GoodputReport",
    "Health",
    "JobEnded",
    "JobPreempted",
    "JobStarted",
    "JobSubmitted",
    "NodeAdded",
    "NodeHealthChanged",
    "NodeRemoved",
    "NodeTransferBegan",
    "NodeTransferEnded",
    "Side",
    "StartTimes",
    "TeamShare",
    "Waste",
    "jain_index",
    "percentile",
    "size_bucket",
    "water_fill",
]
