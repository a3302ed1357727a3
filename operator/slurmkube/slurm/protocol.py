"""The one interface controllers use to talk to Slurm.

Synchronous on purpose: kopf handlers call it through `asyncio.to_thread`, and
both backends (httpx.Client, subprocess) are blocking. Every method either
returns typed models (`slurmkube.slurm.models`) or raises a `SlurmError`
subclass (`slurmkube.slurm.errors`); invalid arguments raise
`slurmkube.api.grammar.InvalidValue` before anything is sent. The adapter
decides nothing: which node to drain, when to lend, is the caller's business.

Backends: `RestClient` (slurmrestd, the one pods use) and `CliClient`
(scontrol); `drain` / `resume_if_ours` in `slurmkube.slurm.drain` work on either.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, runtime_checkable

from slurmkube.slurm.models import (
    ControllerPing,
    Job,
    Node,
    NodeStateChange,
    Reservation,
    ReservationRequest,
    ReservationUpdate,
)

__all__ = ["ACTIVE_JOB_STATES", "ReservationWriter", "SlurmClient"]

ACTIVE_JOB_STATES: frozenset[str] = frozenset({"PENDING", "RUNNING"})


@runtime_checkable
class SlurmClient(Protocol):
    def ping(self) -> tuple[ControllerPing, ...]:
        """Controllers and whether they answer; raises SlurmUnreachable when none does."""
        ...

    # --- nodes ---
    def list_nodes(self) -> tuple[Node, ...]: ...

    def get_node(self, name: str) -> Node:
        """Raises SlurmNotFound for a node slurmctld does not know."""
        ...

    def update_node_state(
        self, name: str, state: NodeStateChange, reason: str | None = None
    ) -> None:
        """Set a state as given: no prefix is added, no check of who set the
        current reason. DRAIN/DOWN/FAIL need a reason. Prefer `drain.drain`."""
        ...

    def set_node_features(
        self, name: str, available: Sequence[str], active: Sequence[str] | None = None
    ) -> None:
        """Set AvailableFeatures; ActiveFeatures become `active`, or the same
        list when `active` is None (nodes without a node_features plugin)."""
        ...

    def move_nodes(self, nodes: Sequence[str], units: Sequence[tuple[str, str]]) -> None:
        """Put `nodes` into existing units (`(topology, block or leaf switch)`) of
        topology.yaml's named topologies, without a reconfigure (26.05:
        render/live_topology.py). Slurm refuses a unit it does not hold."""
        ...

    # --- jobs ---
    def list_jobs(self, states: Collection[str] = ACTIVE_JOB_STATES) -> tuple[Job, ...]:
        """Jobs whose state includes one of `states` (default: pending and running)."""
        ...

    def requeue_job(self, job_id: int) -> None:
        """`scontrol requeue`: the job stops and is PENDING again under the same id
        (Restarts counts it). SlurmRejected when Slurm refuses (not a batch job,
        --no-requeue, already pending)."""
        ...

    # --- reservations ---
    def list_reservations(self) -> tuple[Reservation, ...]: ...

    def get_reservation(self, name: str) -> Reservation:
        """Raises SlurmNotFound when there is no reservation of that name."""
        ...

    def create_reservation(self, request: ReservationRequest) -> Reservation:
        """Create it and return what slurmctld recorded. SlurmRejected carries
        Slurm's reason (nodes busy, name taken, no users or accounts, ...)."""
        ...

    def update_reservation(self, update: ReservationUpdate) -> Reservation: ...

    def delete_reservation(self, name: str) -> None:
        """Raises SlurmNotFound if it does not exist (callers that want
        idempotent deletes catch it)."""
        ...

    # --- controller ---
    def reconfigure(self) -> None:
        """`scontrol reconfigure`: slurmctld re-reads its files, slurmd follow."""
        ...


class ReservationWriter(Protocol):
    """The writes of `SlurmClient` that 24.11's slurmrestd lacks (reservations,
    job requeue); `RestClient` hands these calls to one (normally a `CliClient`)
    when its data_parser cannot do them (`rest_bodies.abilities`)."""

    def create_reservation(self, request: ReservationRequest) -> Reservation: ...

    def update_reservation(self, update: ReservationUpdate) -> Reservation: ...

    def delete_reservation(self, name: str) -> None: ...

    def requeue_job(self, job_id: int) -> None: ...
