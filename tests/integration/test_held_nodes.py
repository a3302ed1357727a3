"""A busy node's line held as Slurm registered it, against real slurmctld: the shape
the adapter reads is the config's, and a reconfigure with the held line keeps the
job running where the unheld line fails it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slurmkube.api.models import KubeNode
from slurmkube.render.config import plan_config
from slurmkube.render.membership import HeldNode
from slurmkube.slurm import CliClient
from slurmkube.slurm.models import Node
from slurmkube_local.builders import NodeBuilder
from slurmkube_local.local_slurm import LocalSlurm
from tests.integration.conftest import integration_bundle, integration_fleet
from tests.integration.test_rendered_config import job_field, submit, wait_job_state

pytestmark = pytest.mark.integration

NODE = "gpu-0005"


def slurm_nodes(cluster: LocalSlurm) -> dict[str, Node]:
    client = CliClient(bin_dir=cluster.prefix / "bin", env=cluster.env, wrapper=cluster.isolated)
    return {n.name: n for n in client.list_nodes()}


def held(node: Node) -> HeldNode:
    return HeldNode(
        node.name,
        "gpu",
        cpus=node.cpus,
        real_memory=node.memory_mib,
        gpus=node.gpus,
        gpu_type=node.gpu_type,
    )


def fleet_with_fewer_gpus() -> list[KubeNode]:
    """An XID took one GPU of NODE out of allocatable, and its product label changed."""
    return [
        NodeBuilder(NODE).clique(1).gpus(3, "NVIDIA-H100").tiers("leaf-01", "spine-01").obj()
        if n.metadata.name == NODE
        else n
        for n in integration_fleet()
    ]


@pytest.fixture
def restored(slurm_cluster: LocalSlurm) -> Iterator[LocalSlurm]:
    yield slurm_cluster
    slurm_cluster.run("scancel", "--user=root", check=False)
    slurm_cluster.write_config(slurm_cluster.render(integration_bundle(), integration_fleet()))
    slurm_cluster.run("scontrol", "reconfigure")
    # A slurmd that registered 3 GPUs before it re-read gres.conf leaves the node
    # drained ("gres/gpu count reported lower"): resume until it registers 4 again.
    slurm_cluster.wait_for(lambda: _resumed(slurm_cluster), f"{NODE} idle again", timeout=90)
    slurm_cluster.wait_nodes_idle(timeout=90)


def _resumed(cluster: LocalSlurm) -> bool:
    node = slurm_nodes(cluster)[NODE]
    if node.drain:
        cluster.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME", check=False)
    return not node.drain and not node.busy and node.gpus == 4


def test_the_shape_slurm_reports_is_the_config_line(slurm_cluster: LocalSlurm) -> None:
    nodes = slurm_nodes(slurm_cluster)
    for name, shape in slurm_cluster.config.shape_of.items():
        node = nodes[name]
        registered = held(node)
        assert (node.cpus, node.memory_mib) == (shape.cpus, shape.real_memory), name
        gres = f"gpu:{registered.gpu_type}:{registered.gpus}" if registered.gpus else None
        assert gres == shape.gres, name


@pytest.mark.parametrize(
    "hold",
    [True, False],
    ids=["held: the job runs on", "not held: Slurm kills the job (the bug the hold prevents)"],
)
def test_a_held_line_keeps_the_job_running_through_a_reconfigure(
    restored: LocalSlurm, hold: bool
) -> None:
    cluster = restored
    job = submit(cluster, "-N1", "-w", NODE, "--gres=gpu:4", "--wrap", "sleep 300")
    wait_job_state(cluster, job, {"RUNNING"})
    busy = slurm_nodes(cluster)[NODE]
    assert busy.busy
    holds = {NODE: held(busy)} if hold else {}
    config = plan_config(
        integration_bundle(), fleet_with_fewer_gpus(), cluster.context, held=holds, problems=[]
    )
    assert (NODE in config.held) is hold
    before = _config_time(cluster)
    cluster.write_config(config)
    cluster.run("scontrol", "reconfigure")
    cluster.wait_for(lambda: _config_time(cluster) != before, "slurmctld re-read the config")
    if hold:
        assert job_field(cluster, job, "JobState") == "RUNNING"
        assert job_field(cluster, job, "Restarts") == "0"
        after = slurm_nodes(cluster)[NODE]
        assert (after.gpus, after.gpu_type) == (4, "gb200")
    else:
        # NODE_FAIL, then requeued (JobRequeue=1): the run that was going is lost.
        cluster.wait_for(lambda: _killed(cluster, job), f"job {job} failed by the reconfigure")


def _killed(cluster: LocalSlurm, job: str) -> bool:
    state = job_field(cluster, job, "JobState")
    return state == "NODE_FAIL" or job_field(cluster, job, "Restarts") != "0"


def _config_time(cluster: LocalSlurm) -> str:
    out = cluster.run("scontrol", "show", "config", check=False)
    return next((line for line in out.splitlines() if "Configuration data as of" in line), "")
