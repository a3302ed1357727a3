"""Choosing NVLink blocks from per-block counts: the core shared by placer and simulator.

Works on plain counts (how many usable nodes each block has) so that the
simulator's Slurm side, which tracks counts per block, and the placement
engine, which derives them from a snapshot, make the same choice.

Rules (issue 7): a gang never spans more blocks than the minimum the counts
allow; large gangs take whole (fullest) blocks; the remainder, and small gangs,
go to the block that fits most tightly (best fit, as in bin packing: it keeps
large free blocks whole and reduces fragmentation); ties break on a caller
supplied key, so the result never depends on input order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockTake:
    """Take `nodes` usable nodes from the block at `index` of the caller's sequence."""

    index: int
    nodes: int


def min_blocks_needed(counts: Sequence[int], nodes: int) -> int | None:
    """Fewest blocks whose counts add up to `nodes`, or None if all of them do not."""
    if nodes <= 0:
        return 0
    total = 0
    for used, count in enumerate(sorted(counts, reverse=True), start=1):
        if count <= 0:
            break
        total += count
        if total >= nodes:
            return used
    return None


def choose_blocks(
    counts: Sequence[int],
    nodes: int,
    *,
    single_block: bool,
    order: Sequence[int] | None = None,
    affinity: Sequence[str] | None = None,
) -> tuple[BlockTake, ...] | None:
    """Pick blocks for a gang of `nodes`, or None when the counts cannot hold it.

    `order[i]` is block i's tie-break rank (e.g. its position by name); by default
    the index itself. `affinity[i]`, when given, names the network group (e.g.
    the leaf switch) of block i: the remainder block prefers a group already used.
    """
    rank = order if order is not None else range(len(counts))
    if single_block:
        return _best_fit_one(counts, nodes, rank)
    needed = min_blocks_needed(counts, nodes)
    if needed is None:
        return None
    if needed == 1:
        return _best_fit_one(counts, nodes, rank)
    # Whole (fullest) blocks for all but the last; the sum of the `needed`
    # largest counts reaches `nodes`, so some other block holds the remainder.
    by_size = sorted(
        (i for i in range(len(counts)) if counts[i] > 0), key=lambda i: (-counts[i], rank[i])
    )
    whole = by_size[: needed - 1]
    remainder = nodes - sum(counts[i] for i in whole)
    groups = {affinity[i] for i in whole} if affinity is not None else set()
    taken = set(whole)
    best: tuple[int, int, int, int] | None = None
    for i in by_size[needed - 1 :]:
        count = counts[i]
        if count < remainder:
            break  # sorted by size: nothing further fits
        near = 0 if affinity is not None and affinity[i] in groups else 1
        key = (count - remainder, near, rank[i], i)
        if best is None or key < best:
            best = key
    if best is None or best[3] in taken:  # unreachable by the argument above
        return None
    takes = [BlockTake(i, counts[i]) for i in whole]
    takes.append(BlockTake(best[3], remainder))
    return tuple(takes)


def _best_fit_one(
    counts: Sequence[int], nodes: int, rank: Sequence[int]
) -> tuple[BlockTake, ...] | None:
    best: tuple[int, int, int] | None = None
    for i, count in enumerate(counts):
        if count >= nodes:
            key = (count - nodes, rank[i], i)
            if best is None or key < best:
                best = key
    if best is None:
        return None
    return (BlockTake(best[2], nodes),)
