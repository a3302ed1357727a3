"""Which idle Slurm nodes to lend to Kubernetes, and which lent nodes to take back (pure).

The bridge lends a node when a Kueue workload fits no Kubernetes node; this
module decides *whether* Slurm can spare one and *which*, from plain counts
per NVLink block, so that the fleet simulator and the operator's bridge can
share it (`slurmkube_sim.lending`, and the bridge's `lending.placement_round`). The rules:

- **Lend only what Slurm's queue cannot use soon.** The nodes that are idle,
  held for Slurm's plan, or whose job's time limit ends within the horizon
  are what Slurm can count on soon; the first `queue_depth` pending Slurm jobs
  want some of them. Only the surplus is lent, unless Kubernetes holds less
  than its entitlement (its Kueue nominal quota in nodes): up to that, it is
  lent whatever Slurm waits for, as a static split would have given it.
- **Keep Kubernetes in few NVLink blocks.** A node lent from a block breaks
  that block for a single-block Slurm gang for as long as its pods run, which
  for the serving pods of a production trace is days. So lends go first to
  blocks Kubernetes already holds and Slurm does not use, then to whole idle
  blocks, and only then into blocks where Slurm runs jobs: never part of a
  busy block while a whole idle block exists.
- **Learn demand** (off unless `rate_half_life_s` is set). Each side's
  arrivals are an exponentially weighted rate (`ArrivalRate`): Slurm's
  expected node demand within the horizon is protected like its queue, and
  Kubernetes keeps lent headroom for what it expects during one lend's delay,
  so its next pods do not wait for a drain.
- **Return early.** When Slurm's queue waits for more than it can count on
  soon and Kubernetes holds more than its entitlement, the lent nodes in the
  blocks Kubernetes holds least of (where a few nodes give Slurm a whole
  block back) take no new pods and go back when their pods end; no pod is
  evicted. `reclaim` says which.

Sizes are in nodes; a node is lent whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockView:
    """One NVLink block at the moment of the decision.

    `idle` counts the idle Slurm nodes that may be lent (not held for Slurm's
    plan); `held` counts idle nodes
    Slurm's plan holds for its queue head; `busy` the nodes running Slurm
    jobs, `ending_soon` those of them whose job's time limit ends within the
    policy's horizon; `lent` the nodes held by Kubernetes or on their way to
    it; `size` every node of the block (the rest are down or drained).
    """

    name: str
    size: int
    idle: int = 0
    held: int = 0
    busy: int = 0
    ending_soon: int = 0
    lent: int = 0

    def __post_init__(self) -> None:
        counts = self.idle + self.held + self.busy + self.lent
        if min(self.size, self.idle, self.held, self.busy, self.ending_soon, self.lent) < 0:
            raise ValueError(f"block {self.name!r}: counts must not be negative")
        if counts > self.size or self.ending_soon > self.busy:
            raise ValueError(
                f"block {self.name!r}: idle {self.idle} + held {self.held} + busy "
                f"{self.busy} + lent {self.lent} exceed its size {self.size}, or ending_soon "
                f"{self.ending_soon} exceeds busy"
            )

    @property
    def slurm_free(self) -> bool:
        """No Slurm job runs in the block."""
        return self.busy == 0


@dataclass(frozen=True, slots=True)
class Demand:
    """What each side waits for: Slurm's pending jobs in its order, Kubernetes' entitlement.

    `slurm_waiting` holds the node counts of pending Slurm jobs, queue head
    first; `kubernetes_lent` the nodes Kubernetes holds now (lent or on their
    way); `kubernetes_entitled` the nodes its nominal quota stands for.
    """

    slurm_waiting: tuple[int, ...] = ()
    kubernetes_lent: int = 0
    kubernetes_entitled: int = 0
    slurm_expected: int = 0  # nodes Slurm's arrivals are expected to ask for within the horizon


@dataclass(frozen=True, slots=True)
class SharingPolicy:
    """The policy's knobs. `horizon_s` is how far ahead "soon" looks (the caller counts
    `ending_soon` with it); `queue_depth` how many pending Slurm jobs are protected."""

    horizon_s: float = 1800.0
    queue_depth: int = 4
    # Half-life of the arrival rates; 0 (the default) turns demand learning and headroom
    # off: over the simulator's scenarios it changed neither figure beyond seed noise.
    rate_half_life_s: float = 0.0

    def __post_init__(self) -> None:
        if min(self.horizon_s, self.queue_depth, self.rate_half_life_s) < 0:
            raise ValueError(
                f"lending policy: horizon_s ({self.horizon_s}), queue_depth "
                f"({self.queue_depth}) and rate_half_life_s ({self.rate_half_life_s}) "
                f"must not be negative"
            )


def slurm_soon(blocks: Sequence[BlockView]) -> int:
    """Nodes Slurm can count on soon: idle, held for its plan, or ending within the horizon."""
    return sum(b.idle + b.held + b.ending_soon for b in blocks)


def slurm_spare(blocks: Sequence[BlockView], demand: Demand, policy: SharingPolicy) -> int:
    """Idle nodes Slurm's first `queue_depth` pending jobs cannot use within the horizon."""
    soon = slurm_soon(blocks)
    return max(0, min(sum(b.idle for b in blocks), soon - queue_wants(demand, policy)))


def lendable(blocks: Sequence[BlockView], demand: Demand, policy: SharingPolicy) -> int:
    """How many nodes may be lent now: Slurm's spare, or up to Kubernetes' entitlement."""
    owed = max(0, demand.kubernetes_entitled - demand.kubernetes_lent)
    idle = sum(b.idle for b in blocks)
    return min(idle, max(owed, slurm_spare(blocks, demand, policy)))


def queue_wants(demand: Demand, policy: SharingPolicy) -> int:
    """Nodes Slurm's protected queue waits for (its first jobs, and expected arrivals)."""
    return sum(demand.slurm_waiting[: policy.queue_depth]) + demand.slurm_expected


def keeps_busy_nodes(demand: Demand, policy: SharingPolicy) -> bool:
    """Whether busy nodes stay Slurm's too (none reserved to wait for their jobs): its
    protected queue waits for nodes, which it gets as those jobs end, and Kubernetes
    holds its entitlement."""
    entitled = demand.kubernetes_lent >= demand.kubernetes_entitled
    return entitled and queue_wants(demand, policy) > 0


def why_kept(blocks: Sequence[BlockView], demand: Demand, policy: SharingPolicy) -> str:
    """Why Slurm keeps its idle nodes, for a workload told to retry."""
    head = demand.slurm_waiting[: policy.queue_depth]
    soon = slurm_soon(blocks)
    return (
        f"Slurm's queue counts on its idle nodes: its first {len(head)} pending jobs want "
        f"{sum(head)} nodes, {soon} are idle, held for it or end within "
        f"{policy.horizon_s:.0f}s; {lendable(blocks, demand, policy)} may be lent now "
        f"(Kubernetes holds {demand.kubernetes_lent}, entitled to {demand.kubernetes_entitled})"
    )


def lend_kind(block: BlockView) -> int:
    """Where a lend goes first (smaller first): 0 Kubernetes' own blocks, 1 whole idle
    blocks, 2 blocks Kubernetes shares with Slurm jobs, 3 Slurm's busy blocks."""
    if block.slurm_free:
        return 0 if block.lent else 1
    return 2 if block.lent else 3


def lend_rank(block: BlockView) -> tuple[int, int, str]:
    """`lend_kind`, then Kubernetes' fullest blocks first, then by name."""
    return (lend_kind(block), -block.lent, block.name)


def choose_lends(
    blocks: Sequence[BlockView], wanted: int, demand: Demand, policy: SharingPolicy
) -> tuple[tuple[str, int], ...]:
    """Up to `wanted` idle nodes to lend as (block name, nodes), best block first; empty
    when Slurm needs them soon. Any idle node of a chosen block will do."""
    left = min(wanted, lendable(blocks, demand, policy))
    takes: list[tuple[str, int]] = []
    for block in sorted((b for b in blocks if b.idle), key=lend_rank):
        if left == 0:
            break
        take = min(left, block.idle)
        takes.append((block.name, take))
        left -= take
    return tuple(takes)


def lends_by_block(
    blocks: Sequence[BlockView], demand: Demand, policy: SharingPolicy
) -> dict[str, int] | None:
    """Block -> idle nodes it may lend now: `lendable` nodes, taken as `choose_lends`
    would; None when Slurm can spare every idle node."""
    room = lendable(blocks, demand, policy)
    if room >= sum(b.idle for b in blocks):
        return None
    return dict(choose_lends(blocks, room, demand, policy))


def first_choice(
    blocks: Sequence[BlockView], lends: Mapping[str, int] | None, nodes: int
) -> dict[str, int] | None:
    """Of `lends` (None: every idle node), the blocks of the best kinds (`lend_kind`)
    that together hold `nodes`: where a gang of `nodes` goes first; None when that is
    every block of `lends`. Every block of the last kind needed stays in, so a placer
    still picks the best-fitting block among equals."""
    offers = [(b, lend_kind(b), b.idle if lends is None else lends.get(b.name, 0)) for b in blocks]
    have = [0, 0, 0, 0]
    for _, kind, count in offers:
        have[kind] += count
    last = next(
        (kind for kind in range(len(have)) if sum(have[: kind + 1]) >= nodes), len(have) - 1
    )
    if all(count == 0 for count in have[last + 1 :]):
        return None
    return {b.name: count for b, kind, count in offers if kind <= last and count > 0}


def reclaim(blocks: Sequence[BlockView], demand: Demand, policy: SharingPolicy) -> tuple[str, ...]:
    """Blocks whose lent nodes should take no new pods and return when empty.

    Only while Slurm's protected queue wants more than it can count on soon,
    and only down to Kubernetes' entitlement; the blocks Kubernetes holds
    fewest nodes of go first, so the fewest pods give Slurm the most whole
    blocks back.
    """
    soon = slurm_soon(blocks)
    short = sum(demand.slurm_waiting[: policy.queue_depth]) - soon
    room = demand.kubernetes_lent - demand.kubernetes_entitled
    names: list[str] = []
    for block in sorted((b for b in blocks if b.lent), key=lambda b: (b.lent, b.name)):
        if short <= 0 or room < block.lent:
            break
        names.append(block.name)
        short -= block.lent
        room -= block.lent
    return tuple(names)


@dataclass(frozen=True, slots=True)
class ArrivalRate:
    """A side's arrivals per second (GPUs or nodes), exponentially weighted.

    Each arrival of `amount` adds `amount * ln 2 / H` to a rate that halves
    every `H` seconds without arrivals, so a steady stream of `r` per second
    reads `r` (the exponentially weighted moving average of a point process).
    """

    per_s: float = 0.0
    at: float = 0.0

    def at_time(self, now: float, half_life_s: float) -> float:
        if half_life_s <= 0:
            return 0.0
        return self.per_s * math.exp(-math.log(2) * max(0.0, now - self.at) / half_life_s)

    def observe(self, now: float, amount: float, half_life_s: float) -> ArrivalRate:
        if half_life_s <= 0:
            return self
        return ArrivalRate(self.at_time(now, half_life_s) + amount * math.log(2) / half_life_s, now)


def expected(rate: ArrivalRate, now: float, window_s: float, half_life_s: float) -> int:
    """Whole units the rate brings within `window_s` (rounded up)."""
    return math.ceil(rate.at_time(now, half_life_s) * window_s - 1e-9)


def headroom_lends(
    blocks: Sequence[BlockView],
    demand: Demand,
    policy: SharingPolicy,
    *,
    free_gpus: int,
    expected_gpus: int,
    gpus_per_node: int,
) -> int:
    """Nodes to lend ahead of demand so Kubernetes has `expected_gpus` free (never more
    than Slurm can spare now; the entitlement does not apply to headroom)."""
    short = expected_gpus - free_gpus
    if short <= 0 or gpus_per_node <= 0:
        return 0
    return min(-(-short // gpus_per_node), slurm_spare(blocks, demand, policy))
