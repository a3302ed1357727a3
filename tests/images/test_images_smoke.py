"""Smoke tests of the images `make images` builds, run with podman on loopback.

For each Slurm image: slurmctld, a configless slurmd, sackd and slurmrestd,
each started from the image's entrypoint with the arguments and users the
operator's pods give them, on a configuration slurmkube rendered, with a
freshly generated auth/slurm key. A job runs from the login side (sackd), the
REST API answers a JWT ping, and every container stops on SIGTERM well within
its grace period. For the operator image: its CLI and its scontrol run.

Host networking (each container keeps its own hostname, PID and mount
namespaces); ports are free loopback ports. `make test-images` runs these.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

import pytest

from slurmkube_local.local_slurm import free_ports

from .conftest import Podman
from .slurm_stack import SLURM_UID, rendered, start_slurm_stack, wait_until, write_files

NODE = "smoke-n1"
# The pods' terminationGracePeriodSeconds is 30 s; a stop must not wait it out.
GRACE = 30
CLEAN_STOP_SECONDS = 10
SLURM_IMAGES = {"slurm-26.05": "26.05", "slurm-24.11": "24.11"}


def stop_cleanly(podman: Podman, name: str) -> float:
    start = time.monotonic()
    podman("stop", "--time", str(GRACE), name, timeout=GRACE + 30)
    seconds = time.monotonic() - start
    code = int(podman("inspect", "--format", "{{.State.ExitCode}}", name).strip())
    # 137: SIGKILL after the grace period, i.e. SIGTERM was ignored.
    assert code != 137 and seconds < CLEAN_STOP_SECONDS, (
        f"{name} did not stop on SIGTERM: exit {code} after {seconds:.1f} s\n{podman.logs()}"
    )
    return seconds


def rest_ping(port: int, token: str) -> dict[str, object]:
    """GET the newest API version's ping, found in the OpenAPI document."""

    def get(path: str) -> dict[str, object]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", headers={"X-SLURM-USER-TOKEN": token}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body: dict[str, object] = json.load(response)
        return body

    paths = get("/openapi/v3")["paths"]
    assert isinstance(paths, dict)
    return get(max(p for p in paths if p.startswith("/slurm/v") and p.endswith("/ping/")))


@pytest.mark.parametrize("name", sorted(SLURM_IMAGES))
def test_slurm_image_runs_a_job_and_stops_on_sigterm(
    name: str, images: dict[str, str], podman: Podman, tmp_path: Path
) -> None:
    prefix = f"slurmkube-smoke-{os.getpid()}-{SLURM_IMAGES[name]}"
    stack = start_slurm_stack(
        podman, images[name], tmp_path, prefix, [NODE], series=SLURM_IMAGES[name]
    )
    ctl, sackd = stack.controller, stack.sackd
    # slurmctld runs as SlurmUser from the image's USER, not as root.
    top = podman("top", ctl, "huser", "comm").splitlines()[1:]
    users = dict(line.split()[::-1] for line in top)
    assert users["slurmctld"] == str(SLURM_UID), users
    job = podman("exec", sackd, "srun", "-N1", "-t", "1", "hostname", timeout=60)
    assert job.strip() == NODE, podman.logs()

    token = podman("exec", ctl, "scontrol", "token", "username=slurm", "lifespan=300")
    answer: dict[str, object] = {}

    def pinged() -> bool:
        try:
            answer.update(rest_ping(stack.rest_port, token.strip().split("=", 1)[1]))
        except OSError as err:
            answer["last error"] = repr(err)
            return False
        return True

    wait_until(pinged, "slurmrestd's JWT ping", podman, timeout=30)
    assert not answer.get("errors") and answer.get("pings"), answer

    for container in stack.containers:
        stop_cleanly(podman, container)


def test_operator_image_runs_its_cli_and_scontrol(
    images: dict[str, str], podman: Podman, tmp_path: Path
) -> None:
    image = images["operator"]
    assert "usage: slurmkube" in podman(
        "run", "--rm", "--network=none", "--entrypoint", "slurmkube", image, "--help"
    )
    assert podman("run", "--rm", "--network=none", "--entrypoint", "id", image, "-u").strip() == (
        "65532"
    )
    # scontrol reads a slurm.conf even for --version; the operator's pod has one.
    ctl_port, node_port = free_ports(2)
    etc = write_files(tmp_path / "etc", rendered(ctl_port, {NODE: node_port}, "24.11"), 65532)
    version = podman(
        "run",
        "--rm",
        "--network=none",
        "-v",
        f"{etc}:/etc/slurm:ro",
        "--env=SLURM_CONF=/etc/slurm/slurm.conf",
        "--entrypoint",
        "scontrol",
        image,
        "--version",
    )
    assert version.startswith("slurm-wlm 24.11."), version
