"""Benchmark of the Kueue bridge (issue 7); prints one JSON line.

`--placement-only` needs no cluster: a seeded mix of gang sizes is placed, one
decision after another with reservations, on a 10,000-node fleet whose NVLink
blocks are partly used, and the time per decision and the number of gangs that
spanned more blocks than the free state required are reported. The end-to-end
part (QuotaReserved to check Ready, 500 queued workloads) needs the local
control plane and is not available yet.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from slurmkube.placement import (
    BlockPolicy,
    GangRequest,
    Node,
    NodeState,
    Snapshot,
    min_blocks_needed,
    place,
)

# (nodes, GPUs per node, nodes per block): GB200 NVL72 (18 trays of 4 GPUs per
# NVLink domain) gives ~555 blocks; 72-node network blocks give ~140.
FLEETS = {"nvl72": (10_000, 4, 18), "block72": (10_000, 8, 72)}
GANG_NODES = (1, 1, 1, 2, 2, 4, 4, 8, 9, 16, 18, 24, 36, 64)


def build_fleet(rng: random.Random, nodes: int, gpus: int, per_block: int) -> list[Node]:
    fleet = []
    states = (NodeState.FREE, NodeState.IDLE, NodeState.BUSY, NodeState.UNAVAILABLE)
    for i in range(nodes):
        block = i // per_block
        # A third of the blocks untouched; the others partly used, as in a busy fleet.
        untouched = block % 3 == 0
        state = NodeState.IDLE if untouched else rng.choices(states, weights=(2, 3, 6, 1))[0]
        fleet.append(
            Node(
                name=f"gpu-{i:05d}",
                block=f"block-{block:04d}",
                gpus=gpus,
                state=state,
                tier_path=(f"leaf-{block // 4:03d}", f"spine-{block // 32:02d}"),
                busy_priority=rng.randrange(3),
            )
        )
    return fleet


def run_placement(seed: int, decisions: int, fleet_name: str) -> dict[str, float | int | str]:
    rng = random.Random(seed)
    nodes, gpus, per_block = FLEETS[fleet_name]
    fleet = build_fleet(rng, nodes, gpus, per_block)
    start = time.perf_counter()
    snapshot = Snapshot.of(fleet)
    build_ms = (time.perf_counter() - start) * 1000.0
    times: list[float] = []
    reserve_times: list[float] = []
    extra_spans = placed = waited = 0
    for i in range(decisions):
        size = rng.choice(GANG_NODES)
        policy = BlockPolicy.SINGLE_BLOCK if size <= per_block and rng.random() < 0.5 else None
        request = GangRequest(
            name=f"wl-{i}",
            nodes=size,
            gpus_per_node=gpus,
            block_policy=policy or BlockPolicy.MIN_BLOCKS,
            allow_busy=rng.random() < 0.3,
        )
        start = time.perf_counter()
        decision = place(snapshot, request)
        times.append((time.perf_counter() - start) * 1000.0)
        if not decision.placed:
            waited += 1
            continue
        placed += 1
        extra_spans += len(decision.blocks) > _needed_blocks(snapshot, request, decision)
        start = time.perf_counter()
        snapshot = snapshot.reserve(decision)
        reserve_times.append((time.perf_counter() - start) * 1000.0)
        # Keep the fleet from filling up: every few decisions a lease ends.
        if i % 4 == 3:
            snapshot = snapshot.with_nodes(
                Node(n.name, n.block, n.gpus, NodeState.IDLE, n.tier_path)
                for n in (snapshot.nodes[name] for name in rng.sample(sorted(snapshot.nodes), 64))
                if n.state is NodeState.LENT
            )
    times.sort()
    return {
        "bench": "bridge-placement",
        "fleet": fleet_name,
        "nodes": nodes,
        "blocks": len(snapshot.blocks),
        "decisions": decisions,
        "placed": placed,
        "waited": waited,
        "extra_block_spans": extra_spans,
        "placement_ms_p50_10k_nodes": round(statistics.median(times), 3),
        "placement_ms_p95_10k_nodes": round(times[int(0.95 * (len(times) - 1))], 3),
        "placement_ms_max_10k_nodes": round(times[-1], 3),
        "snapshot_build_ms_10k_nodes": round(build_ms, 1),
        "reserve_ms_p50_10k_nodes": round(statistics.median(reserve_times), 3),
    }


def _needed_blocks(snapshot: Snapshot, request: GangRequest, decision: object) -> int:
    """Brute-force minimum, from node states, independent of the engine's aggregates."""
    used_busy = bool(getattr(decision, "busy_nodes", ()))
    states = {NodeState.FREE, NodeState.IDLE} | ({NodeState.BUSY} if used_busy else set())
    counts: dict[str, int] = {}
    for node in snapshot:
        if node.state in states and node.gpus >= request.gpus_per_node:
            counts[node.block] = counts.get(node.block, 0) + 1
    needed = min_blocks_needed(list(counts.values()), request.nodes)
    return needed if needed is not None else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placement-only", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--fleet", choices=sorted(FLEETS), default="nvl72")
    args = parser.parse_args(argv)
    if not args.placement_only:
        print(
            "bench/bridge.py: the end-to-end bridge benchmark needs the local control plane "
            "(Kueue + slurmctld), which is not built yet; run with --placement-only",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(run_placement(args.seed, args.decisions, args.fleet)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
