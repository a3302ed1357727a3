"""Leader election on a Lease by client-go's rules (tools/leaderelection), as
pure decisions: no I/O, time passed in. `kube/lease.py` does the calls.

The rules, and why they make two leaders impossible while clocks run at the
same rate (their offsets may be anything, wall clocks may jump):

- A candidate never reads the remote renewTime against its own clock. It
  remembers the record it saw (holder, times, resourceVersion) and the LOCAL
  monotonic time it first saw it; it may take over only when that record has
  not changed for the lease duration (the larger of its own and the record's,
  so a holder configured longer is still respected).
- Every write carries the resourceVersion it read (optimistic concurrency): a
  takeover succeeds only if the holder wrote nothing since the candidate's read.
- The leader leads until `renew_deadline` after the START of its last
  successful renew attempt, whatever happens after: a failed, hung or slow
  call changes nothing, time alone steps it down. A candidate starts counting
  no earlier than that write reached the API server, and waits longer
  (`lease_duration` > `renew_deadline`), so the leader has stepped down first.
- A released lease (empty holder) and our own lease may be taken at once.

One deviation from client-go: a record counts as changed when its
resourceVersion changed too, not only its content, so a holder whose wall
clock stepped back to an earlier renewTime is still seen renewing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# client-go's JitterFactor: a renew deadline must leave room for retries.
JITTER_FACTOR = 1.2


@dataclass(frozen=True, slots=True)
class Timing:
    """Seconds. client-go's defaults are 15/10/2; ours take over within ~12 s."""

    lease_duration: float = 10.0
    renew_deadline: float = 7.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        for name in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"leader election {name}: must be a positive number, got {value!r}"
                )
        if self.renew_deadline >= self.lease_duration:
            raise ValueError(
                f"leader election renew_deadline ({self.renew_deadline}) must be below "
                f"lease_duration ({self.lease_duration})"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"leader election renew_deadline ({self.renew_deadline}) must exceed "
                f"{JITTER_FACTOR} x retry_period ({self.retry_period})"
            )

    @property
    def request_timeout(self) -> float:
        """Per API call: a read and a write fit in one renew deadline with room to retry."""
        return min(self.retry_period, self.renew_deadline / 3)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease's spec. Times are wall-clock seconds, written for people and
    other tools; no decision here reads them."""

    holder: str  # "" when released
    duration_seconds: int
    acquire_time: float
    renew_time: float
    transitions: int


@dataclass(frozen=True, slots=True)
class Observed:
    record: LeaseRecord
    version: str  # resourceVersion
    at: float  # local monotonic time it was first seen


@dataclass(frozen=True, slots=True)
class Create:
    record: LeaseRecord


@dataclass(frozen=True, slots=True)
class Update:
    record: LeaseRecord
    version: str  # the resourceVersion read: the write fails if anyone wrote since


@dataclass(frozen=True, slots=True)
class Wait:
    holder: str
    seconds: float  # until the holder's lease expires by our clock, if it stays unchanged


Decision = Create | Update | Wait


@dataclass(frozen=True, slots=True)
class Elector:
    identity: str
    timing: Timing = Timing()
    observed: Observed | None = None
    # Local start of our last renew attempt whose write succeeded; None: not leading.
    renewed_at: float | None = None

    def leading(self, now: float) -> bool:
        return (
            self.renewed_at is not None
            and self.observed is not None
            and self.observed.record.holder == self.identity
            and self.renewed_at <= now < self.renewed_at + self.timing.renew_deadline
        )

    def _record(self, wall: float, previous: LeaseRecord | None) -> LeaseRecord:
        mine = previous is not None and previous.holder == self.identity
        transitions = 0 if previous is None else previous.transitions + (not mine)
        return LeaseRecord(
            holder=self.identity,
            duration_seconds=math.ceil(self.timing.lease_duration),
            acquire_time=previous.acquire_time if previous is not None and mine else wall,
            renew_time=wall,
            transitions=transitions,
        )


def on_read(
    elector: Elector, found: tuple[LeaseRecord, str] | None, now: float, wall: float
) -> tuple[Elector, Decision]:
    """What to do after reading the Lease (None: it does not exist)."""
    if found is None:
        return replace(elector, observed=None), Create(elector._record(wall, None))
    record, version = found
    seen = elector.observed
    if seen is None or (seen.record, seen.version) != (record, version):
        seen = Observed(record, version, now)
    elector = replace(elector, observed=seen)
    if record.holder and record.holder != elector.identity:
        duration = max(elector.timing.lease_duration, float(record.duration_seconds))
        left = seen.at + duration - now
        if left > 0:
            return elector, Wait(record.holder, left)
    return elector, Update(elector._record(wall, record), version)


def on_written(
    elector: Elector, record: LeaseRecord, version: str, started: float, now: float
) -> Elector:
    """Our write succeeded: `started` is when this attempt began (its read was sent)."""
    ours = record.holder == elector.identity
    return replace(
        elector,
        observed=Observed(record, version, now),
        renewed_at=started if ours else None,
    )


def release(elector: Elector, wall: float) -> tuple[Elector, Update | None]:
    """Step down at once, then the write that lets a candidate take over without
    waiting (client-go's ReleaseOnCancel); None when there is nothing to release."""
    seen = elector.observed
    stepped = replace(elector, renewed_at=None)
    if seen is None or seen.record.holder != elector.identity:
        return stepped, None
    record = LeaseRecord("", 1, wall, wall, seen.record.transitions)
    return stepped, Update(record, seen.version)
