"""An update window's MAINT reservation against real Slurm (controllers/upgrade_apply.py):
Slurm takes it over nodes running a job, and from then on starts there only
jobs that end before the window opens."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from slurmkube.controllers.upgrade_apply import maintenance_write
from slurmkube.plan.upgrade_model import MaintenanceReservation
from slurmkube.plan.upgrade_window import reservation_name
from slurmkube.slurm import CliClient, ReservationRequest
from slurmkube_local.local_slurm import LocalSlurm

pytestmark = pytest.mark.integration

NODE = "gpu-0001"


@pytest.fixture
def scontrol(slurm_cluster: LocalSlurm) -> Iterator[CliClient]:
    client = CliClient(
        bin_dir=slurm_cluster.prefix / "bin", env=slurm_cluster.env, wrapper=slurm_cluster.isolated
    )
    yield client
    slurm_cluster.run("scancel", "--user=root", check=False)
    for res in client.list_reservations():
        slurm_cluster.run("scontrol", "delete", f"ReservationName={res.name}", check=False)
    # The cluster is shared by the session: leave the node idle, not still
    # completing or `planned` by backfill for a cancelled job.
    slurm_cluster.run("scontrol", "schedule", check=False)
    slurm_cluster.wait_nodes_idle([NODE])


def submit(cluster: LocalSlurm, minutes: int) -> int:
    out = cluster.run(
        "sbatch",
        "--parsable",
        f"--output={cluster.root / 'log' / 'job-%j.out'}",
        f"--time={minutes}",
        f"--nodelist={NODE}",
        "--wrap",
        "sleep 600",
    )
    return int(out.strip().split(";")[0])


def state(cluster: LocalSlurm, job: int) -> str:
    return cluster.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip()


def unscheduled(cluster: LocalSlurm, job: int) -> bool:
    """Pending with no reason yet: the scheduler has not looked at it."""
    out = cluster.run("squeue", "-h", "-j", str(job), "-o", "%T %r", check=False).split()
    return out[:1] == ["PENDING"] and out[1:] in ([], ["None"], ["Priority"])


def settle(cluster: LocalSlurm, jobs: list[int], seconds: float = 30) -> None:
    """Until every job started or the scheduler gave the reason it did not (or had
    `seconds`): a job the window refuses stays pending, reason given, at once."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(unscheduled(cluster, j) for j in jobs):
        cluster.run("scontrol", "schedule", check=False)
        time.sleep(1)


def test_a_window_reservation_lets_only_jobs_that_end_before_it_start(
    slurm_cluster: LocalSlurm, scontrol: CliClient
) -> None:
    running = submit(slurm_cluster, minutes=60)
    settle(slurm_cluster, [running])
    assert state(slurm_cluster, running) == "RUNNING"
    # The node runs a job past the window's start: IGNORE_JOBS takes it anyway.
    window = MaintenanceReservation(
        reservation_name("gpu"), (NODE,), time.time() + 20 * 60, minutes=60
    )
    request = maintenance_write(window, "root")
    assert isinstance(request, ReservationRequest)
    made = scontrol.create_reservation(request)
    assert {"MAINT", "IGNORE_JOBS"} <= set(made.flags) and made.nodes == (NODE,)
    slurm_cluster.run("scancel", str(running))
    short, long = submit(slurm_cluster, minutes=5), submit(slurm_cluster, minutes=60)
    settle(slurm_cluster, [short, long])
    assert state(slurm_cluster, short) == "RUNNING"
    assert state(slurm_cluster, long) == "PENDING"
