"""The autoscale poll's Slurm read at 1,000 and 25,000 nodes (issue 15).

Starts real slurmctld and slurmrestd (Slurm 24.11.5, `make slurm`) with a
rendered fleet of N GPU nodes that run no slurmd, and times, with the REST
client the operator uses:
- `node_list`: every node, as a reconcile reads them;
- `nodes_changed_since`: the autoscale poll's question while nothing changed
  (slurmrestd answers 304 Not Modified);
- `ping`: any request's floor at that fleet size;
each the median of repeated calls. Target: the poll at 25,000 nodes within 2x
of the poll at 1,000. One JSON line per fleet size and one verdict line; exits
1 on a miss.

    python bench/slurm_read.py [--sizes 1000,25000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from slurmkube.api.documents import parse_cluster
from slurmkube.slurm.rest import RestClient
from slurmkube_local.builders import cluster_docs, nvl_fleet
from slurmkube_local.local_slurm import start_local_slurm

PER_DOMAIN = 18
TARGET_RATIO = 2.0


def timed(call: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(size: int, repeat: int) -> dict[str, Any]:
    fleet = nvl_fleet(-(-size // PER_DOMAIN), PER_DOMAIN)[:size]
    bundle = parse_cluster(cluster_docs(block_size=PER_DOMAIN))
    started = time.monotonic()
    with start_local_slurm(bundle, fleet, start_slurmd=[]) as cluster:
        up = time.monotonic() - started
        with RestClient(
            cluster.rest_url, jwt_key_file=cluster.conf_dir / "jwt.key", timeout=300.0
        ) as rest:
            listed = rest.node_list()
            # Quiet: nodes without slurmd go NOT_RESPONDING once, then nothing changes.
            deadline = time.monotonic() + 120
            since = listed.update_time
            while rest.nodes_changed_since(since):
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench/slurm_read: {size} nodes never stopped changing")
                time.sleep(2)
                since = rest.node_list().update_time
            full = timed(rest.node_list, max(3, repeat // 5))
            probe = timed(lambda: rest.nodes_changed_since(since), repeat)
            # Any request's floor at this fleet size (JWT, slurmrestd, an RPC).
            ping = timed(rest.ping, repeat)
            assert not rest.nodes_changed_since(since)
    return {
        "bench": "slurm_read",
        "nodes": len(listed.nodes),
        "slurm_up_seconds": round(up, 1),
        "full_read_s_p50": round(full, 4),
        "poll_probe_s_p50": round(probe, 5),
        "ping_s_p50": round(ping, 5),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,25000")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        results.append(measure(size, args.repeat))
        print(json.dumps(results[-1]), flush=True)
    small, large = results[0], results[-1]
    ratio = large["poll_probe_s_p50"] / small["poll_probe_s_p50"]
    verdict = {
        "bench": "slurm_read_poll_scaling",
        "nodes": [small["nodes"], large["nodes"]],
        "poll_ratio": round(ratio, 2),
        "full_read_ratio": round(large["full_read_s_p50"] / small["full_read_s_p50"], 2),
        "target_ratio": TARGET_RATIO,
        "load_average": os.getloadavg()[0],
        "meets_target": ratio <= TARGET_RATIO,
    }
    print(json.dumps(verdict), flush=True)
    return 0 if verdict["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
