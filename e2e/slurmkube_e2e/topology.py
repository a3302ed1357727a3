"""Topology e2e: a cluster over simulated and local nodes, and Slurm's topology read back.

`topology.conf` (as rendered into the ConfigMap for Slurm 24.11) and `scontrol
show topology` (what slurmctld has in force) both name each block as
`BlockName=<name> ... Nodes=<hostlist>`, so one parser serves both and a test
can tell "rendered" from "applied". For 25.05+ the ConfigMap holds
topology.yaml instead, whose `nvlink` topology holds the blocks
(`rendered_blocks` reads either).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from slurmkube.slurm.hostlist import expand
from slurmkube.slurm.topology_text import TopologyRecord, parse_topology, parse_topology_yaml
from slurmkube_e2e import fleet
from slurmkube_e2e.cluster import wait_nodes_ready
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator_cluster import (
    API,
    LOCAL,
    docs,
    in_ctld,
    pod_log,
    ready_cluster,
    slurm_image,
)
from slurmkube_e2e.waiting import wait_for

HOSTNAME = "kubernetes.io/hostname"

# slurmctld's PID by its argv[0] (`pgrep -x` would need procps, which the Slurm
# image lacks): Debian's 26.05 re-executes itself as slurmctld-wlm on a
# reconfigure, so its comm changes and its argv does not.
_PID_OF_SLURMCTLD = (
    "for p in /proc/[0-9]*; do "
    '[ "$(basename "$(head -zn1 "$p/cmdline" 2>/dev/null | tr -d \'\\0\')")" = slurmctld ] '
    '&& echo "${p#/proc/}"; done; true'
)

_BLOCK = re.compile(r"^\s*BlockName=(\S+)(?:\s.*)?\sNodes=(\S+)", re.MULTILINE)


def parse_blocks(text: str) -> dict[str, frozenset[str]]:
    """{block name: its nodes} of every `BlockName=` line in text."""
    return {m.group(1): frozenset(expand(m.group(2))) for m in _BLOCK.finditer(text)}


def topology_file(data: Mapping[str, str]) -> str:
    """The rendered topology file in a config ConfigMap's data: topology.yaml
    (Slurm 25.05+) or topology.conf (24.11)."""
    return data.get("topology.yaml") or data["topology.conf"]


def rendered_blocks(data: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """{block name: its nodes} the config ConfigMap's topology file renders."""
    if "topology.yaml" in data:
        nvlink = parse_topology_yaml(data["topology.yaml"]).get("nvlink", {})
        return {name: frozenset(record.nodes) for name, record in nvlink.items()}
    return parse_blocks(data.get("topology.conf", ""))


# The named topology of topology.yaml that holds what a 24.11 plugin holds.
_NAMED = {"block": "nvlink", "tree": "network"}


def applied_says(message: str, plugin: str, count: str) -> bool:
    """Does a TopologyApplied message say the topology file is in force with
    `count` (e.g. "4 blocks") for `plugin` (block, tree), in the form the suite's
    Slurm reads? topology.conf names the plugin (24.11, the cluster default),
    topology.yaml (25.05+) its default topology first (plan/topology_status.py)."""
    image = slurm_image()
    if image is None or image.rsplit(":", 1)[1].startswith("24.11"):
        return f"(topology/{plugin}, {count}) in force" in message
    return f"(default {_NAMED[plugin]}: {count}" in message and message.endswith(") in force")


def slurm_blocks(namespace: str) -> dict[str, frozenset[str]]:
    """The blocks slurmctld has in force (`scontrol show topology` in its pod)."""
    return parse_blocks(in_ctld(namespace, "scontrol", "show", "topology"))


def slurm_topology(namespace: str) -> dict[str, TopologyRecord]:
    """Every block or switch slurmctld has in force, with its nodes and switches."""
    return parse_topology(in_ctld(namespace, "scontrol", "show", "topology"))


def ctld_identity(kube: Kube, namespace: str) -> tuple[str, str]:
    """(pod UID, slurmctld PID): both survive an in-place reconfigure."""
    pod = kube.get("v1", "Pod", "local-slurmctld-0", namespace=namespace)
    assert pod is not None
    return pod["metadata"]["uid"], in_ctld(namespace, "sh", "-c", _PID_OF_SLURMCTLD).strip()


def reloads(namespace: str) -> int:
    """How many `scontrol reconfigure` the slurmctld pod's config reloader has run."""
    log = pod_log(namespace, "local-slurmctld-0", "config-reloader")
    return log.count("reconfigured config-hash=")


def block_of(blocks: dict[str, frozenset[str]], node: str) -> str | None:
    return next((name for name, nodes in blocks.items() if node in nodes), None)


def cluster_docs(
    namespace: str, sim_fleet: str, local_nodes: Mapping[str, Any], topology: Manifest
) -> list[Manifest]:
    """SlurmCluster `local` with `topology`; NodeSet `local` on `local_nodes` (real
    slurmd, the only partition, so jobs run there); NodeSet `sim` over the simulated
    fleet with zero replicas (State=CLOUD: in slurm.conf and topology.conf, no slurmd)."""
    cluster, local = docs(namespace, replicas=len(local_nodes))
    cluster["spec"]["topology"] = topology
    cluster["spec"]["partitions"] = [{"name": "local", "nodeSets": ["local"], "default": True}]
    local["spec"]["nodeSelector"] = {
        "matchLabels": LOCAL,
        "matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": sorted(local_nodes)}],
    }
    sim: Manifest = {
        "apiVersion": API,
        "kind": "NodeSet",
        "metadata": {"name": "sim", "namespace": namespace},
        "spec": {
            "clusterRef": "local",
            "nodeSelector": {"matchLabels": {fleet.FLEET_LABEL: sim_fleet}},
            "replicas": 0,
        },
    }
    return [cluster, local, sim]


@contextmanager
def fleet_cluster(
    kube: Kube,
    kubeconfig: Path,
    namespace: str,
    spec: fleet.FleetSpec,
    *,
    sim_labels: Callable[[fleet.SimulatedNode], dict[str, str]],
    local_labels: Mapping[str, dict[str, str]],
    topology: Manifest,
) -> Iterator[None]:
    """A Ready cluster (`cluster_docs`) over kwok nodes of `spec` and labelled local
    nodes; afterwards the namespace and the kwok nodes are gone and the local nodes'
    labels are as they were."""
    restore: dict[str, dict[str, str | None]] = {}
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        for sim in fleet.layout(spec):
            manifest = fleet.node_manifest(spec, sim)
            manifest["metadata"]["labels"] |= sim_labels(sim)
            kube.create(manifest)
        wait_nodes_ready(kubeconfig, [n.name for n in fleet.layout(spec)], timeout=120)
        for node, labels in local_labels.items():
            before = (kube.get("v1", "Node", node) or {}).get("metadata", {}).get("labels") or {}
            restore[node] = {key: before.get(key) for key in labels}
            kube.patch("v1", "Node", node, {"metadata": {"labels": labels}})
        wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
        for doc in cluster_docs(namespace, spec.name, local_labels, topology):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        yield
    finally:
        delete_namespace(kube, namespace)
        for sim in fleet.layout(spec):
            kube.delete("v1", "Node", sim.name)
        # As found: a key the local runtime set (nvidia.com/gpu.clique) is set
        # only when it registers its nodes, so it must be put back here.
        for node, found in restore.items():
            kube.patch("v1", "Node", node, {"metadata": {"labels": found}})
