"""slurmctld and slurmrestd from one of our Slurm images, for the Slurm-read bench.

The host build is Slurm 24.11.5 only; 26.05's source is not served here, so its
daemons run from the image `make images` built (Debian forky's packages),
under podman on slurmkube's own store: host network on free loopback ports,
slurmkube's rendering for the image's paths, slurmctld as the image's user (401)
and slurmrestd as 402 with jwt auth, as the operator's pods run them. The nodes
run no slurmd (a rendered fleet), as in the host bench.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmkube.api.documents import ClusterBundle
from slurmkube.api.models import KubeNode
from slurmkube.render import RenderContext, plan_config, render_files
from slurmkube_local.local_slurm import free_ports, write_files

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from images import build as image_build

SLURM_UID = 401
RESTD_UID = 402
CONTROLLER = "bench-ctl"


def image_ref(series: str) -> str:
    """The built image of Slurm `series` (e.g. 26.05); `make images` first."""
    entry = image_build.built_images().get(f"slurm-{series}")
    if entry is None:
        raise SystemExit(f"bench: no image slurm-{series} recorded; run `make images`")
    return str(entry["ref"])


@dataclass
class ImageSlurm:
    """What the bench reads: the REST URL, jwt.key's folder, the node names, and
    `run` for a Slurm command in the slurmctld container."""

    env: dict[str, str]
    controller: str
    rest_url: str
    conf_dir: Path
    nodes: list[str]

    def podman(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run(self, *argv: str) -> str:
        done = self.podman("exec", self.controller, *argv)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout


@contextlib.contextmanager
def start_image_slurm(
    bundle: ClusterBundle, nodes: Sequence[KubeNode], series: str, prefix: str = "bench-read"
) -> Iterator[ImageSlurm]:
    """Start slurmctld (until `scontrol ping` answers) and slurmrestd; remove both after."""
    image = image_ref(series)
    env = image_build.podman_env(image_build.cache_dir())
    ctl_port, rest_port, idle_port = free_ports(3)
    names = [n.metadata.name for n in nodes]
    context = RenderContext(
        controller_host=CONTROLLER,
        controller_addr="127.0.0.1",
        slurmctld_port=ctl_port,
        node_ports=dict.fromkeys(names, idle_port),
        node_addr="127.0.0.1",
        cgroups=False,
        config_overrides=True,
    )
    files = dict(render_files(plan_config(bundle, nodes, context)).files)
    workdir = Path(tempfile.mkdtemp(prefix="slurmkube-image-slurm-"))
    workdir.chmod(0o755)
    keys = {"slurm.key": secrets.token_bytes(1024), "jwt.key": secrets.token_bytes(32)}
    etc = write_files(workdir / "etc", {**files, **keys}, SLURM_UID)
    rest_etc = write_files(workdir / "rest", files, RESTD_UID)
    state = workdir / "state"
    state.mkdir()
    os.chown(state, SLURM_UID, SLURM_UID)
    slurm = ImageSlurm(env, f"{prefix}-slurmctld", f"http://127.0.0.1:{rest_port}", etc, names)
    restd = f"{prefix}-slurmrestd"
    try:
        for name in (slurm.controller, restd):
            slurm.podman("rm", "--force", "--ignore", name)
        etc_opts = ["-v", f"{etc}:/etc/slurm:ro", "--env=SLURM_CONF=/etc/slurm/slurm.conf"]
        state_opts = ["-v", f"{state}:/var/spool/slurmctld"]
        _start(slurm, slurm.controller, image, ["slurmctld"], [*etc_opts, *state_opts])
        deadline = time.monotonic() + 600
        while "UP" not in slurm.podman("exec", slurm.controller, "scontrol", "ping").stdout:
            if time.monotonic() > deadline:
                raise RuntimeError(f"slurmctld did not answer: {_logs(slurm, slurm.controller)}")
            time.sleep(1)
        serve = ["-a", "rest_auth/jwt", "-s", "openapi/slurmctld", f"127.0.0.1:{rest_port}"]
        rest_opts = ["-v", f"{rest_etc}:/etc/slurm:ro", "--env=SLURM_CONF=/etc/slurm/slurm.conf"]
        as_restd = [f"--user={RESTD_UID}:{RESTD_UID}", "--env=SLURM_JWT=daemon"]
        _start(slurm, restd, image, ["slurmrestd", *serve], [*rest_opts, *as_restd])
        yield slurm
    finally:
        for name in (restd, slurm.controller):
            slurm.podman("rm", "--force", "--ignore", "--time", "10", name)
        shutil.rmtree(workdir, ignore_errors=True)


def _start(slurm: ImageSlurm, name: str, image: str, args: list[str], opts: list[str]) -> None:
    """Host network; the controller's hostname is the one slurm.conf names."""
    host = CONTROLLER if name == slurm.controller else name
    done = slurm.podman(
        "run", "--detach", "--name", name, "--pull=never", "--network=host",
        f"--hostname={host}", *opts, image, *args,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"podman run {name}: {done.stderr.strip()}")


def _logs(slurm: ImageSlurm, name: str) -> str:
    return slurm.podman("logs", "--tail", "30", name).stderr[-3000:]
