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
from typing import Final

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


# (state, min GPUs, busy priority below); state None: any state (the capacity).
_CountKey = tuple[NodeState | None, int, int | None]


def _count(block: BlockAggregate, key: _CountKey) -> int:
    state, min_gpus, below = key
    return block.capacity(min_gpus) if state is None else block.count(state, min_gpus, below)


# A layered index is flattened once its changes exceed this share of the fleet.
_FLATTEN_SHARE: Final = 8


class _Nodes(Mapping[str, Node]):
    """Nodes by name: a shared fleet and the few nodes later reservations changed,
    so that reserving k nodes costs O(k) and not a copy of 25,000 entries. Read
    like the flat mapping it stands for, in the same order."""

    __slots__ = ("_base", "_len", "_top")

    def __init__(self, base: Mapping[str, Node], top: Mapping[str, Node]) -> None:
        self._base = base
        self._top = top
        self._len = len(base) + sum(1 for name in top if name not in base)

    def __getitem__(self, name: str) -> Node:
        node = self._top.get(name)
        return self._base[name] if node is None else node

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from (name for name in self._top if name not in self._base)

    def __len__(self) -> int:
        return self._len

    def __contains__(self, name: object) -> bool:
        return name in self._top or name in self._base

    def updated(self, changed: Mapping[str, Node]) -> _Nodes:
        top = {**self._top, **changed}
        if len(top) * _FLATTEN_SHARE > len(self._base):
            return _Nodes(MappingProxyType({**self._base, **top}), {})
        return _Nodes(self._base, top)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The fleet at one instant. Build with `Snapshot.of`; never mutated."""

    nodes: Mapping[str, Node]
    blocks: tuple[BlockAggregate, ...]
    max_gpus_per_node: int
    _block_index: Mapping[str, int] = field(repr=False)
    # Per-block counts by (state, min GPUs, busy priority below), made on first
    # use and carried to the next snapshot with only the touched blocks counted
    # again: a bridge round places hundreds of gangs of a few shapes.
    _counts: dict[_CountKey, tuple[int, ...]] = field(
        default_factory=dict, repr=False, compare=False
    )

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
    def _assemble(
        cls, by_name: Mapping[str, Node], aggregates: dict[str, BlockAggregate]
    ) -> Snapshot:
        blocks = tuple(aggregates[name] for name in sorted(aggregates))
        return cls(
            nodes=by_name if isinstance(by_name, _Nodes) else _Nodes(MappingProxyType(by_name), {}),
            blocks=blocks,
            max_gpus_per_node=max((b.all_gpus[-1] for b in blocks), default=0),
            _block_index=MappingProxyType({b.name: i for i, b in enumerate(blocks)}),
        )

    def block(self, name: str) -> BlockAggregate:
        return self.blocks[self._block_index[name]]

    def counts(
        self, state: NodeState | None, min_gpus: int, busy_priority_below: int | None = None
    ) -> tuple[int, ...]:
        """`BlockAggregate.count` (or, for state None, `capacity`) of every block, in
        `blocks` order."""
        key = (state, min_gpus, busy_priority_below)
        found = self._counts.get(key)
        if found is None:
            found = self._counts[key] = tuple(_count(b, key) for b in self.blocks)
        return found

    def with_nodes(self, changed: Iterable[Node]) -> Snapshot:
        """A snapshot where `changed` replace (or add) nodes of the same name.

        Only the blocks those nodes leave or join are recomputed, and the name
        index is layered (`_Nodes`): the cost is the touched blocks' size, not
        the fleet's.
        """
        new: dict[str, Node] = {}
        touched: dict[str, set[str]] = {}
        for node in changed:
            old = new.get(node.name) or self.nodes.get(node.name)
            if old is not None:
                touched.setdefault(old.block, set()).add(node.name)
            touched.setdefault(node.block, set()).add(node.name)
            new[node.name] = node
        if not touched:
            return self
        assert isinstance(self.nodes, _Nodes)
        by_name = self.nodes.updated(new)
        blocks = list(self.blocks)
        created: dict[str, BlockAggregate] = {}
        gone: set[str] = set()
        for name, names in touched.items():
            index = self._block_index.get(name)
            if index is not None:
                names.update(blocks[index].members)
            group = [by_name[n] for n in names if by_name[n].block == name]
            if not group:
                gone.add(name)
            elif index is None:
                created[name] = BlockAggregate.of(name, group)
            else:
                blocks[index] = BlockAggregate.of(name, group)
        gone &= set(self._block_index)
        if not created and not gone:
            # The same blocks in the same order: the block index stands, and so
            # do the counts of every block not touched.
            indexes = [self._block_index[name] for name in touched if name in self._block_index]
            counts = {}
            for key, vector in self._counts.items():
                patched = list(vector)
                for i in indexes:
                    patched[i] = _count(blocks[i], key)
                counts[key] = tuple(patched)
            # The largest node moves only if a touched block held it or gained a larger one.
            before = max((self.blocks[i].all_gpus[-1] for i in indexes), default=0)
            after = max((blocks[i].all_gpus[-1] for i in indexes), default=0)
            largest = self.max_gpus_per_node
            if after > largest or (before == largest and after < largest):
                largest = max((b.all_gpus[-1] for b in blocks), default=0)
            return Snapshot(
                nodes=by_name,
                blocks=tuple(blocks),
                max_gpus_per_node=largest,
                _block_index=self._block_index,
                _counts=counts,
            )
        aggregates = {b.name: b for b in blocks if b.name not in gone} | created
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
