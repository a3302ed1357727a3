"""Slurm daemons started from an image under podman as the operator's pods start
them: host network on loopback, own hostname, the config or key directory at
/etc/slurm. Shared by the image tests."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurmkube.render import RenderContext

from .conftest import Podman
from .slurm_stack import (
    CONTROLLER,
    SLURM_UID,
    host_mounts,
    start_slurmctld,
    wait_until,
    write_files,
)


@dataclass(frozen=True)
class Started:
    """A slurmctld with one registered slurmd (container names); `etc` is
    slurmctld's /etc/slurm, writable here."""

    ctl: str
    etc: Path
    slurmd: str


def loopback_context(ctl_port: int, node: str, node_port: int) -> RenderContext:
    """Where the daemons run in these tests: loopback ports, one slurmd (`node`)."""
    return RenderContext(
        controller_host=CONTROLLER,
        controller_addr="127.0.0.1",
        slurmctld_port=ctl_port,
        node_ports={node: node_port},
        node_addr="127.0.0.1",
        # No cgroup hierarchy is delegated to these containers.
        cgroups=False,
        # The node's size comes from the Node object, not from this host.
        config_overrides=True,
    )


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
        options=host_mounts(node, key, "--user=0", *conf_server, *extra),
    )


def wait_idle(podman: Podman, ctl: str, node: str) -> None:
    """Until slurmctld shows `node` idle: its slurmd registered."""
    wait_until(
        lambda: (
            podman("exec", ctl, "sinfo", "-h", "-n", node, "-o", "%T", check=False).strip()
            == "idle"
        ),
        f"{node} idle",
        podman,
    )


def start_cluster(
    podman: Podman,
    image: str,
    tmp_path: Path,
    files: Mapping[str, str],
    *,
    node: str,
    ctl_port: int,
    slurmd_options: tuple[str, ...] = (),
) -> Started:
    """slurmctld on `files` plus fresh keys, and `node`'s configless slurmd (with
    podman `slurmd_options`), registered; containers named after this process,
    removed by the fixture."""
    key = secrets.token_bytes(1024)
    keys = {"slurm.key": key, "jwt.key": secrets.token_bytes(32)}
    etc = write_files(tmp_path / "etc", {**files, **keys}, SLURM_UID)
    key_only = write_files(tmp_path / "key", {"slurm.key": key}, SLURM_UID)
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, SLURM_UID, SLURM_UID)
    prefix = f"slurmkube-{tmp_path.name}-{os.getpid()}"[:60]
    ctl = start_slurmctld(podman, image, f"{prefix}-slurmctld", etc=etc, state=state)
    slurmd = f"{prefix}-slurmd"
    start_slurmd(
        podman, image, slurmd, node=node, key=key_only, ctl_port=ctl_port, extra=slurmd_options
    )
    wait_idle(podman, ctl, node)
    return Started(ctl, etc, slurmd)
