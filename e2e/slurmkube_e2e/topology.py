"""Reading Slurm's block topology back, for e2e tests and benchmarks.

`topology.conf` (as rendered into the ConfigMap) and `scontrol show topology`
(what slurmctld has in force) both name each block as `BlockName=<name> ...
Nodes=<hostlist>`, so one parser serves both and a test can tell "rendered"
from "applied".
"""

from __future__ import annotations

import re

from slurmkube.slurm.hostlist import expand
from slurmkube.slurm.topology_text import TopologyRecord, parse_topology
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator_cluster import in_ctld, pod_log

_BLOCK = re.compile(r"^\s*BlockName=(\S+)(?:\s.*)?\sNodes=(\S+)", re.MULTILINE)


def parse_blocks(text: str) -> dict[str, frozenset[str]]:
    """{block name: its nodes} of every `BlockName=` line in text."""
    return {m.group(1): frozenset(expand(m.group(2))) for m in _BLOCK.finditer(text)}


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
    return pod["metadata"]["uid"], in_ctld(namespace, "pgrep", "-x", "slurmctld").strip()


def reloads(namespace: str) -> int:
    """How many `scontrol reconfigure` the slurmctld pod's config reloader has run."""
    log = pod_log(namespace, "local-slurmctld-0", "config-reloader")
    return log.count("reconfigured config-hash=")


def block_of(blocks: dict[str, frozenset[str]], node: str) -> str | None:
    return next((name for name, nodes in blocks.items() if node in nodes), None)
