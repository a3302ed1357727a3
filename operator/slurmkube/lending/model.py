"""What the lending planner sees and what it decides: frozen values, no I/O.

The controller builds a `LendingWorld` from Kubernetes (Workloads, Nodes, the
SlurmReservationChecks) and Slurm (node states, reservations); `plan_lending`
turns it into a `LendingPlan`. Kueue's terms follow kueue.x-k8s.io/v1beta2
(`Workload.status.admissionChecks[]`, `AdmissionCheckState`, `PodSetUpdate`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.lending.sharing import SharingPolicy


class CheckState(enum.StrEnum):
    """Kueue's AdmissionCheckState.state values."""

    PENDING = "Pending"
    READY = "Ready"
    RETRY = "Retry"
    REJECTED = "Rejected"


class SlurmState(enum.Enum):
    """A lendable node as Slurm sees it, folded to what lending needs."""

    ABSENT = "absent"  # no slurmd pod and Slurm does not run it (CLOUD/powered down, unknown)
    IDLE = "idle"  # slurmd runs, no job
    BUSY = "busy"  # a job runs or completes there
    DOWN = "down"  # down, not responding, or drained by someone else: never lent
    STARTING = "starting"  # a slurmd pod exists but Slurm does not answer for it yet


def reservation_name(uid: str) -> str:
    """The Slurm reservation of a workload: derived from its UID, so a restarted
    operator finds it again and two workloads never share one."""
    return f"{wk.RESERVATION_PREFIX}{uid}"


def uid_of_reservation(name: str) -> str | None:
    if not name.startswith(wk.RESERVATION_PREFIX):
        return None
    return name.removeprefix(wk.RESERVATION_PREFIX)


@dataclass(frozen=True, slots=True)
class RequeuePolicy:
    """busyNodes.policy Requeue: running jobs below `below_priority` are requeued once
    `grace_seconds` have passed since the reservation; the others are waited for."""

    below_priority: int
    grace_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class LendingPolicy:
    """One AdmissionCheck and its SlurmReservationCheck parameters."""

    check: str
    node_sets: frozenset[str] = frozenset()  # empty: every NodeSet of the cluster
    wait_timeout_seconds: float = 3600.0
    requeue: RequeuePolicy | None = None  # None: WaitForIdle
    max_nodes: int | None = None
    flags: tuple[str, ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    retry_after_seconds: int = 30
    # Nodes lent whatever Slurm's queue waits for, as a static split would give them.
    entitled_nodes: int = 0
    # Whether Slurm can spare idle nodes, and which go first (`lending.sharing`).
    sharing: SharingPolicy = field(default_factory=SharingPolicy)

    def lends_from(self, node_set: str) -> bool:
        return not self.node_sets or node_set in self.node_sets


@dataclass(frozen=True, slots=True)
class PodSetView:
    name: str
    count: int
    gpus_per_pod: int
    single_block: bool = False  # every pod in one NVLink block


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """A Kueue Workload that carries one of our admission checks."""

    namespace: str
    name: str
    uid: str
    check: str  # the name of our AdmissionCheck in its status
    check_state: CheckState
    check_message: str = ""
    pod_sets: tuple[PodSetView, ...] = ()
    quota_reserved: bool = False
    finished: bool = False
    evicted: bool = False
    active: bool = True
    deleting: bool = False

    @property
    def holds_nodes(self) -> bool:
        """May keep (or get) lent nodes: quota reserved, running or about to, and our
        check not already answered Retry/Rejected (Kueue then releases the quota)."""
        return (
            self.quota_reserved
            and self.active
            and not (self.finished or self.evicted or self.deleting)
            and self.check_state in (CheckState.PENDING, CheckState.READY)
        )


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A Slurm job running (or suspended) on a node, as Requeue judges it."""

    job_id: int
    priority: int
    requeueable: bool  # a batch job that allows requeue (Slurm refuses the others)


@dataclass(frozen=True, slots=True)
class Sickness:
    """Why node health took a node out, as its Slurm reason and taint tell it."""

    cause: str  # e.g. "fatal condition SysLogsXIDError True"
    fatal: bool  # the rule said its jobs cannot go on


def sickness_of(*, drain: bool, reason: str, tainted: bool) -> Sickness | None:
    """A node health has taken out: drained with a `slurmkube:health:` reason, or
    carrying health's taint (`slurmkube.io/unhealthy`); None when it has not."""
    if drain and wk.is_health_drain(reason):
        cause = reason.removeprefix(wk.HEALTH_REASON_PREFIX).strip()
        return Sickness(cause, fatal=wk.is_fatal_health_drain(reason))
    if tainted:
        return Sickness(f"tainted {wk.TAINT_UNHEALTHY}", fatal=False)
    return None


@dataclass(frozen=True, slots=True)
class NodeView:
    """A Kubernetes node of a NodeSet of the cluster."""

    name: str
    node_set: str
    block: str  # NVLink domain; a node without one is its own block
    gpus: int
    slurm: SlurmState
    lease: str = ""  # value of the slurmkube.io/lease label
    has_slurmd_pod: bool = False
    cordoned: bool = False
    slurm_reservation: str = ""  # a Slurm reservation holding the node (anyone's)
    busy_until: float = 0.0  # when its last job's time limit ends (0: unknown or none)
    planned: bool = False  # Slurm's backfill holds it idle for a pending job (PLANNED)
    jobs: tuple[RunningJob, ...] = ()  # its running Slurm jobs, by job id
    sickness: Sickness | None = None  # node health took it out (`sickness_of`)
    # Its NVLink domain is escalated by node health (status.health.domains): gangs of
    # `LendingWorld.escalation_gang_nodes` nodes or more are kept off it.
    escalated: bool = False


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A pending Slurm job that may start on the lendable nodes, as the sharing
    policy protects it: Slurm's queue order is priority, then job id."""

    job_id: int
    nodes: int
    priority: int


@dataclass(frozen=True, slots=True)
class ReservationView:
    """One of our Slurm reservations (name starts with RESERVATION_PREFIX)."""

    name: str
    nodes: tuple[str, ...]
    start: float  # seconds since the epoch, as Slurm recorded StartTime


@dataclass(frozen=True, slots=True)
class LendingWorld:
    checks: tuple[LendingPolicy, ...]
    workloads: tuple[WorkloadView, ...]
    nodes: tuple[NodeView, ...]
    reservations: tuple[ReservationView, ...]
    slurm_reachable: bool
    now: float
    # Workloads of checks on other clusters that hold nodes; their leases are never ours
    # to collect.
    live_elsewhere: frozenset[str] = frozenset()
    escalation_gang_nodes: int = 2
    # Slurm's pending jobs, queue head first (`PendingJob`); the sharing policy lends
    # no idle node the first of them can use soon.
    slurm_queue: tuple[PendingJob, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckUpdate:
    """Our entry of a Workload's status.admissionChecks."""

    namespace: str
    workload: str
    check: str
    state: CheckState
    message: str
    pod_set_updates: tuple[Mapping[str, Any], ...] = ()
    requeue_after_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class NewReservation:
    name: str
    nodes: tuple[str, ...]
    flags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobRequeue:
    """A running Slurm job to requeue (`scontrol requeue`) to free reserved nodes:
    PENDING again, and the reservation keeps it off those nodes."""

    job_id: int
    priority: int
    below_priority: int
    nodes: tuple[str, ...]  # the reserved nodes it frees

    @property
    def reason(self) -> str:
        return (
            f"requeued job {self.job_id} (priority {self.priority} < {self.below_priority}) "
            f"on node {', '.join(self.nodes)}"
        )


@dataclass(frozen=True, slots=True)
class Lend:
    """Steps for one workload, in order; a failed step stops the ones after it."""

    uid: str
    create: NewReservation | None = None
    requeue: tuple[JobRequeue, ...] = ()  # Slurm jobs to requeue (busyNodes Requeue)
    label: tuple[str, ...] = ()  # nodes to label slurmkube.io/lease=<uid>
    check: CheckUpdate | None = None
    placed: str = ""  # the placement's explanation, when nodes were chosen now
    waiting: bool = False  # the nodes still run Slurm jobs (either busyNodes policy)
    sick: str = ""  # what the workload is told about its lent nodes that turned sick


@dataclass(frozen=True, slots=True)
class Release:
    """Undo a lease: unlabel first (the NodeSet brings slurmd back), then the reservation."""

    uid: str
    unlabel: tuple[str, ...] = ()
    delete_reservation: str | None = None
    orphan: bool = False  # no Workload at all: a leak found by garbage collection
    check: CheckUpdate | None = None


@dataclass(frozen=True, slots=True)
class LendingPlan:
    lends: tuple[Lend, ...] = ()
    releases: tuple[Release, ...] = ()
    lent_nodes: int = 0  # nodes under a lease after this plan
    waiting: tuple[str, ...] = field(default=())  # uids waiting for Slurm jobs to end


def fold_slurm_state(
    *,
    has_slurmd_pod: bool,
    known: bool,
    busy: bool,
    responding: bool,
    drain: bool,
    drained_by_us: bool,
    health_drain: bool = False,
) -> SlurmState:
    """One node's Slurm state, as lending needs it.

    A node running a job is BUSY whatever else is true: it is never lent before
    the job ends. Without a slurmd pod, Slurm runs nothing there and the node is
    Kubernetes' (ABSENT) unless an admin drained it. With a pod, an admin's
    drain or a down node is DOWN; our own drain (the pod is leaving) is IDLE,
    except a health drain (`slurmkube:health:`): a sick node is never lent.
    """
    if busy:
        return SlurmState.BUSY
    if drain and (not drained_by_us or health_drain):
        return SlurmState.DOWN
    if not has_slurmd_pod:
        return SlurmState.ABSENT
    if not known or not responding:
        return SlurmState.STARTING
    return SlurmState.IDLE
