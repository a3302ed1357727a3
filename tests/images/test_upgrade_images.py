"""The upgrade planner (plan/upgrade.py) driving real daemons from 24.11.5 to
26.05.5 under podman, on loopback: slurmctld keeps its state directory across
its replacement, a job started on 24.11 runs through the slurmctld upgrade and
completes, a job queued behind it stays queued while its node is drained for
slurmd's upgrade, then runs on 26.05, and the node's slurmd is replaced only
once Slurm shows it drained and idle.

Each round observes what runs (container images, `sinfo`), asks the planner,
and does what the operator's apply and the NodeSet rollout would: restart
slurmctld on the image planned for it, drain what is planned, replace slurmd
once its node is drained and idle, undrain what is no longer held.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

import pytest

from images import build as image_build
from slurmkube.api import well_known as wk
from slurmkube.plan.model import PodView, SlurmNodeView
from slurmkube.plan.slurm_release import release_of
from slurmkube.plan.upgrade import UpgradeInput, plan_upgrade
from slurmkube.plan.upgrade_model import SLURMCTLD, ComponentView, UpgradeMemory
from slurmkube.plan.upgrade_slurmd import NodeSetNodes
from slurmkube_local.local_slurm import free_ports

from .conftest import Podman
from .slurm_stack import CONTROLLER, SLURM_UID, rendered, wait_until, write_files
from .test_images_smoke import NODE

FIRST_JOB_SECONDS = 45


@pytest.fixture(scope="module")
def versions() -> dict[str, str]:
    """Series -> the image's version-tagged reference (cached builds: seconds)."""
    out = {}
    for built in image_build.cmd_build(["slurm-24.11", "slurm-26.05"]):
        (tag,) = (t for t in built.tags if re.search(r":\d+\.\d+\.\d+$", t))
        out[built.name.removeprefix("slurm-")] = tag
    return out


class Cluster:
    """slurmctld, one slurmd and sackd as the operator's pods run them."""

    def __init__(self, podman: Podman, tmp_path: Path) -> None:
        self.podman = podman
        ctl_port, node_port = free_ports(2)
        self.conf_server = f"127.0.0.1:{ctl_port}"
        keys = {"slurm.key": secrets.token_bytes(1024), "jwt.key": secrets.token_bytes(32)}
        self.etc = write_files(
            tmp_path / "etc", {**rendered(ctl_port, {NODE: node_port}, "24.11"), **keys}, SLURM_UID
        )
        self.key_only = write_files(tmp_path / "key", {"slurm.key": keys["slurm.key"]}, SLURM_UID)
        self.state = tmp_path / "state"  # the PVC: kept across slurmctld's replacement
        self.state.mkdir()
        os.chown(self.state, SLURM_UID, SLURM_UID)
        self.prefix = f"slurmkube-upgrade-{os.getpid()}"
        self.images: dict[str, str] = {}

    def _options(self, host: str, conf: Path, *extra: str) -> tuple[str, ...]:
        return ("--network=host", f"--hostname={host}", "-v", f"{conf}:/etc/slurm:ro", *extra)

    def _replace(self, name: str, image: str, *args: str, options: tuple[str, ...]) -> None:
        if name in self.images:
            self.podman("stop", "--time", "30", f"{self.prefix}-{name}", timeout=60)
        self.podman.start(f"{self.prefix}-{name}", image, *args, options=options)
        self.images[name] = image

    def slurmctld(self, image: str) -> None:
        state = ("-v", f"{self.state}:/var/spool/slurmctld")
        conf = "--env=SLURM_CONF=/etc/slurm/slurm.conf"
        self._replace(
            "slurmctld",
            image,
            "slurmctld",
            options=self._options(CONTROLLER, self.etc, conf, *state),
        )
        wait_until(lambda: "UP" in self.ctl("scontrol", "ping"), "slurmctld to answer", self.podman)

    def _configless(self) -> tuple[str, ...]:
        return (
            "--env",
            f"SLURMKUBE_CONF_SERVER={self.conf_server}",
            "--env",
            "SLURM_SACK_KEY=/etc/slurm/slurm.key",
        )

    def slurmd(self, image: str) -> None:
        options = self._options(NODE, self.key_only, "--user=0", *self._configless())
        self._replace("slurmd", image, "slurmd", "-N", NODE, options=options)

    def sackd(self, image: str) -> None:
        options = self._options("upgrade-login", self.key_only, *self._configless())
        self._replace("sackd", image, "sackd", options=options)

    def ctl(self, *args: str) -> str:
        return self.podman("exec", f"{self.prefix}-slurmctld", *args, check=False)

    def login(self, *args: str) -> str:
        return self.podman("exec", f"{self.prefix}-sackd", *args)

    def node(self) -> SlurmNodeView | None:
        """The node as the operator's observe folds slurmrestd's answer (slurmctld's
        node record, as `scontrol show node` prints it); None: unknown."""
        out = self.ctl("scontrol", "show", "node", NODE)
        state = re.search(r"State=(\S+)", out)
        if state is None:
            return None
        flags = set(re.split(r"[+]", state[1]))
        reason = re.search(r"Reason=(.*?)(?: \[|$)", out, re.MULTILINE)
        return SlurmNodeView(
            NODE,
            busy=bool(flags & {"ALLOCATED", "MIXED", "COMPLETING"}),
            drain="DRAIN" in flags,
            reason=reason[1] if reason else "",
            responding="NOT_RESPONDING" not in flags,
        )

    def job_state(self, job: int) -> str:
        out = self.ctl("scontrol", "show", "job", str(job))
        match = re.search(r"JobState=(\w+)", out)
        return match[1] if match else ""


def test_24_11_to_26_05_in_slurms_order_keeps_and_runs_the_jobs(
    versions: dict[str, str], podman: Podman, tmp_path: Path
) -> None:
    old, new = versions["24.11"], versions["26.05"]
    assert release_of(old) is not None and release_of(new) is not None
    cluster = Cluster(podman, tmp_path)
    cluster.slurmctld(old)
    cluster.slurmd(old)
    cluster.sackd(old)
    wait_until(
        lambda: (view := cluster.node()) is not None and view.responding and not view.busy,
        f"{NODE} idle",
        podman,
    )
    wait_until(
        lambda: podman.succeeds(
            "exec", f"{cluster.prefix}-sackd", "test", "-r", "/run/slurm/conf/slurm.conf"
        ),
        "sackd's configless files",
        podman,
    )
    sbatch = ("sbatch", "--parsable", "--output=/dev/null", "-N1", "-t", "5")
    running = int(cluster.login(*sbatch, "--wrap", f"sleep {FIRST_JOB_SECONDS}").split(";")[0])
    queued = int(
        cluster.login(*sbatch, f"--dependency=afterok:{running}", "--wrap", "sleep 2").split(";")[0]
    )
    wait_until(lambda: cluster.job_state(running) == "RUNNING", "the first job running", podman)

    memory: UpgradeMemory | None = None
    phases: list[str] = []
    for _ in range(240):
        view = cluster.node()
        pod = PodView(
            "gpu-node",
            NODE,
            "gpu",
            ready=view is not None and view.responding,
            image=cluster.images["slurmd"],
        )
        plan = plan_upgrade(
            UpgradeInput(
                subject="SlurmCluster upgrade spec.image",
                to=new,
                components={SLURMCTLD: ComponentView(cluster.images["slurmctld"])},
                pods=[pod],
                slurm_nodes=None if view is None else {NODE: view},
                node_sets=(NodeSetNodes("gpu", (NODE,)),),
                memory=memory,
                now=time.time(),
            )
        )
        assert plan.status is not None and plan.condition is not None
        assert plan.condition.status, plan.condition.message
        phases.append(plan.status.phase)
        # The operator's undrain (plan.cluster.undrain_candidates): ours, not held.
        if view is not None and view.drain and wk.is_ours(view.reason) and NODE not in plan.holding:
            cluster.ctl("scontrol", "update", f"NodeName={NODE}", "State=UNDRAIN")
        if plan.status.phase == "Complete":
            break
        if plan.images.of(SLURMCTLD) != cluster.images["slurmctld"]:
            cluster.slurmctld(plan.images.of(SLURMCTLD))
            # The job started on 24.11 is still known to the new slurmctld.
            assert cluster.job_state(running) in ("RUNNING", "COMPLETING", "COMPLETED")
            assert cluster.job_state(queued) == "PENDING"
            cluster.sackd(plan.images.of(SLURMCTLD))  # the client step, with slurmctld here
        for node in plan.drain:
            cluster.ctl(
                "scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={plan.reason}"
            )
        wanted = plan.images.of_node(NODE)
        if wanted != cluster.images["slurmd"] and view is not None and view.drain:
            # The NodeSet rollout: an outdated pod goes once its node is drained and idle.
            assert not view.busy, "slurmd replaced under a job"
            assert cluster.job_state(running) == "COMPLETED"
            assert cluster.job_state(queued) == "PENDING"
            cluster.slurmd(wanted)
        status = plan.status
        memory = UpgradeMemory(
            status.from_image, status.to_image, status.phase, status.nodes_done, status.since
        )
        time.sleep(1)
    assert phases[-1] == "Complete", phases
    assert list(dict.fromkeys(phases)) == ["Slurmctld", "Slurmd", "Complete"]
    wait_until(
        lambda: cluster.job_state(queued) == "COMPLETED", "the queued job to run", podman, 120
    )
    assert "Version=26.05.5" in cluster.ctl("scontrol", "show", "node", NODE)
    assert "26.05.5" in cluster.ctl("scontrol", "--version")
