"""Apply a Slurm upgrade's maintenance reservations (plan/upgrade.py): a
Flags=MAINT reservation over each windowed NodeSet, made before its window
so Slurm starts no job there that would still run when it opens."""

from __future__ import annotations

import datetime as dt
import logging

from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.model import Plan
from slurmkube.plan.upgrade_model import MaintenanceReservation
from slurmkube.slurm.errors import SlurmError, SlurmNotFound
from slurmkube.slurm.models import ReservationFlag, ReservationRequest, ReservationUpdate
from slurmkube.slurm.protocol import ReservationWriter

log = logging.getLogger(__name__)

# IGNORE_JOBS: a job running now may end inside the window; it is never killed,
# its block waits (plan/upgrade_slurmd.py).
FLAGS = frozenset({ReservationFlag.MAINT, ReservationFlag.IGNORE_JOBS})


def apply_maintenance(
    kube: Kube, cluster_obj: Manifest, slurm: ReservationWriter, plan: Plan, user: str
) -> None:
    for wanted in plan.maintenance:
        try:
            _write(slurm, wanted, user)
        except SlurmError as err:
            log.warning("maintenance reservation failed name=%s error=%s", wanted.name, err)
            kube.event(
                cluster_obj, "MaintenanceReservationFailed", f"{wanted.name}: {err}", warning=True
            )
            continue
        kube.event(
            cluster_obj,
            "MaintenanceReserved",
            f"{wanted.name} on {len(wanted.nodes)} nodes from {_at(wanted.start)}"
            f" for {wanted.minutes} minutes",
        )
    for name in plan.maintenance_release:
        try:
            slurm.delete_reservation(name)
        except SlurmNotFound:
            pass
        except SlurmError as err:
            log.warning("maintenance reservation not deleted name=%s error=%s", name, err)


def _write(slurm: ReservationWriter, wanted: MaintenanceReservation, user: str) -> None:
    write = maintenance_write(wanted, user)
    if isinstance(write, ReservationUpdate):
        slurm.update_reservation(write)
    else:
        slurm.create_reservation(write)


def maintenance_write(
    wanted: MaintenanceReservation, user: str
) -> ReservationRequest | ReservationUpdate:
    """What Slurm is asked: only `user` (SlurmUser) may use the reservation."""
    start = None if wanted.start is None else dt.datetime.fromtimestamp(wanted.start, dt.UTC)
    duration = dt.timedelta(minutes=wanted.minutes)
    if wanted.exists:
        return ReservationUpdate(wanted.name, nodes=wanted.nodes, start=start, duration=duration)
    return ReservationRequest(
        wanted.name, wanted.nodes, users=(user,), start=start, duration=duration, flags=FLAGS
    )


def _at(epoch: float | None) -> str:
    if epoch is None:
        return "now"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="minutes")
