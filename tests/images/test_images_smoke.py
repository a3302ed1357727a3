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
import secrets
import time
import urllib.request
from pathlib import Path

import pytest

from slurmkube.render import plan_config, render_files
from slurmkube_local.builders import NodeBuilder, bundle
from slurmkube_local.local_slurm import free_ports

from .conftest import Podman
from .daemons import (
    SLURM_UID,
    host_options,
    loopback_context,
    start_slurmctld,
    start_slurmd,
    wait_idle,
    wait_until,
    write_files,
)

RESTD_UID = 402
NODE = "smoke-n1"
# The pods' terminationGracePeriodSeconds is 30 s; a stop must not wait it out.
GRACE = 30
CLEAN_STOP_SECONDS = 10
SLURM_IMAGES = {"slurm-26.05": "26.05", "slurm-24.11": "24.11"}


def rendered(ctl_port: int, node_port: int, series: str = "24.11") -> dict[str, str]:
    """slurmkube's rendering for one CPU node, with the image's paths, for the
    Slurm release `series` (26.05: topology.yaml and OpenMetrics)."""
    context = loopback_context(ctl_port, NODE, node_port)
    # In an NVLink domain: Slurm 26.05's topology/block refuses to start with
    # no block at all (24.11 only logs "No blocks configured").
    node = NodeBuilder(NODE).gpus(0).clique(1).obj()
    cluster = bundle(extra={"slurm": {"version": series}})
    return dict(render_files(plan_config(cluster, [node], context)).files)


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
    image = images[name]
    ctl_port, node_port, rest_port = free_ports(3)
    files = rendered(ctl_port, node_port, SLURM_IMAGES[name])
    keys = {"slurm.key": secrets.token_bytes(1024), "jwt.key": secrets.token_bytes(32)}
    etc = write_files(tmp_path / "etc", {**files, **keys}, SLURM_UID)
    # slurmd and sackd pods get only the key (configless); slurmrestd no key at all.
    key_only = write_files(tmp_path / "key", {"slurm.key": keys["slurm.key"]}, SLURM_UID)
    rest_etc = write_files(tmp_path / "rest", files, RESTD_UID)
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, SLURM_UID, SLURM_UID)
    prefix = f"slurmkube-smoke-{os.getpid()}-{SLURM_IMAGES[name]}"
    conf_server = ("--env", f"SLURMKUBE_CONF_SERVER=127.0.0.1:{ctl_port}")
    sack_key = ("--env", "SLURM_SACK_KEY=/etc/slurm/slurm.key")
    ctl = start_slurmctld(podman, image, f"{prefix}-slurmctld", etc=etc, state=state)
    # slurmctld runs as SlurmUser from the image's USER, not as root.
    top = podman("top", ctl, "huser", "comm").splitlines()[1:]
    users = dict(line.split()[::-1] for line in top)
    assert users["slurmctld"] == str(SLURM_UID), users
    slurmd = start_slurmd(
        podman,
        image,
        f"{prefix}-slurmd",
        node=NODE,
        key=key_only,
        ctl_port=ctl_port,
        extra=sack_key,
    )
    sackd = podman.start(
        f"{prefix}-sackd",
        image,
        "sackd",
        options=host_options("smoke-login", key_only, *conf_server, *sack_key),
    )
    restd = podman.start(
        f"{prefix}-slurmrestd",
        image,
        "slurmrestd",
        "-a",
        "rest_auth/jwt",
        "-s",
        "openapi/slurmctld",
        f"127.0.0.1:{rest_port}",
        options=host_options(
            "smoke-rest",
            rest_etc,
            f"--user={RESTD_UID}:{RESTD_UID}",
            "--env=SLURM_CONF=/etc/slurm/slurm.conf",
            "--env=SLURM_JWT=daemon",
        ),
    )
    wait_idle(podman, ctl, NODE)
    # The login side: client commands with sackd's fetched config and credentials.
    wait_until(
        lambda: podman.succeeds("exec", sackd, "test", "-r", "/run/slurm/conf/slurm.conf"),
        "sackd's configless files",
        podman,
    )
    job = podman("exec", sackd, "srun", "-N1", "-t", "1", "hostname", timeout=60)
    assert job.strip() == NODE, podman.logs()

    token = podman("exec", ctl, "scontrol", "token", "username=slurm", "lifespan=300")
    answer: dict[str, object] = {}

    def pinged() -> bool:
        try:
            answer.update(rest_ping(rest_port, token.strip().split("=", 1)[1]))
        except OSError as err:
            answer["last error"] = repr(err)
            return False
        return True

    wait_until(pinged, "slurmrestd's JWT ping", podman, timeout=30)
    assert not answer.get("errors") and answer.get("pings"), answer

    for container in (restd, sackd, slurmd, ctl):
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
    etc = write_files(tmp_path / "etc", rendered(*free_ports(2)), 65532)
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
