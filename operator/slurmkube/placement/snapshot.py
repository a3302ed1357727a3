"""A frozen view of the fleet with per-block aggregates computed once.

A decision must take under 10 ms on 10,000 nodes (DESIGN.md §7), so the work
that does not depend on the request happens here, once per snapshot: nodes are
grouped by NVLink block and, inside a block, by state in preference order and
sorted, with their GPU counts kept sorted for counting by bisection. A decision
then costs O(blocks), not O(nodes log nodes).

Reservations return a new snapshot that shares every untouched block, so the
bridge can place several workloads in one reconcile, and the simulator can keep
a live view, without rebuilding the fleet.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from slurmkube.placement.model import Decision, Node, NodeState


def _busy_order(node: Node) -> tuple[int, float, str]:
    # Lowest-priority jobs first (the cheapest to wait for or requeue), then the
    # one expected to end first; the name makes the order total.
    return (node.busy_priority, node.busy_until, node.name)


@dataclass(frozen=True, slots=True)
class BlockAggregate:
    """One NVLink block: its usable nodes by state, each in preference order."""

    name: str
    tier_path: tuple[str, ...]
    free: tuple[Node, ...]
    idle: tuple[Node, ...]
    busy: tuple[Node, ...]
    members: tuple[str, ...]  # every node of the block, any state, by name
    # Ascending GPU counts, for "how many nodes have at least g GPUs" by bisection.
    free_gpus: tuple[int, ...]
    idle_gpus: tuple[int, ...]
    busy_gpus: tuple[int, ...]
    all_gpus: tuple[int, ...]

    @classmethod
    def of(cls, name: str, nodes: Iterable[Node]) -> BlockAggregate:
        members = sorted(nodes, key=lambda n: n.name)
        free = tuple(n for n in members if n.state is NodeState.FREE)
        idle = tuple(n for n in members if n.state is NodeState.IDLE)
        busy = tuple(sorted((n for n in members if n.state is NodeState.BUSY), key=_busy_order))
        return cls(
            name=name,
            tier_path=members[0].tier_path if members else (),
            free=free,
            idle=idle,
            busy=busy,
            members=tuple(n.name for n in members),
            free_gpus=tuple(sorted(n.gpus for n in free)),
            idle_gpus=tuple(sorted(n.gpus for n in idle)),
            busy_gpus=tuple(sorted(n.gpus for n in busy)),
            all_gpus=tuple(sorted(n.gpus for n in members)),
        )

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def leaf(self) -> str:
        """The lowest switch above the block ("" if the fleet has no tiers)."""
        return self.tier_path[0] if self.tier_path else ""

    def count(self, state: NodeState, min_gpus: int, busy_priority_below: int | None) -> int:
        """Nodes in `state` with at least `min_gpus` GPUs (and, if busy, low enough priority)."""
        if state is NodeState.BUSY and busy_priority_below is not None:
            return sum(
                1 for n in self.busy if n.gpus >= min_gpus and n.busy_priority < busy_priority_below
            )
        gpus = self._gpus(state)
        if not gpus or gpus[0] >= min_gpus:
            return len(gpus)
        return len(gpus) - bisect_left(gpus, min_gpus)

    def capacity(self, min_gpus: int) -> int:
        """Nodes of any state with at least `min_gpus` GPUs: what the block could ever give."""
        gpus = self.all_gpus
        return len(gpus) - bisect_left(gpus, min_gpus)

    def nodes_in(self, state: NodeState) -> tuple[Node, ...]:
        if state is NodeState.FREE:
            return self.free
        if state is NodeState.IDLE:
            return self.idle
        if state is NodeState.BUSY:
            return self.busy
        return ()

    def _gpus(self, state: NodeState) -> tuple[int, ...]:
        if state is NodeState.FREE:
            return self.free_gpus
        if state is NodeState.IDLE:
            return self.idle_gpus
        if state is NodeState.BUSY:
            return self.busy_gpus
        return ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The fleet at one instant. Build with `Snapshot.of`; never mutated."""

    nodes: Mapping[str, Node]
    blocks: tuple[BlockAggregate, ...]
    max_gpus_per_node: int
    _block_index: Mapping[str, int] = field(repr=False)

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> Snapshot:
        by_name: dict[str, Node] = {}
        for node in nodes:
            if node.name in by_name:
                raise ValueError(f"node {node.name!r} appears twice in the snapshot")
            by_name[node.name] = node
        members: dict[str, list[Node]] = {}
        for node in by_name.values():
            members.setdefault(node.block, []).append(node)
        aggregates = {name: BlockAggregate.of(name, group) for name, group in members.items()}
        return cls._assemble(by_name, aggregates)

    @classmethod
    def _assemble(cls, by_name: dict[str, Node], aggregates: dict[str, BlockAggregate]) -> Snapshot:
        blocks = tuple(aggregates[name] for name in sorted(aggregates))
        return cls(
            nodes=MappingProxyType(by_name),
            blocks=blocks,
            max_gpus_per_node=max((b.all_gpus[-1] for b in blocks), default=0),
            _block_index=MappingProxyType({b.name: i for i, b in enumerate(blocks)}),
        )

    def block(self, name: str) -> BlockAggregate:
        return self.blocks[self._block_index[name]]

    def with_nodes(self, changed: Iterable[Node]) -> Snapshot:
        """A snapshot where `changed` replace (or add) nodes of the same name.

        Only the blocks those nodes leave or join are recomputed; the cost is
        their size plus one copy of the name index.
        """
        by_name = dict(self.nodes)
        touched: dict[str, set[str]] = {}
        for node in changed:
            old = by_name.get(node.name)
            if old is not None:
                touched.setdefault(old.block, set()).add(node.name)
            touched.setdefault(node.block, set()).add(node.name)
            by_name[node.name] = node
        if not touched:
            return self
        aggregates = {b.name: b for b in self.blocks}
        for name, names in touched.items():
            old_block = aggregates.pop(name, None)
            if old_block is not None:
                names.update(old_block.members)
            group = [by_name[n] for n in names if by_name[n].block == name]
            if group:
                aggregates[name] = BlockAggregate.of(name, group)
        return Snapshot._assemble(by_name, aggregates)

    def reserve(self, decision: Decision) -> Snapshot:
        """The snapshot after `decision`'s nodes are leased: they are LENT from now on.

        Reversible by `with_nodes` with the nodes' earlier values (the
        framework's Unreserve).
        """
        if not decision.placed:
            return self
        return self.with_nodes(
            replace(self.nodes[name], state=NodeState.LENT) for name in decision.nodes
        )

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)
