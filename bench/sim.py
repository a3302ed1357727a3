"""Benchmark of the fleet simulator (issue 9): the reference scenario, timed; one JSON line.

Runs every policy of the scenario on one seeded workload (as `slurmkube sim`
does), writes the results to --out, and reports wall time, CPU time, peak
memory, the per-run times and the headline margins.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from slurmkube_sim.cli import configure, execute


def main(argv: list[str] | None = None) -> int:
    parser = configure(
        argparse.ArgumentParser(description=__doc__.splitlines()[0]), out_required=False
    )
    args = parser.parse_args(argv)
    args.out = args.out or Path(tempfile.mkdtemp(prefix="slurmkube-bench-sim-"))
    started, cpu = time.perf_counter(), os.times()
    code, data = execute(args)
    if data is None or code != 0:
        return code or 2
    wall = time.perf_counter() - started
    after = os.times()
    rss = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    policies: dict[str, dict[str, object]] = data["policies"]  # type: ignore[assignment]
    runtime: dict[str, object] = data["runtime"]  # type: ignore[assignment]
    fleet: dict[str, object] = data["fleet"]  # type: ignore[assignment]
    print(
        json.dumps(
            {
                "bench": "sim",
                "scenario": args.scenario,
                "seed": args.seed,
                "jobs": args.jobs,
                "nodes": fleet["nodes"],
                "runs": runtime["runs"],
                "workers": runtime["workers"],
                "wall_s": round(wall, 2),
                "cpu_s": round(
                    (after.user - cpu.user) + (after.children_user - cpu.children_user), 2
                ),
                "max_rss_mb": round(rss / 1024.0, 1),
                "run_wall_s": runtime["run_wall_s"],
                "load_average_1m": round(os.getloadavg()[0], 2),
                "occupancy": {k: v["occupancy"] for k, v in policies.items()},
                "tts_p95_s_64plus": {k: v["tts_p95_s_64plus"] for k, v in policies.items()},
                "margins": data["margins"],
                "invariants": data["invariants"],
                "out": str(args.out),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
