"""A Slurm cluster from one of our Slurm images under podman, on loopback.

slurmctld, one configless slurmd per node, sackd (the login side) and
slurmrestd, each started from the image's entrypoint with the arguments and
users the operator's pods give them, on a configuration slurmkube rendered,
with a freshly generated auth/slurm key and jwt.key. Host networking (each
container keeps its own hostname, PID and mount namespaces); ports are free
loopback ports. The image smoke tests, the REST image tests and the fixture
recorder (record_rest.py) all start their cluster here.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmkube.render import RenderContext, plan_config, render_files
from slurmkube_local.builders import NodeBuilder, bundle
from slurmkube_local.local_slurm import free_ports, write_files

from .conftest import Podman

SLURM_UID = 401
RESTD_UID = 402
CONTROLLER = "smoke-ctl"


def wait_until(check: Callable[[], bool], what: str, podman: Podman, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}\n{podman.logs()}")


def rendered(
    ctl_port: int,
    node_ports: Mapping[str, int],
    series: str,
    cliques: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """slurmkube's rendering for CPU nodes, with the image's paths, for the Slurm
    release `series` (26.05: topology.yaml and OpenMetrics); every node in NVLink
    domain 1 unless `cliques` says otherwise."""
    context = RenderContext(
        controller_host=CONTROLLER,
        controller_addr="127.0.0.1",
        slurmctld_port=ctl_port,
        node_ports=dict(node_ports),
        node_addr="127.0.0.1",
        # No cgroup hierarchy is delegated to these containers.
        cgroups=False,
        # The node's size comes from the Node object, not from this host.
        config_overrides=True,
    )
    # In an NVLink domain: Slurm 26.05's topology/block refuses to start with
    # no block at all (24.11 only logs "No blocks configured").
    domain = cliques or {}
    nodes = [NodeBuilder(name).gpus(0).clique(domain.get(name, 1)).obj() for name in node_ports]
    cluster = bundle(extra={"slurm": {"version": series}})
    return dict(render_files(plan_config(cluster, nodes, context)).files)


def host_mounts(host: str, conf: Path, *extra: str) -> tuple[str, ...]:
    """podman options of a daemon: host network, its own hostname, `conf` at /etc/slurm."""
    return ("--network=host", f"--hostname={host}", "-v", f"{conf}:/etc/slurm:ro", *extra)


def start_slurmctld(podman: Podman, image: str, name: str, *, etc: Path, state: Path) -> str:
    """slurmctld on the rendered files in `etc`, state in `state`; returns once it answers.
    Its hostname is the one slurm.conf's SlurmctldHost names."""
    ctl = podman.start(
        name,
        image,
        "slurmctld",
        options=host_mounts(
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


@dataclass(frozen=True)
class SlurmStack:
    """Container names of the running daemons, and how to reach slurmrestd."""

    controller: str
    slurmd: tuple[str, ...]
    sackd: str
    restd: str
    rest_port: int
    jwt_key: bytes
    nodes: tuple[str, ...]
    # What the files were rendered with, for `rewrite`.
    etc: Path
    ctl_port: int
    node_ports: Mapping[str, int]
    series: str

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def rewrite(self, cliques: Mapping[str, int]) -> dict[str, str]:
        """slurmctld's files rendered again with other NVLink domains (its
        `scontrol reconfigure` or next start reads them); returns them."""
        files = rendered(self.ctl_port, self.node_ports, self.series, cliques)
        for name, text in files.items():
            path = self.etc / name
            path.chmod(0o640)
            path.write_text(text)
            path.chmod(0o440)
        return files

    @property
    def containers(self) -> tuple[str, ...]:
        """In the order they should stop: clients first, slurmctld last."""
        return (self.restd, self.sackd, *self.slurmd, self.controller)


def start_slurm_stack(
    podman: Podman,
    image: str,
    workdir: Path,
    prefix: str,
    nodes: Sequence[str],
    *,
    series: str = "26.05",
    cliques: Mapping[str, int] | None = None,
) -> SlurmStack:
    """Start the cluster and return once every node is idle and sackd has the config;
    `series`: the Slurm release the image runs (what the config is rendered for);
    `cliques`: NVLink domains other than 1, by node."""
    ctl_port, rest_port, *node_ports = free_ports(2 + len(nodes))
    ports = dict(zip(nodes, node_ports, strict=True))
    files = rendered(ctl_port, ports, series, cliques)
    keys = {"slurm.key": secrets.token_bytes(1024), "jwt.key": secrets.token_bytes(32)}
    etc = write_files(workdir / "etc", {**files, **keys}, SLURM_UID)
    # slurmd and sackd pods get only the key (configless); slurmrestd no key at all.
    key_only = write_files(workdir / "key", {"slurm.key": keys["slurm.key"]}, SLURM_UID)
    rest_etc = write_files(workdir / "rest", files, RESTD_UID)
    state = workdir / "state"
    state.mkdir()
    os.chown(state, SLURM_UID, SLURM_UID)
    conf_server = ("--env", f"SLURMKUBE_CONF_SERVER=127.0.0.1:{ctl_port}")
    sack_key = ("--env", "SLURM_SACK_KEY=/etc/slurm/slurm.key")

    ctl = start_slurmctld(podman, image, f"{prefix}-slurmctld", etc=etc, state=state)
    slurmd = tuple(
        podman.start(
            f"{prefix}-slurmd-{node}",
            image,
            "slurmd",
            "-N",
            node,
            options=host_mounts(node, key_only, "--user=0", *conf_server, *sack_key),
        )
        for node in nodes
    )
    sackd = podman.start(
        f"{prefix}-sackd",
        image,
        "sackd",
        options=host_mounts("smoke-login", key_only, *conf_server, *sack_key),
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
        options=host_mounts(
            "smoke-rest",
            rest_etc,
            f"--user={RESTD_UID}:{RESTD_UID}",
            "--env=SLURM_CONF=/etc/slurm/slurm.conf",
            "--env=SLURM_JWT=daemon",
        ),
    )
    names = ",".join(nodes)
    wait_until(
        lambda: (
            set(podman("exec", ctl, "sinfo", "-hN", "-n", names, "-o", "%T", check=False).split())
            == {"idle"}
        ),
        f"{names} idle",
        podman,
    )
    # The login side: client commands with sackd's fetched config and credentials.
    wait_until(
        lambda: podman.succeeds("exec", sackd, "test", "-r", "/run/slurm/conf/slurm.conf"),
        "sackd's configless files",
        podman,
    )
    return SlurmStack(
        ctl,
        slurmd,
        sackd,
        restd,
        rest_port,
        keys["jwt.key"],
        tuple(nodes),
        etc,
        ctl_port,
        ports,
        series,
    )
