"""Topology files and scontrol's topology text -> the blocks and switches they name. Pure.

Both print one record per line, `BlockName=<name> ... Nodes=<hostlist>` or
`SwitchName=<name> ... Nodes=<hostlist> Switches=<hostlist>`
(topology.conf(5); scontrol(1) `show topology`), so one parser reads what
was rendered and what slurmctld has in force, and the two can be compared.
24.11 has no REST endpoint for the topology, so the text is what there is.
Keys this parser does not know (BlockIndex, Level, LinkSpeed, BlockSizes)
are ignored.

Slurm 25.05+ reads topology.yaml(5), several named topologies, and `scontrol
show topoconf` prints the topologies in force in that format (with an empty
mapping for every plugin a topology does not use), so `parse_topology_yaml`
likewise reads both sides, per topology.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from slurmkube.slurm.hostlist import expand

__all__ = ["TopologyRecord", "parse_topology", "parse_topology_yaml"]


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


# libyaml's parser where PyYAML has it: 10,000 nodes' file in 11 ms, not 100.
# The same safe constructor either way (tests/unit/test_topology_yaml.py).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_topology_yaml(text: str) -> dict[str, dict[str, TopologyRecord]]:
    """{topology name: {block or switch name: record}} of topology.yaml(5) text.

    Raises ValueError when the text is not YAML, or not a list of named topologies.
    """
    try:
        loaded = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as err:
        raise ValueError(f"not YAML: {err}") from err
    if loaded is None:  # an empty file, or comments only
        return {}
    if not isinstance(loaded, list):
        raise ValueError(f"expected a list of topologies, got {type(loaded).__name__}")
    topologies: dict[str, dict[str, TopologyRecord]] = {}
    for topology in loaded:
        if not isinstance(topology, Mapping) or "topology" not in topology:
            raise ValueError(f"expected a topology with a name, got {str(topology)[:80]!r}")
        records: dict[str, TopologyRecord] = {}
        for block in _units(topology, "block", "blocks"):
            records[_name(block, "block")] = _record(block.get("nodes"), None)
        for switch in _units(topology, "tree", "switches"):
            records[_name(switch, "switch")] = _record(switch.get("nodes"), switch.get("children"))
        topologies[str(topology["topology"])] = records
    return topologies


def _units(topology: Mapping[str, Any], plugin: str, key: str) -> list[Mapping[str, Any]]:
    layout = topology.get(plugin)
    units = layout.get(key) if isinstance(layout, Mapping) else None
    return [u for u in units or [] if isinstance(u, Mapping)]


def _name(unit: Mapping[str, Any], key: str) -> str:
    if unit.get(key) is None:
        raise ValueError(f"a {key} without a name: {dict(unit)}")
    return str(unit[key])


def _record(nodes: object, switches: object) -> TopologyRecord:
    return TopologyRecord(
        frozenset(expand(str(nodes or ""))), frozenset(expand(str(switches or "")))
    )
