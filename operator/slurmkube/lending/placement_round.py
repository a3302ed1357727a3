"""One lending round's placements: the fleet as each check may lend it, what
earlier workloads of the round took, and the sharing policy's say (pure).

`plan_lending` answers workloads one after another in a round; each placement
must see what the ones before it reserved, and a deep queue of a few gang
shapes must not cost a placement per workload. This state lives here, apart
from the planner's walk through each workload's states (`lending.plan`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import islice

from slurmkube.lending.fleet_view import block_view, fleet_snapshot, pool
from slurmkube.lending.model import LendingPolicy, LendingWorld, NodeView, ReservationView
from slurmkube.lending.sharing import (
    BlockView,
    Demand,
    first_choice,
    keeps_busy_nodes,
    lends_by_block,
    queue_wants,
    why_kept,
)
from slurmkube.placement import Decision, GangRequest, Snapshot, Verdict, place, refused_alike


@dataclass
class PlacementRound:
    """One planning round: lookups, and what earlier workloads of the round took."""

    world: LendingWorld
    nodes: dict[str, NodeView]
    planned: frozenset[str]  # idle nodes Slurm's backfill holds for its queue
    leases: Mapping[str, tuple[str, ...]]  # workload uid -> its lease-labelled nodes, by name
    reservations: dict[str, ReservationView]
    policies: Mapping[str, LendingPolicy]
    # Made on first use: a round in which no workload needs placing (most rounds,
    # once a queue is answered) builds no snapshot of the fleet.
    # Per check, two views: every node, and escalated domains' nodes unavailable.
    snapshots: dict[tuple[str, bool], Snapshot] = field(default_factory=dict)
    placed: dict[str, list[Decision]] = field(default_factory=dict)
    pools: dict[str, frozenset[int]] = field(default_factory=dict)
    lent_by_check: dict[str, int] = field(default_factory=dict)
    # Refusals on each check's current snapshot, by gang shape (the request with
    # no name): a deep queue of a few shapes costs a few placements per round.
    refused: dict[tuple[str, GangRequest], Decision] = field(default_factory=dict)
    # Per snapshot view, its blocks in the sharing policy's counts, by name.
    views: dict[tuple[str, bool], dict[str, BlockView]] = field(default_factory=dict)

    def pool_gpus(self, check: str) -> frozenset[int]:
        """The GPU counts of the nodes `check` lends from."""
        if check not in self.pools:
            policy = self.policies[check]
            self.pools[check] = frozenset(n.gpus for n in pool(self.world.nodes, policy))
        return self.pools[check]

    def decide(self, check: str, gang: GangRequest) -> Decision:
        # A gang large enough to need the NVLink fabric sees an escalated domain's
        # nodes as unavailable (node health: half a rack sick); smaller ones do not.
        large = gang.nodes >= self.world.escalation_gang_nodes
        view = (check, large)
        snapshot = self.snapshots.get(view)
        if snapshot is None:
            snapshot = fleet_snapshot(self.world.nodes, self.policies[check], large)
            for earlier_placed in self.placed.get(check, ()):
                snapshot = snapshot.reserve(earlier_placed)
            self.snapshots[view] = snapshot
        shape = (check, replace(gang, name=""))
        earlier = self.refused.get(shape)
        if earlier is not None:
            return refused_alike(earlier, gang)
        decision = self.share(view, snapshot, gang)
        if decision.placed:
            # Both views of the check lose what was taken this round.
            self.placed.setdefault(check, []).append(decision)
            for either in ((check, False), (check, True)):
                if either in self.snapshots:
                    self.snapshots[either] = self.snapshots[either].reserve(decision)
                    self.reserved(either, decision)
            self.refused = {k: d for k, d in self.refused.items() if k[0] != check}
        else:
            self.refused[shape] = decision
        return decision

    def share(self, view: tuple[str, bool], snapshot: Snapshot, gang: GangRequest) -> Decision:
        """Place `gang` on what the sharing policy lets Slurm lend (`lending.sharing`):
        in the policy's best blocks for the gang's size when that spans no more blocks
        than every node it may lend would; when only the nodes Slurm keeps would hold
        the gang, the refusal says so."""
        policy = self.policies[view[0]]
        sharing = policy.sharing
        blocks = self.block_views(view, snapshot)
        bar = policy.requeue.below_priority if policy.requeue is not None else None
        demand = Demand(
            # Under Requeue, the jobs below its priority give way to Kubernetes.
            # Only the protected head counts: a deep queue costs no more per placement.
            slurm_waiting=tuple(
                islice(
                    (j.nodes for j in self.world.slurm_queue if bar is None or j.priority >= bar),
                    sharing.queue_depth,
                )
            ),
            kubernetes_lent=sum(b.lent for b in blocks),
            kubernetes_entitled=policy.entitled_nodes,
        )
        # While the queue waits, the nodes of ending jobs are its too.
        allowed = replace(gang, allow_busy=False) if keeps_busy_nodes(demand, sharing) else gang
        lends = lends_by_block(blocks, demand, sharing)
        every = place(snapshot, allowed, lends)
        if every.placed:
            first = first_choice(blocks, lends, gang.nodes)
            if first is None:
                return every
            best = place(snapshot, allowed, first)
            return best if best.placed and len(best.blocks) <= len(every.blocks) else every
        if every.verdict is Verdict.CAN_NEVER_FIT:
            return every
        # Idle nodes Slurm's backfill holds for the queue are not in the snapshot's
        # idle ones: the queue keeps them too.
        held = queue_wants(demand, sharing) > 0 and any(b.held for b in blocks)
        if not held and not place(snapshot, gang).placed:
            return every
        message = f"gang {gang.name!r} waits: {why_kept(blocks, demand, sharing)}"
        return Decision(gang, Verdict.DOES_NOT_FIT_NOW, (), (), message)

    def block_views(self, view: tuple[str, bool], snapshot: Snapshot) -> list[BlockView]:
        """The view's blocks in the sharing policy's counts, made once per round and
        kept current as placements reserve nodes (`reserved`)."""
        views = self.views.get(view)
        if views is None:
            end = self.world.now + self.policies[view[0]].sharing.horizon_s
            views = self.views[view] = {
                b.name: block_view(snapshot, b.name, self.planned, end) for b in snapshot.blocks
            }
        return list(views.values())

    def reserved(self, view: tuple[str, bool], decision: Decision) -> None:
        """Count the blocks `decision` took from again in the view's block views."""
        views = self.views.get(view)
        if views is None:
            return
        end = self.world.now + self.policies[view[0]].sharing.horizon_s
        for name in decision.blocks:
            views[name] = block_view(self.snapshots[view], name, self.planned, end)
