"""Slurm's and Kueue's topology follow the fleet's labels (issue 6), on real slurmctld.

64 simulated (kwok) GPU nodes in 4 NVLink domains plus the sample's nodes 0..3
(`slurm_node`: local-0..3 on the runtime, the first four real nodes with
`SLURMKUBE_E2E_NODES=real`), whose slurmd pods run real daemons, two in each of
the first two domains. The
simulated nodes are a NodeSet with zero replicas (State=CLOUD): they have no
slurmd but are in slurm.conf and the topology file like any node. Jobs run on the
local nodes (partition `local`).

The domain label is the default, `nvidia.com/gpu.clique`, as GPU Feature
Discovery sets it. The local runtime and the real nodes' kubelets set their
nodes' own clique labels when they register them (not after), so the test can
move local nodes between domains; it puts their labels back afterwards.
(test_topology_tree.py reads its tiers from test keys.)
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmkube.slurm.hostlist import expand
from slurmkube_e2e import fleet
from slurmkube_e2e.builders import make_job
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.operator_cluster import (
    API,
    in_ctld,
    job_state,
    slurm_node,
    wait_job,
)
from slurmkube_e2e.topology import (
    applied_says,
    block_of,
    ctld_identity,
    fleet_cluster,
    slurm_blocks,
)
from slurmkube_e2e.waiting import (
    condition,
    eventually,
    has_condition,
    wait_for,
    wait_for_list,
    wait_gone,
)

pytestmark = pytest.mark.e2e

KUEUE = "kueue.x-k8s.io/v1beta2"
DOMAIN = fleet.CLIQUE_LABEL  # spec.topology's default nvlinkDomainLabel
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
HOSTNAME = "kubernetes.io/hostname"
# Two running slurmd nodes in each of the first two domains.
NODE = [slurm_node(i) for i in range(4)]
LOCAL_DOMAINS = {NODE[0]: "nvl0", NODE[1]: "nvl0", NODE[2]: "nvl1", NODE[3]: "nvl1"}


@dataclass(frozen=True)
class Fleet:
    namespace: str
    spec: fleet.FleetSpec
    # Kubernetes node -> domain label value, as the test set it.
    domains: dict[str, str]

    def blocks(self) -> dict[str, frozenset[str]]:
        """What the topology file should say for `domains` (every domain is above the base size)."""
        out: dict[str, set[str]] = {}
        for node, domain in self.domains.items():
            out.setdefault(domain, set()).add(node)
        return {domain: frozenset(nodes) for domain, nodes in out.items()}

    def sim(self, domain: int, index: int) -> str:
        return f"{self.spec.name}-{domain:03d}-{index:02d}"


def label_domain(kube: Kube, node: str, domain: str | None) -> None:
    kube.patch("v1", "Node", node, {"metadata": {"labels": {DOMAIN: domain}}})


@pytest.fixture(scope="module")
def topo(kube: Kube, kubeconfig: Path, operator: None) -> Iterator[Fleet]:
    suffix = secrets.token_hex(2)
    namespace = f"e2e-topology-{suffix}"
    spec = fleet.FleetSpec(name=f"topo-{suffix}", nvl_domains=4, nodes_per_domain=16)
    domains = {n.name: f"nvl{n.domain}" for n in fleet.layout(spec)}
    with fleet_cluster(
        kube,
        kubeconfig,
        namespace,
        spec,
        sim_labels=lambda n: {DOMAIN: domains[n.name]},
        local_labels={node: {DOMAIN: domain} for node, domain in LOCAL_DOMAINS.items()},
        topology={"blockSize": 8},
    ):
        yield Fleet(namespace, spec, domains | LOCAL_DOMAINS)
    # The operator deletes its cluster-scoped Kueue objects with the SlurmCluster.
    for kind in ("Topology", "ResourceFlavor"):
        wait_for_list(
            kube,
            KUEUE,
            kind,
            lambda items: not items,
            label_selector=f"slurmkube.io/namespace={namespace}",
            what="deleted with the SlurmCluster",
        )


def wait_blocks(topo: Fleet) -> dict[str, frozenset[str]]:
    expected = topo.blocks()
    return eventually(
        f"scontrol show topology to show {sorted(expected)}",
        lambda: slurm_blocks(topo.namespace),
        lambda blocks: blocks == expected,
        timeout=90,
    )


def topology_message(cluster: Manifest | None) -> str:
    found = condition(cluster, "TopologyApplied")
    return str(found["message"]) if found and found["status"] == "True" else ""


def test_scontrol_shows_one_block_per_nvlink_domain(kube: Kube, topo: Fleet) -> None:
    blocks = wait_blocks(topo)
    assert sorted(blocks) == ["nvl0", "nvl1", "nvl2", "nvl3"]
    assert {NODE[0], NODE[1]} < blocks["nvl0"] and len(blocks["nvl0"]) == 18
    assert {NODE[2], NODE[3]} < blocks["nvl1"] and len(blocks["nvl1"]) == 18
    assert blocks["nvl2"] == {topo.sim(2, i) for i in range(16)}
    cluster = kube.get(API, "SlurmCluster", "local", namespace=topo.namespace)
    assert has_condition(cluster, "TopologyValid")
    assert applied_says(topology_message(cluster), "block", "4 blocks")


def test_relabelled_nodes_form_a_new_block_live_and_a_segment_job_follows(
    kube: Kube, topo: Fleet
) -> None:
    ns = topo.namespace
    running = in_ctld(ns, "sbatch", "--parsable", "-w", NODE[0], "--wrap", "sleep 600").strip()
    wait_job(ns, running, {"RUNNING"})
    before = ctld_identity(kube, ns)
    # 8 nodes into a new domain: two running ones and three simulated from each of nvl0/nvl1.
    moved = [NODE[1], NODE[2]] + [topo.sim(d, i) for d in (0, 1) for i in (13, 14, 15)]
    for node in moved:
        label_domain(kube, node, "nvl4")
        topo.domains[node] = "nvl4"
    blocks = wait_blocks(topo)
    assert blocks["nvl4"] == frozenset(moved)
    assert len(blocks["nvl0"]) == len(blocks["nvl1"]) == 14
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda c: applied_says(topology_message(c), "block", "5 blocks"),
        namespace=ns,
        what="TopologyApplied with 5 blocks",
    )
    # In place: same pod, same slurmctld process, the job still running.
    assert ctld_identity(kube, ns) == before
    assert job_state(ns, running)[0] == "RUNNING"
    # The only block with two running nodes free is now nvl4 (nodes 1 and 2):
    # before the change a 2-node segment would have gone to nvl0 or nvl1.
    segment = in_ctld(
        ns, "sbatch", "--parsable", "-N2", "--segment=2", "--wrap", "srun hostname"
    ).strip()
    assert set(expand(wait_job(ns, segment, {"COMPLETED"}))) == {NODE[1], NODE[2]}
    in_ctld(ns, "scancel", running)


def test_a_removed_node_leaves_its_block(kube: Kube, topo: Fleet) -> None:
    gone = topo.sim(2, 15)
    kube.delete("v1", "Node", gone)
    del topo.domains[gone]
    blocks = wait_blocks(topo)
    assert block_of(blocks, gone) is None
    assert len(blocks["nvl2"]) == 15


def test_kueue_admits_a_required_topology_workload_into_one_nvlink_domain(
    kube: Kube, topo: Fleet
) -> None:
    ns = topo.namespace
    name = f"{ns}-local"
    topology = kube.get(KUEUE, "Topology", name)
    assert topology is not None
    levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
    assert levels[-2:] == [DOMAIN, HOSTNAME]
    flavor = kube.get(KUEUE, "ResourceFlavor", f"{name}-sim")
    assert flavor is not None
    assert flavor["spec"]["topologyName"] == name
    assert flavor["spec"]["nodeLabels"] == {fleet.FLEET_LABEL: topo.spec.name}

    queue = f"{ns}-cq"
    kube.apply(cluster_queue(queue, ns, flavor["metadata"]["name"]))
    try:
        kube.apply(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": "gpus", "namespace": ns},
                "spec": {"clusterQueue": queue},
            }
        )
        wait_for(kube, KUEUE, "ClusterQueue", queue, lambda q: has_condition(q, "Active"))
        # 14 pods of 4 GPUs: after the changes above only nvl2 (15) and nvl3 (16)
        # have 14 simulated nodes, so the gang fits in one domain only there.
        pods = 14
        job = make_job("gang", "gpus", gpus=4)
        job["spec"] |= {"parallelism": pods, "completions": pods}
        job["spec"]["template"]["metadata"]["annotations"][REQUIRED_TOPOLOGY] = DOMAIN
        kube.apply(job, namespace=ns)
        running = wait_for_list(
            kube,
            "v1",
            "Pod",
            lambda ps: len(ps) == pods and all(p["status"].get("phase") == "Running" for p in ps),
            namespace=ns,
            label_selector="app=gang",
            what=f"{pods} pods admitted by Kueue and Running",
            timeout=90,
        )
        domains = {topo.domains[p["spec"]["nodeName"]] for p in running}
        assert len(domains) == 1 and domains < {"nvl2", "nvl3"}, domains
    finally:
        kube.delete("batch/v1", "Job", "gang", namespace=ns)
        kube.delete(KUEUE, "LocalQueue", "gpus", namespace=ns)
        kube.delete(KUEUE, "ClusterQueue", queue)
        wait_gone(kube, KUEUE, "ClusterQueue", queue, timeout=60)


def cluster_queue(name: str, namespace: str, flavor: str) -> Manifest:
    quota = {"cpu": "1000", "memory": "10Ti", fleet.GPU_RESOURCE: 256}
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [
                {
                    "coveredResources": sorted(quota),
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": k, "nominalQuota": v} for k, v in sorted(quota.items())
                            ],
                        }
                    ],
                }
            ],
        },
    }
