"""`topology.conf` and `scontrol show topology` text -> the blocks and switches they name. Pure.

Both print one record per line, `BlockName=<name> ... Nodes=<hostlist>` or
`SwitchName=<name> ... Nodes=<hostlist> Switches=<hostlist>`
(topology.conf(5); scontrol(1) `show topology`), so one parser reads what
was rendered and what slurmctld has in force, and the two can be compared.
24.11 has no REST endpoint for the topology, so the text is what there is.
Keys this parser does not know (BlockIndex, Level, LinkSpeed, BlockSizes)
are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmkube.slurm.hostlist import expand

__all__ = ["TopologyRecord", "parse_topology"]


@dataclass(frozen=True, slots=True)
class TopologyRecord:
    """One block or switch: the nodes and (tree only) the switches under it."""

    nodes: frozenset[str]
    switches: frozenset[str]


def parse_topology(text: str) -> dict[str, TopologyRecord]:
    """{`BlockName`/`SwitchName` value: record} of every record line in text."""
    records: dict[str, TopologyRecord] = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        fields = dict(word.split("=", 1) for word in words if "=" in word)
        name = fields.get("BlockName") or fields.get("SwitchName")
        if not name:
            continue
        records[name] = TopologyRecord(
            frozenset(expand(fields.get("Nodes", ""))),
            frozenset(expand(fields.get("Switches", ""))),
        )
    return records
