"""Reading Slurm's block topology back, for e2e tests and benchmarks.

`topology.conf` (as rendered into the ConfigMap) and `scontrol show topology`
(what slurmctld has in force) both name each block as `BlockName=<name> ...
Nodes=<hostlist>`, so one parser serves both and a test can tell "rendered"
from "applied".
"""

from __future__ import annotations

import re

from slurmkube.slurm.hostlist import expand
from slurmkube_e2e.operator_cluster import in_ctld

_BLOCK = re.compile(r"^\s*BlockName=(\S+)(?:\s.*)?\sNodes=(\S+)", re.MULTILINE)


def parse_blocks(text: str) -> dict[str, frozenset[str]]:
    """{block name: its nodes} of every `BlockName=` line in text."""
    return {m.group(1): frozenset(expand(m.group(2))) for m in _BLOCK.finditer(text)}


def slurm_blocks(namespace: str) -> dict[str, frozenset[str]]:
    """The blocks slurmctld has in force (`scontrol show topology` in its pod)."""
    return parse_blocks(in_ctld(namespace, "scontrol", "show", "topology"))


def block_of(blocks: dict[str, frozenset[str]], node: str) -> str | None:
    return next((name for name, nodes in blocks.items() if node in nodes), None)
