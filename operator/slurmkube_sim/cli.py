"""`slurmkube sim`: run a scenario's policies on one seeded workload and write the results.

`add_parser(subparsers)` plugs the command into the main `slurmkube` CLI;
`python -m slurmkube_sim` runs it alone. Prints one JSON line with the
headline numbers, runtime and memory; writes DIR/results.json, the plots and
DIR/report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from slurmkube_sim.alibaba import DEFAULT_TRACE_DIR
from slurmkube_sim.scenario import SCENARIOS, compare


def configure(
    parser: argparse.ArgumentParser, *, out_required: bool = True
) -> argparse.ArgumentParser:
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="reference")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs of both sides together")
    parser.add_argument(
        "--out", type=Path, required=out_required, help="directory for results.json etc."
    )
    parser.add_argument(
        "--trace",
        type=Path,
        default=Path(os.environ.get("SLURMKUBE_ALIBABA_TRACE", str(DEFAULT_TRACE_DIR))),
        help="Alibaba cluster-trace-gpu-v2023 csv directory (or a pod list CSV)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="processes to run policies in parallel (1: in this process)",
    )
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `sim` on the main CLI's `add_subparsers()` object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sim", help="trace-driven fleet simulator (goodput)"
    )
    configure(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the comparison, write DIR, print the summary line; 0, 1 (invariant broken) or 2."""
    code, data = execute(args)
    if data is None:
        return code
    policies = data["policies"]
    assert isinstance(policies, dict)
    summary = {
        "scenario": args.scenario,
        "seed": args.seed,
        "jobs": args.jobs,
        "out": str(args.out),
        **{f"{k}_occupancy": v["occupancy"] for k, v in policies.items()},
        **{f"{k}_tts_p95_s_64plus": v["tts_p95_s_64plus"] for k, v in policies.items()},
        "invariants": data["invariants"],
        "runtime": data["runtime"],
    }
    print(json.dumps(summary))
    if code == 1:
        print(
            "slurmkube sim: a placement invariant was violated, see results.json", file=sys.stderr
        )
    return code


def execute(args: argparse.Namespace) -> tuple[int, dict[str, object] | None]:
    """Like `run` without printing: the exit code and the results (None on bad input)."""
    from slurmkube_sim.report import write_all  # matplotlib only when results are written

    if args.jobs < 1:
        print(f"slurmkube sim: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2, None
    started = time.perf_counter()
    try:
        comparison = compare(
            SCENARIOS[args.scenario](),
            jobs=args.jobs,
            seed=args.seed,
            trace=args.trace,
            workers=max(1, args.workers),
        )
    except (FileNotFoundError, ValueError) as err:
        print(f"slurmkube sim: {err}", file=sys.stderr)
        return 2, None
    wall = time.perf_counter() - started
    rss_kb = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    runtime = {
        "wall_s": round(wall, 2),
        "max_rss_mb": round(rss_kb / 1024.0, 1),
        "runs": len(comparison.outcomes),
        "workers": max(1, args.workers),
        "run_wall_s": {o.label: round(o.wall_s, 2) for o in comparison.outcomes},
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    data = write_all(comparison, args.out, runtime)
    invariants = data["invariants"]
    assert isinstance(invariants, dict)
    return (1 if any(invariants.values()) else 0), data


def main(argv: list[str] | None = None) -> int:
    parser = configure(argparse.ArgumentParser(prog="python -m slurmkube_sim", description=__doc__))
    return run(parser.parse_args(argv))
