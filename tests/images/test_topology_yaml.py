"""Slurm 26.05 reads slurmkube's topology.yaml: the labels' blocks and switches in force.

slurmctld and one configless slurmd from the 26.05 image, under podman on
loopback (as test_images_smoke.py runs them), on a configuration slurmkube
rendered for `spec.slurm.version: "26.05"` from four labelled nodes: two
NVLink domains (the `nvlink` topology, the cluster default) under two leaf
switches and a spine (the `network` topology, which one partition chooses
with `Topology=`). Slurm shows each topology's blocks and switches as the
labels gave them, by the same check the operator makes (`scontrol show
topoconf`) and by `scontrol show topology <name>`; a job runs in the
partition on the network topology; a relabelled node moves switch after
`scontrol reconfigure`, which is what the config reloader runs, and another
moves block and switch at once by `scontrol update Topology=`, as the operator
moves nodes within a topology's frame.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from images import build as image_build
from slurmkube.api.models import KubeNode
from slurmkube.plan.reconfigure import topologies_shown
from slurmkube.render import plan_config, render_files
from slurmkube.slurm.arguments import node_topology_argv
from slurmkube.slurm.topology_text import TopologyRecord, parse_topology, parse_topology_yaml
from slurmkube_local.builders import CLUSTER_UUID, NodeBuilder, bundle
from slurmkube_local.local_slurm import free_ports

from .conftest import Podman
from .daemons import loopback_context, start_cluster
from .slurm_stack import wait_until

NODE = "gpu-0001"
PARTITIONS = [
    {"name": "gpu", "nodeSets": ["gpu"], "default": True},
    {"name": "net", "nodeSets": ["gpu"], "topology": "network"},
]


@pytest.fixture(scope="module")
def image() -> str:
    """The 26.05 image only: this test needs no other (cached: seconds)."""
    (built,) = image_build.cmd_build(["slurm-26.05"])
    return built.ref


def fleet(leaf_of_third: str = "leaf-02") -> list[KubeNode]:
    """gpu-0001..4: NVLink domains .1 (0001-0002) and .2 (0003-0004), leaf-01 and
    leaf-02 under spine-01; the third node's leaf is the test's to move."""
    leaves = ["leaf-01", "leaf-01", leaf_of_third, "leaf-02"]
    return [
        NodeBuilder(f"gpu-{i + 1:04d}").gpus(0).clique(i // 2 + 1).tiers(leaf, "spine-01").obj()
        for i, leaf in enumerate(leaves)
    ]


def rendered(nodes: list[KubeNode], ctl_port: int, node_port: int) -> dict[str, str]:
    context = loopback_context(ctl_port, NODE, node_port)
    extra: dict[str, Any] = {"slurm": {"version": "26.05"}, "partitions": PARTITIONS}
    config = plan_config(bundle(block_size=2, extra=extra), nodes, context)
    return dict(render_files(config).files)


def members(records: dict[str, TopologyRecord]) -> dict[str, tuple[set[str], set[str]]]:
    return {name: (set(r.nodes), set(r.switches)) for name, r in records.items()}


def test_slurm_26_05_puts_the_labels_blocks_and_switches_in_force_from_topology_yaml(
    image: str, podman: Podman, tmp_path: Path
) -> None:
    began = time.monotonic()
    ctl_port, node_port = free_ports(2)
    files = rendered(fleet(), ctl_port, node_port)
    assert "topology.conf" not in files
    assert "\nTopologyPlugin=" not in files["slurm.conf"]
    cluster = start_cluster(podman, image, tmp_path, files, node=NODE, ctl_port=ctl_port)
    ctl, etc = cluster.ctl, cluster.etc

    def scontrol(*args: str) -> str:
        return podman("exec", ctl, "scontrol", *args)

    # The operator's evidence: every rendered topology in force, unit by unit.
    wanted = parse_topology_yaml(files["topology.yaml"])
    assert sorted(wanted) == ["network", "nvlink"]
    assert topologies_shown(wanted, parse_topology_yaml(scontrol("show", "topoconf"))), scontrol(
        "show", "topoconf"
    )
    # What an admin sees: the labels' NVLink domains and tiers, by name.
    blocks = members(parse_topology(scontrol("show", "topology", "nvlink")))
    assert blocks == {
        f"{CLUSTER_UUID}.1": ({"gpu-0001", "gpu-0002"}, set()),
        f"{CLUSTER_UUID}.2": ({"gpu-0003", "gpu-0004"}, set()),
    }
    # The cluster default is spec.topology.plugin's (block).
    assert members(parse_topology(scontrol("show", "topology"))) == blocks
    switches = members(parse_topology(scontrol("show", "topology", "network")))
    assert switches == {
        "leaf-01": ({"gpu-0001", "gpu-0002"}, set()),
        "leaf-02": ({"gpu-0003", "gpu-0004"}, set()),
        # An upper switch also shows the nodes below it.
        "spine-01": ({"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"}, {"leaf-01", "leaf-02"}),
    }
    assert "Topology=network" in scontrol("show", "partition", "net")

    # A job in the partition on the network topology (the one slurmd's node).
    job = podman("exec", ctl, "srun", "-p", "net", "-w", NODE, "-t", "1", "hostname", timeout=30)
    assert job.strip() == NODE, podman.logs()

    # A relabelled node: new files, `scontrol reconfigure` (the reloader's command).
    moved = rendered(fleet(leaf_of_third="leaf-01"), ctl_port, node_port)
    for name in ("slurm.conf", "topology.yaml"):
        path = etc / name
        path.chmod(0o640)
        path.write_text(moved[name])
        path.chmod(0o440)
    scontrol("reconfigure")
    wanted = parse_topology_yaml(moved["topology.yaml"])

    def moved_in_force() -> bool:
        shown = podman("exec", ctl, "scontrol", "show", "topoconf", check=False)
        return bool(shown) and topologies_shown(wanted, parse_topology_yaml(shown))

    wait_until(moved_in_force, "the relabelled topology in force", podman, timeout=20)
    switches = members(parse_topology(scontrol("show", "topology", "network")))
    assert switches["leaf-01"] == ({"gpu-0001", "gpu-0002", "gpu-0003"}, set())
    assert switches["leaf-02"] == ({"gpu-0004"}, set())

    # A live move (render/live_topology.py), the CLI form: block and leaf at once.
    units = [("nvlink", f"{CLUSTER_UUID}.2"), ("network", "leaf-02")]
    scontrol(*node_topology_argv(["gpu-0002"], units))
    blocks = members(parse_topology(scontrol("show", "topology", "nvlink")))
    assert blocks[f"{CLUSTER_UUID}.2"] == ({"gpu-0002", "gpu-0003", "gpu-0004"}, set())
    switches = members(parse_topology(scontrol("show", "topology", "network")))
    assert switches["leaf-02"] == ({"gpu-0002", "gpu-0004"}, set())
    assert time.monotonic() - began < 30, "keep this test fast"
