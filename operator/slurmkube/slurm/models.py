"""Typed views of Slurm nodes, jobs and reservations, independent of backend.

Both backends (slurmrestd and `scontrol --json`) produce these from the same
data_parser JSON; callers never see which one answered. States are kept as
Slurm spells them (`IDLE`, `MIXED`, `DRAIN`, `CLOUD`, ...), see the NODE STATE
CODES section of sinfo(1) and JOB STATE CODES of squeue(1).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from slurmkube.api.well_known import is_ours

__all__ = [
    "ControllerPing",
    "Job",
    "JobSubmission",
    "Node",
    "NodeStateChange",
    "Reservation",
    "ReservationFlag",
    "ReservationRequest",
    "ReservationUpdate",
]


@dataclass(frozen=True, slots=True)
class ControllerPing:
    """One slurmctld (primary or backup) as `scontrol ping` reports it."""

    hostname: str
    responding: bool
    mode: str  # "primary", "backup1", ...
    latency_us: int = 0


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    # Base state first (IDLE, ALLOCATED, MIXED, DOWN, ...), then flags (DRAIN, CLOUD, ...).
    state: frozenset[str]
    base_state: str
    reason: str = ""
    reason_set_by: str = ""
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    gres: str = ""
    gpus: int = 0
    gpu_type: str = ""  # of `gres` ("" untyped): gpus and gpu_type are its GRES
    gpus_allocated: int = 0
    cpus: int = 0
    cpus_allocated: int = 0
    memory_mib: int = 0
    memory_allocated_mib: int = 0
    reservation: str = ""
    address: str = ""
    # When a job last ran there (epoch seconds; 0: unknown): power saving counts
    # SuspendTime from it.
    last_busy: int = 0
    # When `reason` was last set (epoch seconds; 0: unknown or none): when a drain or a
    # DOWN began.
    reason_changed_at: int = 0
    # The `Topology=` slurmctld holds for it over the files (26.05: a live move,
    # render/live_topology.py); "" when the files place it.
    topology: str = ""

    @property
    def drain(self) -> bool:
        """Drain requested (DRAIN flag), whether or not jobs are still running."""
        return "DRAIN" in self.state

    @property
    def busy(self) -> bool:
        """A job runs or is being cleaned up there (ALLOCATED, MIXED or COMPLETING)."""
        return bool(self.state & {"ALLOCATED", "MIXED", "COMPLETING"})

    @property
    def responding(self) -> bool:
        """slurmd answers: not DOWN, NOT_RESPONDING, or a CLOUD node never registered
        (POWERED_DOWN, sinfo's "idle~")."""
        return not ({"DOWN", "NOT_RESPONDING", "POWERED_DOWN"} & self.state)

    @property
    def planned(self) -> bool:
        """Slurm's backfill holds it idle for a pending job (the PLANNED flag)."""
        return "PLANNED" in self.state

    @property
    def drained_by_us(self) -> bool:
        return self.drain and is_ours(self.reason)

    @property
    def drained(self) -> bool:
        """Drain requested and nothing left running: sinfo's `drained`."""
        return self.drain and not self.busy

    @property
    def draining(self) -> bool:
        return self.drain and not self.drained


@dataclass(frozen=True, slots=True)
class NodeList:
    nodes: tuple[Node, ...]
    # When slurmctld made the list (its `last_update`, epoch seconds; 0: not given).
    update_time: int


@dataclass(frozen=True, slots=True)
class Job:
    job_id: int
    name: str
    user: str
    # Base state first (PENDING, RUNNING, ...), then flags (COMPLETING, CONFIGURING, ...).
    state: frozenset[str]
    partition: str
    priority: int
    node_count: int
    nodes: tuple[str, ...] = ()
    reason: str = ""
    reservation: str = ""
    features: str = ""
    # GPUs as requested (tres_per_node / tres_per_job / tres_per_task).
    gpus_per_node: int = 0
    gpus_per_job: int = 0
    gpus_per_task: int = 0
    tasks: int = 0
    # GPUs actually bound on the allocated nodes (gres_detail); 0 while pending.
    gpus_allocated: int = 0
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None  # of a finished job; while running, its time limit's
    time_limit: timedelta | None = None  # None: no limit
    # `scontrol requeue` takes only batch jobs that allow it (sbatch --requeue, or
    # slurm.conf JobRequeue=1, the default); unknown reads as not requeueable.
    # The Slurm account the job is charged to (the allocation policy's team).
    account: str = ""
    batch: bool = False
    requeue: bool = False
    restarts: int = 0  # restart_cnt: times Slurm requeued it
    admin_comment: str = ""  # set by an operator (slurmkube: the policy's hold)

    @property
    def requeueable(self) -> bool:
        """`scontrol requeue` would accept it (src/slurmctld/job_mgr.c `_job_requeue_op`)."""
        return self.batch and self.requeue

    @property
    def pending(self) -> bool:
        return "PENDING" in self.state

    @property
    def running(self) -> bool:
        return "RUNNING" in self.state

    @property
    def gpus_requested(self) -> int:
        """Total GPUs the job asks for, however it spelled the request."""
        if self.gpus_per_job:
            return self.gpus_per_job
        if self.gpus_per_node:
            return self.gpus_per_node * self.node_count
        return self.gpus_per_task * self.tasks


@dataclass(frozen=True, slots=True)
class JobList:
    jobs: tuple[Job, ...]
    # When slurmctld made the list (its `last_update`, epoch seconds; 0: not given).
    update_time: int


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    nodes: tuple[str, ...]
    start: datetime | None
    end: datetime | None
    flags: frozenset[str] = frozenset()
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partition: str = ""
    node_count: int = 0

    @property
    def duration(self) -> timedelta | None:
        if self.start is None or self.end is None:
            return None
        return self.end - self.start


class NodeStateChange(enum.StrEnum):
    """States a node may be set to with `scontrol update NodeName=... State=`
    (scontrol(1), "SPECIFICATIONS FOR UPDATE COMMAND, NODES")."""

    DOWN = "DOWN"
    DRAIN = "DRAIN"
    FAIL = "FAIL"
    RESUME = "RESUME"
    UNDRAIN = "UNDRAIN"
    POWER_DOWN = "POWER_DOWN"
    POWER_DOWN_ASAP = "POWER_DOWN_ASAP"
    POWER_DOWN_FORCE = "POWER_DOWN_FORCE"
    POWER_UP = "POWER_UP"

    @property
    def needs_reason(self) -> bool:
        # scontrol refuses DOWN/DRAIN/FAIL without Reason=; slurmrestd does not,
        # but a reasonless drain is unreadable for whoever finds it later.
        return self in (NodeStateChange.DOWN, NodeStateChange.DRAIN, NodeStateChange.FAIL)


class ReservationFlag(enum.StrEnum):
    """Reservation flags accepted on create (scontrol(1), "RESERVATIONS", Flags=)."""

    ANY_NODES = "ANY_NODES"
    DAILY = "DAILY"
    FLEX = "FLEX"
    HOURLY = "HOURLY"
    IGNORE_JOBS = "IGNORE_JOBS"
    MAGNETIC = "MAGNETIC"
    MAINT = "MAINT"
    NO_HOLD_JOBS_AFTER = "NO_HOLD_JOBS_AFTER"
    OVERLAP = "OVERLAP"
    PART_NODES = "PART_NODES"
    PURGE_COMP = "PURGE_COMP"
    REPLACE = "REPLACE"
    REPLACE_DOWN = "REPLACE_DOWN"
    STATIC_ALLOC = "STATIC_ALLOC"
    TIME_FLOAT = "TIME_FLOAT"
    USER_DELETE = "USER_DELETE"
    WEEKDAY = "WEEKDAY"
    WEEKEND = "WEEKEND"
    WEEKLY = "WEEKLY"


@dataclass(frozen=True, slots=True)
class ReservationRequest:
    """A reservation to create on exactly `nodes`.

    `start=None` means now; `duration=None` means UNLIMITED (Slurm stores a
    year). Slurm requires at least one of `users` or `accounts`.
    """

    name: str
    nodes: tuple[str, ...]
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    start: datetime | None = None
    duration: timedelta | None = None
    flags: frozenset[ReservationFlag] = field(default_factory=frozenset)
    partition: str | None = None


@dataclass(frozen=True, slots=True)
class ReservationUpdate:
    """Fields to change on an existing reservation; `None` leaves a field alone."""

    name: str
    nodes: tuple[str, ...] | None = None
    users: tuple[str, ...] | None = None
    accounts: tuple[str, ...] | None = None
    start: datetime | None = None
    duration: timedelta | None = None


@dataclass(frozen=True, slots=True)
class JobSubmission:
    """A batch job pinned to one node inside a reservation (sbatch(1) --nodelist,
    --reservation): what the health controller's active check submits."""

    name: str
    node: str
    reservation: str
    script: str
    time_limit_minutes: int = 5
    gpus: int = 0  # --gres=gpu:N on the node; 0: none asked
    partitions: tuple[str, ...] = ()  # empty: the cluster's default partition
