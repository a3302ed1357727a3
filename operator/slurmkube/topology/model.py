"""Node labels -> one fleet topology model, shared by Slurm and Kueue outputs.

Two stages, so pod churn never reorders anything: (1) group nodes by the
labels alone (NVLink domain, network tier path), (2) order the groups by that
network position and name. The same fleet always yields the same model, and
adding a node touches only the block or switch it joins.

Fallbacks, so one bad or missing label never breaks the whole cluster:
- a node without a (valid) NVLink domain label is in no block, and so is a
  domain smaller than the base block size (slurmctld refuses such a block);
  both are counted and reported. The default base is the size that puts the
  most nodes into base blocks (`default_base_block_size`), so a degraded rack
  lowers the base instead of dropping out;
- a node without a tier label hangs under an `unknown` switch at that tier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from slurmkube.api import grammar
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.api.models import TopologySpec
from slurmkube.topology.fleet import FleetNode, sort_key, sorted_nodes

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
    # Some node carries a tier label: the switch tree is more than `unknown`.
    tiers_labelled: bool = False
    undersized_blocks: tuple[str, ...] = ()
    problems: tuple[LabelProblem, ...] = field(default=())


class _Labels:
    """Validates each distinct label value once: a fleet repeats few values many times."""

    def __init__(self) -> None:
        self.problems: list[LabelProblem] = []
        self._seen: dict[str, SlurmToken | None] = {}
        # A value failed since the caller last cleared it (each node is then reported).
        self.failed = False

    def get(self, node: FleetNode, key: str) -> SlurmToken | None:
        value = node.labels.get(key)
        if not value:
            return None
        try:
            return self._seen[value]
        except KeyError:
            pass
        try:
            token: SlurmToken | None = grammar.topology_name(value, "")
        except InvalidValue as err:
            token = None
            self.problems.append(
                LabelProblem(node.name, key, f"Node {node.name} label {key}: {err}")
            )
            self.failed = True
            return None  # not cached: every node with the bad value is reported
        self._seen[value] = token
        return token


@dataclass(frozen=True, slots=True)
class _Combination:
    """One combination of tier and NVLink domain label values, as read, and the
    lists a node with it joins."""

    path: tuple[str, ...]
    on_path: list[SlurmToken]
    tiers_unknown: bool
    in_domain: list[SlurmToken] | None


def build_topology(nodes: Iterable[FleetNode], spec: TopologySpec) -> FleetTopology:
    """The topology of `nodes` as `spec` says to read it from their labels."""
    labels = _Labels()
    tiers = tuple(spec.tier_labels)
    domain_key = spec.nvlink_domain_label
    domains: dict[str, list[SlurmToken]] = {}
    paths: dict[SlurmToken, tuple[str, ...]] = {}
    without_domain: list[str] = []
    without_tiers: list[str] = []
    by_path: dict[tuple[str, ...], list[SlurmToken]] = {}
    keys = (*tiers, domain_key)
    # A fleet repeats few combinations of these values: read each combination
    # once, and keep the lists its nodes join (the per-node work of every config).
    read: dict[tuple[str | None, ...], _Combination] = {}
    for node in sorted_nodes(nodes):
        values = tuple(map(node.labels.get, keys))
        known = read.get(values)
        if known is None:
            path = tuple(labels.get(node, key) or UNKNOWN for key in tiers)
            domain = labels.get(node, domain_key)
            known = _Combination(
                path,
                by_path.setdefault(path, []),
                UNKNOWN in path,
                None if domain is None else domains.setdefault(domain, []),
            )
            if not labels.failed:
                read[values] = known
            labels.failed = False
        name = node.name
        paths[name] = known.path
        known.on_path.append(name)
        if known.tiers_unknown:
            without_tiers.append(name)
        if known.in_domain is None:
            without_domain.append(name)
        else:
            known.in_domain.append(name)

    blocks, sizes, undersized = _blocks(domains, paths, spec.block_size)
    switches = _switches(by_path, tiers) if tiers else ()
    return FleetTopology(
        blocks=blocks,
        block_sizes=sizes,
        switches=switches,
        tier_labels=tiers,
        nodes_without_domain=tuple(without_domain),
        nodes_without_tiers=tuple(without_tiers),
        tiers_labelled=any(v != UNKNOWN for path in set(paths.values()) for v in path),
        undersized_blocks=undersized,
        problems=tuple(labels.problems),
    )


def _blocks(
    domains: dict[str, list[SlurmToken]],
    paths: dict[SlurmToken, tuple[str, ...]],
    block_size: int | None,
) -> tuple[tuple[Block, ...], tuple[int, ...], tuple[str, ...]]:
    if not domains:
        return (), (), ()
    base = block_size or default_base_block_size(len(members) for members in domains.values())

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
        Block(name=SlurmToken(name), nodes=tuple(members))
        for name, members in ordered
        if len(members) >= base
    )
    if not blocks:
        return (), (), undersized
    sizes = [base]
    while sizes[-1] * 2 <= base * len(blocks):
        sizes.append(sizes[-1] * 2)
    return blocks, tuple(sizes), undersized


def default_base_block_size(domain_sizes: Iterable[int]) -> int:
    """The base block size that offers base-size segments the most nodes.

    A base of `b` puts `b x (domains of at least b nodes)` nodes in base blocks;
    the best `b` is always some domain's size, ties go to the larger base
    (fewer, larger segments). Domains of 18 and 16 nodes give 16: both racks
    stay in the topology, where the largest domain (18) would leave a rack
    with two trays missing out of it entirely. A larger block is accepted as it
    is (topology.conf(5) BlockSizes: "Each block must have at least the
    planning base block size count of nodes").
    """
    sizes = sorted(domain_sizes, reverse=True)
    if not sizes:
        raise ValueError("no NVLink domain to size a block from")
    # sizes[i] is the (i+1)-th largest domain: i+1 domains have at least sizes[i] nodes.
    return max((size * (i + 1), size) for i, size in enumerate(sizes))[1]


def _switches(
    by_path: dict[tuple[str, ...], list[SlurmToken]], tiers: Sequence[str]
) -> tuple[Switch, ...]:
    """`by_path`: the nodes of each tier path (leaf first). Work per distinct
    path: a fleet has a handful per leaf switch."""
    depth = len(tiers)

    # The switch a value names at tier i; values seen on two tiers get the
    # tier's short name as prefix so SwitchNames stay unique.
    seen: dict[str, set[int]] = {ROOT: {depth}}
    for path in by_path:
        for i, value in enumerate(path):
            seen.setdefault(value, set()).add(i)

    def name(value: str, tier: int) -> SlurmToken:
        if len(seen[value]) == 1:
            return SlurmToken(value)
        short = tiers[tier].rsplit("/", 1)[-1] if tier < depth else "top"
        return grammar.topology_name(f"{short}-{value}", f"switch at tier {tier}")

    children: list[dict[SlurmToken, list[SlurmToken]]] = [{} for _ in range(depth)]
    parents: list[dict[SlurmToken, Counter[SlurmToken]]] = [{} for _ in range(depth)]
    for path, members in by_path.items():
        names = [name(value, i) for i, value in enumerate(path)]
        children[0].setdefault(names[0], []).extend(members)
        for i in range(depth - 1):
            parents[i].setdefault(names[i], Counter())[names[i + 1]] += len(members)

    # Inconsistent labels (one leaf under two spines) resolve to the spine most
    # of the leaf's nodes name, ties by name: a tree has one parent per switch.
    for i in range(depth - 1):
        for here, votes in parents[i].items():
            top = max(votes.values())
            parent = min(p for p, c in votes.items() if c == top)
            children[i + 1].setdefault(parent, []).append(here)

    switches: list[Switch] = []
    for i in range(depth):
        for sw in sorted(children[i], key=sort_key):
            below = tuple(sorted(children[i][sw], key=sort_key))
            if i == 0:
                switches.append(Switch(name=sw, tier=0, nodes=below))
            else:
                switches.append(Switch(name=sw, tier=i, switches=below))
    tops = sorted(children[depth - 1], key=sort_key)
    if len(tops) > 1:
        # Jobs can only span nodes under one switch (topology.conf(5)), so
        # several top-tier switches get a common root.
        switches.append(Switch(name=name(ROOT, depth), tier=depth, switches=tuple(tops)))
    return tuple(switches)
