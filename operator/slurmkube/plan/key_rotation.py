"""Rotating auth/slurm's key without stopping a job (pure).

auth/slurm reads either `slurm.key` or a key set, `slurm.jwks`: keys with a
`kid`, one of them `use: default`. A daemon signs with its default key and puts
the `kid` in the token; a token without `kid` is checked against the default.
Every daemon reads its keys when it starts, and slurmctld, slurmd and sackd
start again (re-exec) on `scontrol reconfigure`; a job's slurmstepd keeps the
keys it read when the job started until the job ends.

So a rotation, asked for by a new value of the SlurmCluster's
`slurmkube.io/rotate-keys` annotation, goes:

1. `adding`: the Secret's key set becomes the old key (default) and a new one;
   once the pods hold it (the propagation window), every daemon reloads
   (`added`).
2. `switching`: the new key becomes the default; the daemons reload again and
   from then on sign with it. A cluster that had only `slurm.key` switches only
   once no job from before step 1 runs: their steps sign without a `kid`, which
   the new default would refuse.
3. `retiring`: once no job started before the switch runs (their steps sign
   with the old key), the old key leaves the set and `slurm.key` becomes the
   new key (`finishing`); after the window the daemons reload, and the old key
   authenticates nothing (`done`).

The planner sees the request, its record, the key set in the Secret and the
start times of running jobs, and says what to write and whether to reload.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

# The kid of a key that came from a plain slurm.key.
INITIAL_KID = "initial"


class Phase(enum.Enum):
    ADDING = "adding"
    ADDED = "added"
    SWITCHING = "switching"
    RETIRING = "retiring"
    FINISHING = "finishing"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """A key of the set by id; its bytes stay in the Secret (or are made by apply)."""

    kid: str
    default: bool = False


@dataclass(frozen=True, slots=True)
class Rotation:
    """A rotation's memory across passes and operator restarts (an annotation)."""

    request: str
    phase: Phase
    since: float  # when this phase's key set was written (epoch seconds)
    old_kid: str
    new_kid: str
    from_plain_key: bool = False  # the cluster had only slurm.key before
    started: float = 0.0  # when the rotation began
    switched_at: float = 0.0  # when the daemons reloaded with the new default

    def as_dict(self) -> dict[str, object]:
        return {
            "request": self.request,
            "phase": self.phase.value,
            "since": self.since,
            "oldKid": self.old_kid,
            "newKid": self.new_kid,
            "fromPlainKey": self.from_plain_key,
            "started": self.started,
            "switchedAt": self.switched_at,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> Rotation:
        return cls(
            request=str(raw["request"]),
            phase=Phase(str(raw["phase"])),
            since=float(str(raw["since"])),
            old_kid=str(raw["oldKid"]),
            new_kid=str(raw["newKid"]),
            from_plain_key=bool(raw.get("fromPlainKey", False)),
            started=float(str(raw.get("started", 0.0))),
            switched_at=float(str(raw.get("switchedAt", 0.0))),
        )


@dataclass(frozen=True, slots=True)
class KeyStep:
    """What one pass does: write `keys` (None: leave the Secret), make every daemon
    reload its keys, remember `record`, and say why it waits (`waiting`)."""

    keys: tuple[KeyEntry, ...] | None = None
    reload: bool = False
    record: Rotation | None = None
    waiting: str = ""
    requeue_after: float | None = None
    event: str = ""


def _started_before(job_starts: Iterable[float], moment: float) -> int:
    return sum(1 for t in job_starts if t <= moment)


def plan_rotation(
    requested: str,
    record: Rotation | None,
    current: tuple[KeyEntry, ...],
    job_starts: Iterable[float],
    *,
    now: float,
    window: float,
    new_kid: str,
) -> KeyStep:
    """The next step of the rotation `requested` names ("" when none was asked for).

    `current` is the Secret's key set (empty: a plain slurm.key), `job_starts` the
    start times of the jobs running now, `new_kid` the id a new key would get.
    """
    if record is None or record.phase is Phase.DONE:
        if not requested or (record is not None and record.request == requested):
            return KeyStep()
        if new_kid in {k.kid for k in current}:
            raise ValueError(f"kid {new_kid} is taken: Slurm refuses a key set with it twice")
        old = next((k.kid for k in current if k.default), current[0].kid if current else "")
        begun = Rotation(
            requested,
            Phase.ADDING,
            now,
            old_kid=old or INITIAL_KID,
            new_kid=new_kid,
            from_plain_key=not current,
            started=now,
        )
        keys = (KeyEntry(begun.old_kid, default=True), KeyEntry(new_kid))
        return KeyStep(
            keys=keys,
            record=begun,
            requeue_after=window,
            event=f"rotation {requested}: new key {new_kid} added beside {begun.old_kid}",
        )
    left = window - (now - record.since)
    if record.phase in (Phase.ADDING, Phase.SWITCHING, Phase.FINISHING) and left > 0:
        return KeyStep(requeue_after=left, waiting=f"the pods receive the keys ({left:.0f}s)")
    if record.phase is Phase.ADDING:
        return KeyStep(
            reload=True,
            record=replace(record, phase=Phase.ADDED, since=now),
            requeue_after=1.0,
            event=f"rotation {record.request}: every daemon holds {record.new_kid}",
        )
    if record.phase is Phase.ADDED:
        waits = _started_before(job_starts, record.started) if record.from_plain_key else 0
        if waits:
            return KeyStep(
                requeue_after=30.0,
                waiting=f"{waits} job(s) from before the key set still run (no kid)",
            )
        keys = (KeyEntry(record.old_kid), KeyEntry(record.new_kid, default=True))
        return KeyStep(
            keys=keys,
            record=replace(record, phase=Phase.SWITCHING, since=now),
            requeue_after=window,
            event=f"rotation {record.request}: {record.new_kid} becomes the default key",
        )
    if record.phase is Phase.SWITCHING:
        return KeyStep(
            reload=True,
            record=replace(record, phase=Phase.RETIRING, since=now, switched_at=now),
            requeue_after=1.0,
            event=f"rotation {record.request}: every daemon signs with {record.new_kid}",
        )
    if record.phase is Phase.RETIRING:
        waits = _started_before(job_starts, record.switched_at)
        if waits:
            return KeyStep(
                requeue_after=30.0,
                waiting=f"{waits} job(s) started before the switch still run (old key)",
            )
        return KeyStep(
            keys=(KeyEntry(record.new_kid, default=True),),
            record=replace(record, phase=Phase.FINISHING, since=now),
            requeue_after=window,
            event=f"rotation {record.request}: key {record.old_kid} removed",
        )
    # FINISHING: the pods hold the set without the old key; reload once more.
    return KeyStep(
        reload=True,
        record=replace(record, phase=Phase.DONE, since=now),
        event=f"rotation {record.request} done: only {record.new_kid} authenticates",
    )
