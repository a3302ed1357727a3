"""topology/tree follows the fleet's network-tier labels (issue 6), on real slurmctld.

Two leaf switches under one spine: the sample's nodes 0..1 (`slurm_node`:
local-0..1 on the runtime, the first real nodes with `SLURMKUBE_E2E_NODES=real`)
and 4 simulated (kwok) nodes on leaf `la`, nodes 2..3 and 4 more on leaf `lb`.
The local nodes run real slurmd
and are the only partition, so jobs run there; the simulated ones are a
NodeSet with zero replicas (State=CLOUD), in slurm.conf and the topology file
like any node. The tier labels are test keys (`spec.topology.tierLabels`), so the
runtime's own labels on its nodes never fight the test's.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmkube.slurm.hostlist import expand
from slurmkube.slurm.topology_text import TopologyRecord
from slurmkube_e2e import fleet
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator_cluster import (
    API,
    in_ctld,
    job_state,
    slurm_node,
    wait_job,
)
from slurmkube_e2e.topology import applied_says, ctld_identity, fleet_cluster, slurm_topology
from slurmkube_e2e.waiting import condition, eventually

pytestmark = pytest.mark.e2e

LEAF = "e2e.slurmkube.io/leaf"
SPINE = "e2e.slurmkube.io/spine"
HOSTNAME = "kubernetes.io/hostname"
NODE = [slurm_node(i) for i in range(4)]
LOCAL_LEAVES = {NODE[0]: "la", NODE[1]: "la", NODE[2]: "lb", NODE[3]: "lb"}


@dataclass(frozen=True)
class Tree:
    namespace: str
    # Kubernetes node -> leaf label value, as the test set it.
    leaves: dict[str, str]

    def switches(self) -> dict[str, TopologyRecord]:
        """What `scontrol show topology` should show: the leaves with their nodes, and
        the spine with its leaves (Slurm also lists the spine's nodes; not compared)."""
        below: dict[str, set[str]] = {}
        for node, leaf in self.leaves.items():
            below.setdefault(leaf, set()).add(node)
        out = {leaf: TopologyRecord(frozenset(n), frozenset()) for leaf, n in below.items()}
        out["s1"] = TopologyRecord(frozenset(), frozenset(below))
        return out


def shown_like(shown: dict[str, TopologyRecord], want: dict[str, TopologyRecord]) -> bool:
    return all(
        name in shown
        and (not w.nodes or shown[name].nodes == w.nodes)
        and shown[name].switches == w.switches
        for name, w in want.items()
    )


def label(kube: Kube, node: str, labels: dict[str, str | None]) -> None:
    kube.patch("v1", "Node", node, {"metadata": {"labels": labels}})


@pytest.fixture(scope="module")
def tree(kube: Kube, kubeconfig: Path, operator: None) -> Iterator[Tree]:
    suffix = secrets.token_hex(2)
    spec = fleet.FleetSpec(name=f"tree-{suffix}", nvl_domains=2, nodes_per_domain=4)
    sim_leaves = {n.name: ("la", "lb")[n.domain] for n in fleet.layout(spec)}
    namespace = f"e2e-tree-{suffix}"
    with fleet_cluster(
        kube,
        kubeconfig,
        namespace,
        spec,
        sim_labels=lambda n: {LEAF: sim_leaves[n.name], SPINE: "s1"},
        local_labels={node: {LEAF: leaf, SPINE: "s1"} for node, leaf in LOCAL_LEAVES.items()},
        topology={"plugin": "tree", "tierLabels": [LEAF, SPINE]},
    ):
        yield Tree(namespace, sim_leaves | LOCAL_LEAVES)


def wait_switches(tree: Tree) -> dict[str, TopologyRecord]:
    want = tree.switches()
    return eventually(
        f"scontrol show topology to show switches {sorted(want)}",
        lambda: slurm_topology(tree.namespace),
        lambda shown: shown_like(shown, want),
        timeout=90,
    )


def test_scontrol_shows_a_leaf_switch_per_label_value_under_one_spine(
    kube: Kube, tree: Tree
) -> None:
    shown = wait_switches(tree)
    assert shown["s1"].switches == {"la", "lb"}
    assert {NODE[0], NODE[1]} < shown["la"].nodes and len(shown["la"].nodes) == 6
    cluster = kube.get(API, "SlurmCluster", "local", namespace=tree.namespace)
    applied = condition(cluster, "TopologyApplied")
    assert applied is not None and applied["status"] == "True"
    assert applied_says(applied["message"], "tree", "3 switches")


def test_a_relabelled_node_moves_to_its_new_leaf_live_and_a_switches_job_follows(
    kube: Kube, tree: Tree
) -> None:
    ns = tree.namespace
    running = in_ctld(ns, "sbatch", "--parsable", "-w", NODE[0], "--wrap", "sleep 600").strip()
    wait_job(ns, running, {"RUNNING"})
    before = ctld_identity(kube, ns)
    label(kube, NODE[1], {LEAF: "lb"})
    tree.leaves[NODE[1]] = "lb"
    shown = wait_switches(tree)
    assert shown["lb"].nodes >= {NODE[1], NODE[2], NODE[3]}
    # In place: same pod, same slurmctld process, the job still running.
    assert ctld_identity(kube, ns) == before
    assert job_state(ns, running)[0] == "RUNNING"
    # Three real nodes under one leaf exist only since the move. Node 0 still has
    # free CPUs (its job takes one), so a placement blind to the tree would take
    # nodes 0-2; under one switch it must be nodes 1-3.
    job = in_ctld(ns, "sbatch", "--parsable", "-N3", "--switches=1", "--wrap", "srun hostname")
    job = job.strip()
    assert set(expand(wait_job(ns, job, {"COMPLETED"}))) == {NODE[1], NODE[2], NODE[3]}
    in_ctld(ns, "scancel", running)
