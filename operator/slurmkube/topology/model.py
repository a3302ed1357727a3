"""Node labels -> one fleet topology model, shared by Slurm and Kueue outputs.

Two stages, so pod churn never reorders anything: (1) group nodes by the
labels alone (NVLink domain, network tier path), (2) order the groups by that
network position and name. The same fleet always yields the same model, and
adding a node touches only the block or switch it joins.

Fallbacks, so one bad or missing label never breaks the whole cluster:
- a node without a (valid) NVLink domain label is in no block, and so is a
  domain smaller than the base block size (slurmctld refuses such a block);
  both are counted and reported;
- a node without a tier label hangs under an `unknown` switch at that tier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from slurmkube.api import grammar
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.api.models import TopologySpec
from slurmkube.topology.fleet import FleetNode, sort_key

UNKNOWN = "unknown"
ROOT = "root"


@dataclass(frozen=True, slots=True)
class Block:
    """An NVLink domain (topology.conf(5) BlockName)."""

    name: SlurmToken
    nodes: tuple[SlurmToken, ...]


@dataclass(frozen=True, slots=True)
class Switch:
    """A network switch (topology.conf(5) SwitchName); tier 0 holds nodes."""

    name: SlurmToken
    tier: int
    nodes: tuple[SlurmToken, ...] = ()
    switches: tuple[SlurmToken, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelProblem:
    node: str
    label: str
    message: str


@dataclass(frozen=True, slots=True)
class FleetTopology:
    blocks: tuple[Block, ...]
    # BlockSizes: the base block size, then doublings while enough blocks exist.
    block_sizes: tuple[int, ...]
    switches: tuple[Switch, ...]
    # Tier label keys, leaf first (for Kueue Topology levels).
    tier_labels: tuple[str, ...]
    nodes_without_domain: tuple[str, ...] = ()
    nodes_without_tiers: tuple[str, ...] = ()
    undersized_blocks: tuple[str, ...] = ()
    problems: tuple[LabelProblem, ...] = field(default=())


def _label(node: FleetNode, key: str, problems: list[LabelProblem]) -> SlurmToken | None:
    value = node.label(key)
    if value is None or value == "":
        return None
    try:
        return grammar.topology_name(value, f"Node {node.name} label {key}")
    except InvalidValue as err:
        problems.append(LabelProblem(node.name, key, str(err)))
        return None


def _tier_path(
    node: FleetNode, tiers: Sequence[str], problems: list[LabelProblem]
) -> tuple[str, ...]:
    return tuple(_label(node, key, problems) or UNKNOWN for key in tiers)


def build_topology(nodes: Iterable[FleetNode], spec: TopologySpec) -> FleetTopology:
    """The topology of `nodes` as `spec` says to read it from their labels."""
    problems: list[LabelProblem] = []
    tiers = tuple(spec.tier_labels)
    domains: dict[str, list[SlurmToken]] = {}
    paths: dict[SlurmToken, tuple[str, ...]] = {}
    without_domain: list[str] = []
    without_tiers: list[str] = []
    for node in nodes:
        path = _tier_path(node, tiers, problems)
        paths[node.name] = path
        if UNKNOWN in path:
            without_tiers.append(node.name)
        domain = _label(node, spec.nvlink_domain_label, problems)
        if domain is None:
            without_domain.append(node.name)
        else:
            domains.setdefault(domain, []).append(node.name)

    blocks, sizes, undersized = _blocks(domains, paths, spec.block_size)
    switches = _switches(paths, tiers) if tiers else ()
    return FleetTopology(
        blocks=blocks,
        block_sizes=sizes,
        switches=switches,
        tier_labels=tiers,
        nodes_without_domain=tuple(sorted(without_domain, key=sort_key)),
        nodes_without_tiers=tuple(sorted(without_tiers, key=sort_key)),
        undersized_blocks=undersized,
        problems=tuple(sorted(problems, key=lambda p: (sort_key(p.node), p.label))),
    )


def _blocks(
    domains: dict[str, list[SlurmToken]],
    paths: dict[SlurmToken, tuple[str, ...]],
    block_size: int | None,
) -> tuple[tuple[Block, ...], tuple[int, ...], tuple[str, ...]]:
    if not domains:
        return (), (), ()
    base = block_size or max(len(members) for members in domains.values())

    # Slurm pairs *adjacent* blocks into higher-level blocks (topology.conf(5)
    # BlockSizes), so blocks that share a network position are listed together.
    def position(item: tuple[str, list[SlurmToken]]) -> tuple[object, ...]:
        name, members = item
        common = Counter(paths[m] for m in members).most_common()
        best = min(p for p, c in common if c == common[0][1])
        return (tuple(reversed(best)), sort_key(name))

    ordered = sorted(domains.items(), key=position)
    # slurmctld 24.11 exits ("children count lower than bblock_node_cnt") on a
    # block smaller than the base size, so such domains stay out of the file.
    undersized = tuple(name for name, members in ordered if len(members) < base)
    blocks = tuple(
        Block(name=SlurmToken(name), nodes=tuple(sorted(members, key=sort_key)))
        for name, members in ordered
        if len(members) >= base
    )
    if not blocks:
        return (), (), undersized
    sizes = [base]
    while sizes[-1] * 2 <= base * len(blocks):
        sizes.append(sizes[-1] * 2)
    return blocks, tuple(sizes), undersized


def _switches(
    paths: dict[SlurmToken, tuple[str, ...]], tiers: Sequence[str]
) -> tuple[Switch, ...]:
    depth = len(tiers)
    # The switch a value names at tier i; values seen on two tiers get the
    # tier's short name as prefix so SwitchNames stay unique.
    seen: dict[str, set[int]] = {}
    for path in paths.values():
        for i, value in enumerate(path):
            seen.setdefault(value, set()).add(i)
    seen.setdefault(ROOT, set()).add(depth)

    def name(value: str, tier: int) -> SlurmToken:
        if len(seen[value]) == 1:
            return SlurmToken(value)
        short = tiers[tier].rsplit("/", 1)[-1] if tier < depth else "top"
        return grammar.topology_name(f"{short}-{value}", f"switch at tier {tier}")

    children: list[dict[SlurmToken, set[SlurmToken]]] = [{} for _ in range(depth)]
    parents: list[dict[SlurmToken, Counter[SlurmToken]]] = [{} for _ in range(depth)]
    for node, path in paths.items():
        children[0].setdefault(name(path[0], 0), set()).add(node)
        for i in range(depth):
            here = name(path[i], i)
            if i + 1 < depth:
                parents[i].setdefault(here, Counter())[name(path[i + 1], i + 1)] += 1

    # Inconsistent labels (one leaf under two spines) resolve to the spine most
    # of the leaf's nodes name, ties by name: a tree has one parent per switch.
    for i in range(depth - 1):
        for here, votes in parents[i].items():
            top = max(votes.values())
            parent = min(p for p, c in votes.items() if c == top)
            children[i + 1].setdefault(parent, set()).add(here)

    switches: list[Switch] = []
    for i in range(depth):
        for sw in sorted(children[i], key=sort_key):
            members = tuple(sorted(children[i][sw], key=sort_key))
            if i == 0:
                switches.append(Switch(name=sw, tier=0, nodes=members))
            else:
                switches.append(Switch(name=sw, tier=i, switches=members))
    tops = sorted(children[depth - 1], key=sort_key)
    if len(tops) > 1:
        # Jobs can only span nodes under one switch (topology.conf(5)), so
        # several top-tier switches get a common root.
        switches.append(Switch(name=name(ROOT, depth), tier=depth, switches=tuple(tops)))
    return tuple(switches)
