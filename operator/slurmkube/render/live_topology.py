"""Node moves between existing topology units, applied without a reconfigure (pure).

On a release that moves nodes live (`SlurmVersion.moves_nodes_live`), `scontrol
update NodeName=<nodes> Topology=<topology>:<unit>[,...]` puts nodes into a
block or leaf switch slurmctld already holds, at once; a reconfigure of a
10,000-node slurmctld takes seconds more than the 1 s a relabel has to reach
Slurm (docs/benchmarks.md). Slurm refuses a block it does not hold, so only
the nodes change here: a new or vanished unit, other block sizes or another
set of placed nodes is a new `frame`, and the frame, not the node lists, is
what the reconfigure hash covers. The file still lists every node where it
is, so a slurmctld that starts or reconfigures reads the same placement.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import chain

from slurmkube.render.config import SlurmConfig
from slurmkube.render.topologies import NETWORK, NVLINK

# (topology name, block or leaf switch name): one `Topology=` entry.
Unit = tuple[str, str]
Units = tuple[Unit, ...]


@dataclass(frozen=True, slots=True)
class Move:
    """Nodes that go to the same units: one `scontrol update` (or REST POST)."""

    nodes: tuple[str, ...]
    units: Units


def units_of(config: SlurmConfig) -> dict[str, Units]:
    """Each placed node -> its unit in every named topology that places nodes."""
    named = set(config.topologies.names)
    topo = config.topology
    # One unit tuple per block or switch and one Units per combination, shared by
    # its nodes: at 25,000 nodes, a tuple per node costs the garbage collector
    # ten times what the walk costs.
    block: dict[str, Unit] = {}
    if NVLINK in named:
        for b in topo.blocks:
            block.update(dict.fromkeys(b.nodes, (NVLINK, str(b.name))))
    leaf: dict[str, Unit] = {}
    if NETWORK in named:
        for s in topo.switches:
            leaf.update(dict.fromkeys(s.nodes, (NETWORK, str(s.name))))
    shared: dict[tuple[Unit | None, Unit | None], Units] = {}
    placed: dict[str, Units] = {}
    for node in chain(block, (n for n in leaf if n not in block)):
        key = (block.get(node), leaf.get(node))
        units = shared.get(key)
        if units is None:
            units = shared[key] = tuple(u for u in key if u is not None)
        placed[node] = units
    return placed


def units_in_file(placed: Mapping[str, Mapping[str, Iterable[str]]]) -> dict[str, Units]:
    """`units_of` for the nodes of a topology file as read back ({topology: {unit: nodes}})."""
    places: dict[str, list[Unit]] = defaultdict(list)
    for topology in (NVLINK, NETWORK):
        for unit, nodes in sorted(placed.get(topology, {}).items()):
            for node in nodes:
                places[node].append((topology, unit))
    return {node: tuple(units) for node, units in places.items()}


def frame(config: SlurmConfig) -> str:
    """The topology file less which unit each node is in: what a live move cannot
    change. The units keep their file order: Slurm makes larger blocks of
    neighbouring ones."""
    named = set(config.topologies.names)
    topo = config.topology
    shape: dict[str, object] = {
        "topologies": [str(n) for n in config.topologies.names],
        "default": str(config.topologies.default),
    }
    if NVLINK in named:
        shape[NVLINK] = {
            "block_sizes": list(topo.block_sizes),
            "blocks": [str(b.name) for b in topo.blocks],
            "nodes": sorted(n for b in topo.blocks for n in b.nodes),
        }
    if NETWORK in named:
        shape[NETWORK] = {
            "switches": [
                [str(s.name), s.tier, [str(c) for c in s.switches]] for s in topo.switches
            ],
            "nodes": sorted(n for s in topo.switches for n in s.nodes),
        }
    return json.dumps(shape, sort_keys=True)


def moves(before: Mapping[str, Units], after: Mapping[str, Units]) -> tuple[Move, ...]:
    """The updates that take Slurm from `before` to `after` (as `units_of`), nodes
    grouped by where they go. Meant for two configs of one frame: a node placed
    in one and not the other is not a move."""
    going: dict[Units, list[str]] = defaultdict(list)
    for node, units in after.items():
        if before.get(node, units) != units:
            going[units].append(node)
    return _grouped(going)


def before_reconfigure(
    before: Mapping[str, Units], after: Mapping[str, Units], overridden: Iterable[str]
) -> tuple[Move, ...]:
    """The updates to send before a reconfigure to `after` while Slurm holds a
    live move's `Topology=` for the `overridden` nodes. slurmctld 26.05 keeps
    that override in its state and, at its next start, puts the node there over
    what the files say; one naming a unit the files no longer hold stops it
    ("Requested topology configuration is not available"). So each such node
    goes now where `after` puts it if Slurm holds those units (`before`), else
    out of every unit (`Move.units` empty: no override left, the files place it)."""
    held = {unit for units in before.values() for unit in units}
    going: dict[Units, list[str]] = defaultdict(list)
    for node in overridden:
        units = after.get(node, ())
        going[units if all(u in held for u in units) else ()].append(node)
    return _grouped(going)


def _grouped(going: Mapping[Units, Iterable[str]]) -> tuple[Move, ...]:
    """One Move per destination, in a stable order."""
    return tuple(Move(tuple(sorted(nodes)), units) for units, nodes in sorted(going.items()))


def still_overridden(sent: Iterable[Move]) -> frozenset[str]:
    """The nodes `sent` leaves with an override in Slurm's state."""
    return frozenset(n for move in sent if move.units for n in move.nodes)


def override_drift(
    shown: Mapping[str, str], wanted: Mapping[str, Units], overridden: frozenset[str]
) -> tuple[frozenset[str], frozenset[str]]:
    """Slurm's own account of the overrides (`shown`: each node's `topology`, ""
    for none) against the operator's (`overridden`): the nodes holding one it
    did not count (an admin's `scontrol update`), which a reconfigure must settle
    too, and the nodes to move again, being elsewhere than `wanted` puts them
    while Slurm or the operator says they were moved. slurmctld drops a node's
    override and puts it back where it was before its first move when the node
    powers down (power saving), whatever the files say now."""
    stray = frozenset(n for n, text in shown.items() if text and n not in overridden)
    off = frozenset(
        n
        for n, text in shown.items()
        if (text or n in overridden) and wanted.get(n) and _units(text) != set(wanted[n])
    )
    return stray, off


def _units(text: str) -> set[Unit]:
    """`nvlink:b1,network:leaf-2` -> its (topology, unit) pairs."""
    return {(t, u) for t, _, u in (part.partition(":") for part in text.split(",") if part)}
