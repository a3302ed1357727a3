"""Each gang's life in the ledger, and what the report says of gangs: time to
start and gang goodput (docs/goodput.md, "Time to start", "Gang goodput").

The ledger keeps one `GangState` per job as events stream through; only the
jobs submitted inside the window count, however long they ran.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurmkube.goodput.events import JobSubmitted
from slurmkube.goodput.formulas import SIZE_BUCKETS, percentile, size_bucket
from slurmkube.goodput.report import StartTimes


@dataclass(slots=True)
class GangState:
    submitted: JobSubmitted
    queue: int  # pool * 2 + side
    placed: list[str] = field(default_factory=list)
    eligible: bool = True
    whole_since: float | None = None
    whole_s: float = 0.0
    first_whole: float | None = None
    ended: float | None = None


@dataclass(frozen=True, slots=True)
class GangStats:
    """The gang metrics of `GoodputReport`, over the gangs submitted in the window."""

    time_to_start: Mapping[str, StartTimes]
    tts_p95_s_64plus: float
    finished: int
    goodput_mean: float
    goodput_gpu_weighted: float
    waits_by_bucket: Mapping[str, tuple[float, ...]]


def gang_stats(gangs: Iterable[GangState], start: float, end: float) -> GangStats:
    waits: dict[str, list[float]] = {b: [] for b in SIZE_BUCKETS}
    waits_64plus: list[float] = []
    goodputs: list[tuple[float, int]] = []
    for job in gangs:
        sub = job.submitted
        if not start <= sub.t <= end:
            continue
        if job.first_whole is not None:
            wait = job.first_whole - sub.t
            waits[size_bucket(sub.gpus)].append(wait)
            if sub.gpus >= 64:
                waits_64plus.append(wait)
        if job.ended is not None and job.ended > sub.t:
            goodputs.append((job.whole_s / (job.ended - sub.t), sub.gpus))
    gpu_weight = sum(g for _, g in goodputs)
    return GangStats(
        time_to_start={
            b: StartTimes(len(w), percentile(w, 50), percentile(w, 95), percentile(w, 99))
            for b, w in waits.items()
        },
        tts_p95_s_64plus=percentile(waits_64plus, 95),
        finished=len(goodputs),
        goodput_mean=(sum(g for g, _ in goodputs) / len(goodputs)) if goodputs else math.nan,
        goodput_gpu_weighted=(
            sum(g * w for g, w in goodputs) / gpu_weight if gpu_weight else math.nan
        ),
        waits_by_bucket={b: tuple(sorted(w)) for b, w in waits.items()},
    )
