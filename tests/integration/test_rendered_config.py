"""Real slurmctld/slurmd accept what slurmkube renders and place jobs by its topology."""

from __future__ import annotations

import re
import time

import pytest

from slurmkube.slurm.hostlist import expand
from slurmkube_local.builders import CLUSTER_UUID, NodeBuilder
from slurmkube_local.local_slurm import LocalSlurm
from tests.integration.conftest import (
    DOMAINS,
    PER_DOMAIN,
    integration_bundle,
    integration_fleet,
)

pytestmark = pytest.mark.integration


def show_topology(cluster: LocalSlurm) -> dict[str, list[str]]:
    """BlockName -> nodes, from `scontrol show topology` (aggregated blocks left out)."""
    blocks = {}
    for line in cluster.run("scontrol", "show", "topology").splitlines():
        match = re.match(r"BlockName=(\S+) .*Nodes=(\S+)", line)
        if match:
            blocks[match.group(1)] = sorted(expand(match.group(2)))
    return blocks


def job_field(cluster: LocalSlurm, job_id: str, field: str) -> str:
    out = cluster.run("scontrol", "-o", "show", "job", job_id)
    match = re.search(rf"\b{field}=(\S+)", out)
    assert match, out
    return match.group(1)


def submit(cluster: LocalSlurm, *args: str) -> str:
    out = cluster.run("sbatch", "--parsable", *args)
    return out.strip().split(";")[0]


def wait_job_state(cluster: LocalSlurm, job_id: str, states: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = job_field(cluster, job_id, "JobState")
        if state in states:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} is {state}, wanted one of {states}")


def test_every_node_registers_idle_with_its_gpus(slurm_cluster: LocalSlurm) -> None:
    out = slurm_cluster.run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %T %G")
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    expected = {f"gpu-{i:04d}": ["idle", "gpu:gb200:4"] for i in range(1, 16)}
    expected |= {f"hgx-{i}": ["idle", "gpu:h100:8"] for i in (1, 2)}
    assert rows == expected


def test_scontrol_show_topology_equals_the_labels(slurm_cluster: LocalSlurm) -> None:
    expected = {
        f"{CLUSTER_UUID}.{d + 1}": [f"gpu-{d * PER_DOMAIN + i + 1:04d}" for i in range(PER_DOMAIN)]
        for d in range(DOMAINS)
    }
    assert show_topology(slurm_cluster) == expected


def test_segment_job_lands_inside_one_block(slurm_cluster: LocalSlurm) -> None:
    blocks = show_topology(slurm_cluster)
    # Fill one node of the first block so the job must pick a block with room.
    blocker = submit(slurm_cluster, "-N1", "-w", "gpu-0001", "--wrap", "sleep 30")
    job = submit(slurm_cluster, "-N4", "--segment=4", "--gres=gpu:4", "--wrap", "sleep 2")
    try:
        wait_job_state(slurm_cluster, job, {"RUNNING", "COMPLETED"})
        nodes = sorted(expand(job_field(slurm_cluster, job, "NodeList")))
        assert len(nodes) == 4
        assert any(set(nodes) <= set(members) for members in blocks.values()), (nodes, blocks)
        assert "gpu-0001" not in nodes
    finally:
        slurm_cluster.run("scancel", blocker, job, check=False)


def test_relabelled_node_moves_block_on_reconfigure_and_its_job_keeps_running(
    slurm_cluster: LocalSlurm,
) -> None:
    moved = "gpu-0004"
    job = submit(slurm_cluster, "-N1", "-w", moved, "--wrap", "sleep 120")
    wait_job_state(slurm_cluster, job, {"RUNNING"})
    ctld_pid = slurm_cluster.processes["slurmctld"].pid
    relabelled = [
        NodeBuilder(moved).clique(3).gpus(4).tiers("leaf-02", "spine-01").obj()
        if n.metadata.name == moved
        else n
        for n in integration_fleet()
    ]
    try:
        slurm_cluster.write_config(slurm_cluster.render(integration_bundle(), relabelled))
        slurm_cluster.run("scontrol", "reconfigure")
        slurm_cluster.wait_for(
            lambda: moved in show_topology(slurm_cluster).get(f"{CLUSTER_UUID}.3", []),
            f"{moved} in block 3",
        )
        blocks = show_topology(slurm_cluster)
        assert moved not in blocks[f"{CLUSTER_UUID}.1"]
        assert job_field(slurm_cluster, job, "JobState") == "RUNNING"
        assert slurm_cluster.processes["slurmctld"].pid == ctld_pid
    finally:
        slurm_cluster.run("scancel", job, check=False)
        slurm_cluster.write_config(slurm_cluster.render(integration_bundle(), integration_fleet()))
        slurm_cluster.run("scontrol", "reconfigure")
        slurm_cluster.wait_for(
            lambda: moved in show_topology(slurm_cluster).get(f"{CLUSTER_UUID}.1", []),
            "topology restored",
        )


def test_nodes_outside_any_block_still_run_jobs(slurm_cluster: LocalSlurm) -> None:
    job = submit(slurm_cluster, "-p", "gpu", "-w", "hgx-1", "--gres=gpu:8", "--wrap", "true")
    assert wait_job_state(slurm_cluster, job, {"COMPLETED", "FAILED"}) == "COMPLETED"


def test_small_gpu_jobs_share_a_node(slurm_cluster: LocalSlurm) -> None:
    # Without a memory default each job would hold the node's whole RealMemory.
    jobs = [
        submit(slurm_cluster, "-N1", "-w", "gpu-0015", "--gres=gpu:1", "--wrap", "sleep 20")
        for _ in range(4)
    ]
    try:
        for job in jobs:
            wait_job_state(slurm_cluster, job, {"RUNNING"}, timeout=30)
    finally:
        slurm_cluster.run("scancel", *jobs, check=False)
