"""The named topologies of topology.yaml, and the one each partition uses (pure).

Slurm 25.05+ reads several topologies from topology.yaml(5), each named, the
first with `cluster_default: true` used by partitions that name none; a
partition picks another with `Topology=` (slurm.conf(5)). slurmkube names the
NVLink domains as blocks `nvlink` and the switch tree `network`, and renders
each only while the fleet's labels give it a block or a switch: 26.05's
topology/block refuses a topology without blocks. `flat` (no topology) is rendered when it is
the default, or when a partition asks for it or for one the fleet left empty,
so no partition ever names a topology the file does not hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from slurmkube.api import grammar
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.topology.model import FleetTopology

NVLINK: Final = "nvlink"
NETWORK: Final = "network"
FLAT: Final = "flat"
# spec.topology.plugin -> the topology that is the cluster default.
DEFAULT_OF_PLUGIN: Final = {"block": NVLINK, "tree": NETWORK, "none": FLAT}


@dataclass(frozen=True, slots=True)
class NamedTopologies:
    """The topologies topology.yaml holds, in file order, and the cluster default."""

    names: tuple[SlurmToken, ...]
    default: SlurmToken


def named_topologies(
    topology: FleetTopology, plugin: str, asked: Iterable[str | None]
) -> NamedTopologies:
    """What the fleet fills (`topology`), with `plugin`'s topology the default when
    it is filled, and flat wherever a default or a partition (`asked`) needs it."""
    # A tree of `unknown` switches only (no node has a tier label) says nothing.
    tree = topology.switches if topology.tiers_labelled else ()
    filled = [name for name, units in ((NVLINK, topology.blocks), (NETWORK, tree)) if units]
    default = DEFAULT_OF_PLUGIN[plugin] if DEFAULT_OF_PLUGIN[plugin] in filled else FLAT
    if default == FLAT or any(a is not None and a not in filled for a in asked):
        filled.append(FLAT)
    return NamedTopologies(tuple(_token(n) for n in filled), _token(default))


def partition_topology(
    topologies: NamedTopologies | None, asked: str | None, where: str
) -> SlurmToken | None:
    """A partition's `Topology=`: what it asked for while the file holds it, else
    flat; None when it asked for nothing. `topologies` is None where the release
    reads no topology.yaml (24.11), and there a partition may ask for nothing."""
    if asked is None:
        return None
    if topologies is None:
        raise InvalidValue(
            where,
            asked,
            "no value: Topology= needs Slurm 25.05+ (topology.yaml), and the cluster "
            "renders for 24.11 (spec.slurm.version, else the tag of spec.image)",
        )
    return next((n for n in topologies.names if n == asked), _token(FLAT))


def _token(name: str) -> SlurmToken:
    return grammar.topology_name(name, "topology name")
