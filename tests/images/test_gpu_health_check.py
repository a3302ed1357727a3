"""slurmd's GPU check in each Slurm image (`spec.health.nodeCheck`), under podman.

slurmd runs with two fake GPU device files (/dev/null bound as /dev/nvidia0 and
/dev/nvidia1, as the e2e runtime gives its fake GPUs) and the HealthCheckProgram
slurmkube renders. One device file goes: slurmd's own check drains the node
with slurmkube's owned reason, and the active check the health controller runs
(its reservation, UNDRAIN, the check job's script, all built by the operator's
code) fails. The file comes back: the program passes, the active check job
completes and the node is idle. An admin's drain keeps its reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkube.api import well_known as wk
from slurmkube.controllers.health_apply import check_job, check_reservation
from slurmkube.plan.health_model import ActionKind, HealthAction
from slurmkube.plan.health_rules import check_reservation as reservation_of
from slurmkube.render import plan_config, render_files
from slurmkube.slurm.arguments import create_reservation_argv, node_state_argv
from slurmkube.slurm.models import Node, NodeStateChange
from slurmkube_local.builders import NodeBuilder, bundle
from slurmkube_local.local_slurm import free_ports

from .conftest import Podman
from .daemons import loopback_context, start_cluster
from .slurm_stack import wait_until

NODE = "gpu-check-n1"
GPUS = 2
# The shortest interval the API takes: slurmd notices the missing GPU within it.
INTERVAL = 10
PROGRAM = "/usr/local/bin/slurmkube-gpu-check"
GONE = f"{wk.HEALTH_REASON_PREFIX} gpu check: 1 of 2 GPU devices found"
SLURM_IMAGES = {"slurm-26.05": "26.05", "slurm-24.11": "24.11"}
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def node_state(podman: Podman, ctl: str) -> tuple[str, str]:
    """sinfo's state and reason of NODE."""
    out = podman("exec", ctl, "sinfo", "-h", "-n", NODE, "-o", "%T|%E", check=False).strip()
    state, _, reason = out.partition("|")
    return state, reason


def job_state(podman: Podman, ctl: str, job: str) -> str:
    out = podman("exec", ctl, "scontrol", "-o", "show", "job", job, check=False)
    return next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")


def node_check_passes(podman: Podman, slurmd: str) -> bool:
    """The program as slurmd runs it: only SLURMD_NODENAME in its environment."""
    return podman.succeeds("exec", slurmd, "env", "-i", f"SLURMD_NODENAME={NODE}", PROGRAM)


def active_check(podman: Podman, ctl: str) -> str:
    """What the health controller does to recover NODE: its reservation, UNDRAIN, the
    check job inside (as slurmrestd would get it from `check_job`); the job's end state.
    sbatch keeps its environment: `--export` of named variables makes 24.11's slurmd
    load the user's login environment in a new mount namespace, which a container
    without CAP_SYS_ADMIN refuses (slurmd exits: `fatal: clone`)."""
    action = HealthAction(ActionKind.RUN_CHECK, NODE, reservation=reservation_of(NODE))
    reserve = create_reservation_argv(check_reservation(action, "slurm", 60))
    podman("exec", ctl, "scontrol", *reserve)
    # UNDRAIN of a node slurmd's check has not drained again is refused: fine.
    podman(
        "exec", ctl, "scontrol", *node_state_argv(NODE, NodeStateChange.UNDRAIN, None), check=False
    )
    slurm = Node(NODE, frozenset({"IDLE"}), "IDLE", "", gpus=GPUS, partitions=())
    job = check_job(action, slurm, 60)
    out = podman(
        "exec",
        ctl,
        "sbatch",
        "--parsable",
        f"--job-name={job.name}",
        f"--reservation={job.reservation}",
        f"--nodelist={job.node}",
        "--nodes=1",
        f"--gres=gpu:{job.gpus}",
        f"--time={job.time_limit_minutes}",
        "--output=/dev/null",
        "--chdir=/tmp",
        "--no-requeue",
        "--wrap",
        job.script,
    )
    job_id = out.strip().split(";")[0]
    wait_until(lambda: job_state(podman, ctl, job_id) in ENDED, f"check job {job_id}", podman)
    podman("exec", ctl, "scontrol", "delete", f"ReservationName={action.reservation}")
    return job_state(podman, ctl, job_id)


@pytest.mark.parametrize("name", sorted(SLURM_IMAGES))
def test_slurmds_gpu_check_drains_a_node_missing_a_gpu_with_the_owned_reason(
    images: dict[str, str], podman: Podman, tmp_path: Path, name: str
) -> None:
    ctl_port, node_port = free_ports(2)
    health = {"nodeCheck": {"enabled": True, "intervalSeconds": INTERVAL}}
    cluster = bundle(extra={"slurm": {"version": SLURM_IMAGES[name]}, "health": health})
    nodes = [NodeBuilder(NODE).gpus(GPUS).clique(1).obj()]
    files = render_files(plan_config(cluster, nodes, loopback_context(ctl_port, NODE, node_port)))
    assert f"HealthCheckProgram={PROGRAM}" in files.files["slurm.conf"]
    fake_gpus = tuple(f"--device=/dev/null:/dev/nvidia{i}" for i in range(GPUS))
    # A hostname that is not the node name (as a pod's, for a dotted node name): the
    # program must take slurmd's SLURMD_NODENAME.
    options = (*fake_gpus, "--hostname=gpu-check-pod")
    started = start_cluster(
        podman,
        images[name],
        tmp_path,
        dict(files.files),
        node=NODE,
        ctl_port=ctl_port,
        slurmd_options=options,
    )
    ctl, slurmd = started.ctl, started.slurmd
    assert node_check_passes(podman, slurmd)

    podman("exec", slurmd, "mv", "/dev/nvidia1", "/dev/gone-nvidia1")
    wait_until(lambda: node_state(podman, ctl) == ("drained", GONE), "the owned drain", podman)
    assert active_check(podman, ctl) == "FAILED"

    podman("exec", slurmd, "mv", "/dev/gone-nvidia1", "/dev/nvidia1")
    assert node_check_passes(podman, slurmd)
    assert active_check(podman, ctl) == "COMPLETED"
    wait_until(lambda: node_state(podman, ctl) == ("idle", "none"), "idle, no reason", podman)

    # An admin's drain is theirs: the check fails and leaves the reason alone.
    admin = node_state_argv(NODE, NodeStateChange.DRAIN, "RMA GPU 1")
    podman("exec", ctl, "scontrol", *admin)
    podman("exec", slurmd, "mv", "/dev/nvidia1", "/dev/gone-nvidia1")
    assert not node_check_passes(podman, slurmd)
    assert node_state(podman, ctl) == ("drained", "RMA GPU 1")
