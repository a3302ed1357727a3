"""Health-aware against naive placement under injected node faults (issue 21), as one JSON document.

For each scenario and seed: one workload and one fault schedule (failures at
Meta's Llama 3 rate or a multiple, half of them announced by health signals,
as many false alarms; `slurmkube_sim.health_compare`), run under naive
placement and under health-aware placement with each drain rule (`drain`:
running jobs finish; `requeue`: they are requeued after a checkpoint).

The target (issue 21 item 7), per scenario, for each health-aware rule named
by --target: fewer jobs killed by failures than naive and no less GPU-weighted
gang goodput, on the mean over seeds; and no placement on a down node (any
mode) or on a sick node (health-aware). The worst seed is reported (paired
differences against naive), not judged. `meets_target` says whether it
holds; the exit code is 1 when it does not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from lending_policy import emit  # bench/ is on the path when a bench runs
from slurmkube_sim.alibaba import DEFAULT_TRACE_DIR, TracePod, load_pods
from slurmkube_sim.health_compare import CASES, MODES, figures, run_modes, summarise
from slurmkube_sim.scenario import build_workload

_PODS: Sequence[TracePod] = ()  # loaded once, inherited by the forked workers


def _one(task: tuple[str, int, int]) -> tuple[str, int, dict[str, dict[str, float]]]:
    name, seed, jobs = task
    case = CASES[name]
    workload = build_workload(case.scenario(), _PODS, jobs, seed)
    outcomes = run_modes(case, workload, seed)
    return name, seed, {mode: figures(o) for mode, o in outcomes.items()}


def main(argv: list[str] | None = None) -> int:
    global _PODS  # noqa: PLW0603 - read by forked workers only
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 1..N per scenario")
    parser.add_argument("--jobs", type=int, default=30_000, help="jobs per run (both sides)")
    parser.add_argument(
        "--scenarios", default="reference,stressed,bursty", help=f"of {sorted(CASES)}"
    )
    parser.add_argument(
        "--target", default="drain,requeue", help=f"modes judged, of {sorted(MODES)}"
    )
    parser.add_argument(
        "--trace",
        type=Path,
        default=Path(os.environ.get("SLURMKUBE_ALIBABA_TRACE", str(DEFAULT_TRACE_DIR))),
    )
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    targets = tuple(m for m in args.target.split(",") if m)
    bad = [n for n in names if n not in CASES] + [
        m for m in targets if m not in MODES or m == "naive"
    ]
    if bad or not names or not targets or args.seeds < 1:
        print(
            f"bench/health_sim.py: unknown or empty --scenarios/--target {bad} (scenarios: "
            f"{sorted(CASES)}; targets: {sorted(set(MODES) - {'naive'})}) or --seeds "
            f"{args.seeds} < 1",
            file=sys.stderr,
        )
        return 2
    started = time.perf_counter()
    try:
        _PODS = load_pods(args.trace)
        tasks = [(n, s, args.jobs) for n in names for s in range(1, args.seeds + 1)]
        if args.workers > 1:
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=args.workers, mp_context=context) as pool:
                results = list(pool.map(_one, tasks))
        else:
            results = [_one(t) for t in tasks]
    except (FileNotFoundError, ValueError) as err:
        print(f"bench/health_sim.py: {err}", file=sys.stderr)
        return 2
    scenarios: dict[str, dict[str, object]] = {}
    for name in names:
        seeds = {seed: runs for n, seed, runs in results if n == name}
        scenarios[name] = {
            "workload": CASES[name].workload,
            "faults": CASES[name].faults,
            **summarise(seeds, targets),
        }
    meets = all(s["meets_target"] for s in scenarios.values())
    fields = {"jobs": args.jobs, "seeds": args.seeds, "target_modes": list(targets)}
    return emit("health_sim", fields, scenarios, started, meets)


if __name__ == "__main__":
    sys.exit(main())
