"""Slurm daemons started from an image under podman as the operator's pods start
them: host network on loopback, own hostname, the config or key directory at
/etc/slurm. Shared by the image tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .conftest import Podman

# SlurmctldHost of the configurations the image tests render.
CONTROLLER = "smoke-ctl"


def wait_until(check: Callable[[], bool], what: str, podman: Podman, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}\n{podman.logs()}")


def host_options(host: str, conf: Path, *extra: str) -> tuple[str, ...]:
    return ("--network=host", f"--hostname={host}", "-v", f"{conf}:/etc/slurm:ro", *extra)


def start_slurmctld(podman: Podman, image: str, name: str, *, etc: Path, state: Path) -> str:
    """slurmctld on the rendered files in `etc`, state in `state`; returns once it answers.
    Its hostname is the one slurm.conf's SlurmctldHost names."""
    ctl = podman.start(
        name,
        image,
        "slurmctld",
        options=host_options(
            CONTROLLER,
            etc,
            "--env=SLURM_CONF=/etc/slurm/slurm.conf",
            "-v",
            f"{state}:/var/spool/slurmctld",
        ),
    )
    wait_until(
        lambda: "UP" in podman("exec", ctl, "scontrol", "ping", check=False),
        "slurmctld to answer",
        podman,
    )
    return ctl


def start_slurmd(
    podman: Podman,
    image: str,
    name: str,
    *,
    node: str,
    key: Path,
    ctl_port: int,
    extra: tuple[str, ...] = (),
) -> str:
    """A configless slurmd for `node` (root, like the slurmd pod), only slurm.key in `key`."""
    conf_server = ("--env", f"SLURMKUBE_CONF_SERVER=127.0.0.1:{ctl_port}")
    return podman.start(
        name,
        image,
        "slurmd",
        "-N",
        node,
        options=host_options(node, key, "--user=0", *conf_server, *extra),
    )
