"""Backfill depth on a deep queue: slurmkube's rendered scheduler settings vs Slurm's defaults.

Starts the real test cluster (32 nodes x 8 GPUs), fills it with long jobs so
nothing new can start, submits a seeded mix of pending jobs (default 20,000),
then watches one backfill cycle: how deep it got (`sdiag` "Last depth cycle"),
how long it took, and how long `sinfo` took while it ran. The same run is
repeated with SchedulerParameters removed (Slurm's defaults) for the baseline.
Prints one JSON line per variant.

    python bench/backfill.py [--jobs 20000] [--seed 1] [--variants slurmkube,default]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from slurmkube.api.documents import parse_cluster
from slurmkube_local.builders import cluster_docs, nvl_fleet
from slurmkube_local.local_slurm import LocalSlurm, SlurmCommandFailed, start_local_slurm

NODES = 32
GPUS = 8


def job_mix(count: int, seed: int) -> list[list[str]]:
    """Gang sizes and limits loosely after Helios (SC'21): most jobs small, a long tail."""
    rnd = random.Random(seed)
    jobs = []
    for _ in range(count):
        nodes = rnd.choices([1, 2, 4, 8, 16, 32], weights=[60, 15, 10, 8, 5, 2])[0]
        gpus = GPUS if nodes > 1 else rnd.choice([1, 2, 4, 8])
        minutes = rnd.choice([10, 30, 60, 240, 720, 1440, 2880])
        jobs.append(
            [f"-N{nodes}", f"--gres=gpu:{gpus}", f"--time={minutes}", "--wrap", "sleep 600"]
        )
    return jobs


def sdiag_backfill(cluster: LocalSlurm) -> dict[str, int]:
    out = cluster.run("sdiag")
    section = out.split("Backfilling stats", 1)[1]
    fields = {}
    for key, label in (
        ("cycles", "Total cycles"),
        ("last_cycle_us", "Last cycle"),
        ("last_depth", "Last depth cycle"),
        ("last_depth_try", "Last depth cycle (try sched)"),
        ("queue_length", "Last queue length"),
    ):
        match = re.search(rf"^\s*{re.escape(label)}:\s*(\d+)", section, re.M)
        fields[key] = int(match.group(1)) if match else -1
    return fields


def submit_all(cluster: LocalSlurm, jobs: list[list[str]]) -> tuple[float, int]:
    """Submit from 4 threads; a refused submission is retried (and counted), as users do."""
    retries = 0

    def submit(args: list[str]) -> None:
        nonlocal retries
        last = ""
        for attempt in range(8):
            try:
                cluster.run("sbatch", "--parsable", "-Q", *args)
                return
            except SlurmCommandFailed as err:
                retries += 1
                last = (err.stderr or "").strip()
                time.sleep(0.5 * (attempt + 1))
        cluster.check_alive()  # a dead slurmctld says so, with its log
        raise RuntimeError(f"sbatch refused 8 times in a row: {last}")

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(submit, jobs))
    return time.monotonic() - t0, retries


def run_variant(variant: str, jobs: int, seed: int) -> dict[str, Any]:
    docs = cluster_docs(pools=("gpu",))
    docs[0]["spec"]["scheduler"] = {"backfill": {"expectedQueueDepth": jobs}}
    fleet = nvl_fleet(domains=4, per_domain=NODES // 4, gpus=GPUS)

    def defaults(text: str) -> str:
        # Slurm's own scheduler settings, from the start (no reconfigure in the run).
        return re.sub(r"^SchedulerParameters=.*\n", "", text, flags=re.M)

    edit = defaults if variant == "default" else None
    with start_local_slurm(parse_cluster(docs), fleet, rest=False, edit_slurm_conf=edit) as cluster:
        cluster.wait_nodes_idle(timeout=120)
        # Occupy every GPU for longer than the bench, so the queue stays pending.
        for node in cluster.nodes:
            cluster.run(
                "sbatch",
                "-w",
                node,
                f"--gres=gpu:{GPUS}",
                "--exclusive",
                "--time=60",
                "--wrap",
                "sleep 3000",
            )
        submit_s, refused = submit_all(cluster, job_mix(jobs, seed))
        params = cluster.run("scontrol", "show", "config")
        sched = re.search(r"SchedulerParameters\s*=\s*(\S+)", params)
        start = sdiag_backfill(cluster)["cycles"]
        latencies = []
        failures = 0
        deadline = time.monotonic() + 240
        # Sample client latency until a backfill cycle started after submission ends.
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                cluster.run("sinfo", "-h")
            except SlurmCommandFailed:
                failures += 1  # the controller did not answer at all: worse than slow
            latencies.append(time.monotonic() - t0)
            try:
                stats = sdiag_backfill(cluster)
            except SlurmCommandFailed:
                continue
            if stats["cycles"] >= start + 2:
                break
            time.sleep(0.5)
        stats = sdiag_backfill(cluster)
        return {
            "bench": "backfill",
            "variant": variant,
            "jobs_queued": jobs,
            "nodes": NODES,
            "gpus_per_node": GPUS,
            "scheduler_parameters": sched.group(1) if sched else "(default)",
            "submit_s": round(submit_s, 1),
            "submissions_refused": refused,
            "backfill_depth": stats["last_depth"],
            "backfill_depth_fraction": round(stats["last_depth"] / max(jobs, 1), 3),
            "backfill_cycle_s": round(stats["last_cycle_us"] / 1e6, 2),
            "backfill_queue_length": stats["queue_length"],
            "sinfo_latency_p50_s": round(statistics.median(latencies), 3),
            "sinfo_latency_max_s": round(max(latencies), 3),
            "sinfo_samples": len(latencies),
            "sinfo_failures": failures,
        }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variants", default="slurmkube,default")
    args = parser.parse_args()
    for variant in args.variants.split(","):
        try:
            result = run_variant(variant, args.jobs, args.seed)
        except (RuntimeError, SlurmCommandFailed) as err:
            # A variant that cannot take the load is a result too, not a crash of the bench.
            result = {
                "bench": "backfill",
                "variant": variant,
                "jobs_queued": args.jobs,
                "error": str(err)[-2000:],
            }
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
