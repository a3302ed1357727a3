"""Stranded GPUs per NVLink domain: free, wanted, and yet unusable by any queued gang.

A free GPU of a healthy node that is not changing owner is *stranded* when at
least one queued gang could run on that node's side of its pool (the ledger's
test for fragmentation: same pool, and the node owned by the gang's side or
empty and transferable) but none of those gangs can be placed now with a
member on that node, because

- the node has fewer free GPUs than a member needs, or
- the free capacity the gang could use is too small for all its members: in
  the node's NVLink domain for a gang that must sit in one domain, in the
  whole pool otherwise. A Slurm member takes a whole node; Kubernetes members
  (pods) share a node while its free GPUs last.

Gangs asking for no GPUs strand nothing; with no queued gang nothing is
stranded (free GPUs nobody asks for are idle). This is the capacity a fleet
team sees first when one small job blocks whole NVLink domains for the gangs
waiting behind it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from slurmkube.goodput.events import Side


@dataclass(frozen=True, slots=True)
class StrandNode:
    domain: str
    pool: str
    owner: Side
    transferable: bool
    free: int
    empty: bool
    usable: bool  # healthy and not changing owner


@dataclass(frozen=True, slots=True)
class StrandGang:
    pool: str
    side: Side
    members: int
    gpus_per_member: int
    single_domain: bool


def _wants(gang: StrandGang, node: StrandNode) -> bool:
    return gang.pool == node.pool and (
        node.owner is gang.side or (node.transferable and node.empty)
    )


def stranded_by_domain(nodes: Iterable[StrandNode], gangs: Iterable[StrandGang]) -> dict[str, int]:
    """Stranded GPUs by domain; every domain of a usable node with free GPUs is listed."""
    groups = Counter(n for n in nodes if n.usable and n.free > 0)
    shapes = {g for g in gangs if g.gpus_per_member > 0 and g.members > 0}
    wanted: set[StrandNode] = set()
    placeable: set[StrandNode] = set()
    for gang in shapes:
        fits = {n: c for n, c in groups.items() if _wants(gang, n)}
        wanted |= fits.keys()
        per = gang.gpus_per_member
        slots: Counter[str] = Counter()
        for node, count in fits.items():
            if node.free >= per:
                slots[node.domain] += count * (1 if gang.side is Side.SLURM else node.free // per)
        pool_slots = sum(slots.values())
        for node in fits:
            room = slots[node.domain] if gang.single_domain else pool_slots
            if node.free >= per and room >= gang.members:
                placeable.add(node)
    out = dict.fromkeys(sorted({n.domain for n in groups}), 0)
    for node, count in groups.items():
        if node in wanted and node not in placeable:
            out[node.domain] += node.free * count
    return out
