"""Render benchmark: slurm.conf + gres.conf + topology.conf for large fleets.

Prints one JSON line per fleet size (1k, 10k, 50k nodes; 140 NVLink blocks at
10k, three network tiers) with wall times of each stage and the peak RSS of a
fresh process that did only this. Target (DESIGN.md §7): render of 10k nodes
under 50 ms and 150 MB. "Render" is what runs on every fleet change: plan +
files from the fleet model. Parsing Node objects and converting them into
fleet nodes happen once per Node change (the watcher keeps the converted
nodes) and are reported beside it, not hidden.

    python bench/render.py [--sizes 1000,10000,50000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

TARGET_MS_10K = 50.0
CLUSTER_UUID = "3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64"
TARGET_RSS_MB_10K = 150.0


def fleet_dicts(nodes: int, blocks: int) -> list[dict[str, Any]]:
    per_block = -(-nodes // blocks)
    out = []
    for i in range(nodes):
        block = i // per_block
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gpu-{i + 1:05d}",
                    "labels": {
                        "slurmkube.io/pool": "gpu",
                        "nvidia.com/gpu.clique": f"{CLUSTER_UUID}.{block + 1}",
                        "nvidia.com/gpu.product": "NVIDIA-GB200",
                        "topology.slurmkube.io/leaf": f"leaf-{block:03d}",
                        "topology.slurmkube.io/spine": f"spine-{block // 8:02d}",
                        "topology.slurmkube.io/core": f"core-{block // 64}",
                    },
                },
                "status": {
                    "allocatable": {"cpu": "144", "memory": "884Gi", "nvidia.com/gpu": "4"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    return out


def cluster_docs(plugin: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "slurmkube.io/v1alpha1",
            "kind": "SlurmCluster",
            "metadata": {"name": "bench"},
            "spec": {
                "topology": {
                    "plugin": plugin,
                    "blockSize": 64,
                    "tierLabels": [
                        "topology.slurmkube.io/leaf",
                        "topology.slurmkube.io/spine",
                        "topology.slurmkube.io/core",
                    ],
                },
                "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
            },
        },
        {
            "apiVersion": "slurmkube.io/v1alpha1",
            "kind": "NodeSet",
            "metadata": {"name": "gpu"},
            "spec": {
                "clusterRef": "bench",
                "nodeSelector": {"matchLabels": {"slurmkube.io/pool": "gpu"}},
            },
        },
    ]


def measure(nodes: int, blocks: int, repeat: int) -> dict[str, Any]:
    """Runs in a child process so peak RSS belongs to this size alone."""
    from slurmkube.api.documents import parse_cluster, parse_nodes
    from slurmkube.render import plan_config, render_files
    from slurmkube.topology.fleet import fleet_node

    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    dicts = fleet_dicts(nodes, blocks)
    t0 = time.perf_counter()
    kube_nodes = parse_nodes(dicts)
    parse_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    fleet = [fleet_node(n) for n in kube_nodes]
    convert_ms = (time.perf_counter() - t0) * 1000
    result: dict[str, Any] = {
        "nodes": nodes,
        "blocks": blocks,
        # Once per Node change, not per render: YAML/JSON dicts -> Node models.
        "parse_ms": round(parse_ms, 1),
        # Once per Node change as well: Node -> validated fleet node.
        "convert_ms": round(convert_ms, 1),
    }
    for plugin in ("block", "tree"):
        bundle = parse_cluster(cluster_docs(plugin))
        plan, render, total = [], [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            config = plan_config(bundle, fleet)
            t1 = time.perf_counter()
            files = render_files(config)
            t2 = time.perf_counter()
            plan.append((t1 - t0) * 1000)
            render.append((t2 - t1) * 1000)
            total.append((t2 - t0) * 1000)
        result[plugin] = {
            "plan_ms": round(statistics.median(plan), 1),
            "render_ms": round(statistics.median(render), 1),
            "total_ms": round(statistics.median(total), 1),
            "topology_conf_lines": files.files["topology.conf"].count("\n"),
            "slurm_conf_bytes": len(files.files["slurm.conf"]),
        }
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["peak_rss_mb"] = round(peak, 1)
    result["rss_before_mb"] = round(rss_start, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], args.repeat)))
        return 0
    ok = True
    for size in (int(s) for s in args.sizes.split(",")):
        blocks = max(1, round(size * 140 / 10_000))
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(size),
                str(blocks),
                "--repeat",
                str(args.repeat),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        result = json.loads(out)
        if size == 10_000:
            worst = max(result["block"]["total_ms"], result["tree"]["total_ms"])
            result["target"] = {"total_ms": TARGET_MS_10K, "peak_rss_mb": TARGET_RSS_MB_10K}
            result["meets_target"] = (
                worst < TARGET_MS_10K and result["peak_rss_mb"] < TARGET_RSS_MB_10K
            )
            ok = ok and result["meets_target"]
        print(json.dumps({"bench": "render", **result}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
