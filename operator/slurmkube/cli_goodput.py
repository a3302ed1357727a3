"""`slurmkube goodput`: one window's goodput recomputed from Slurm's own records.

It reads what `scontrol show job --json` and `scontrol show node --json` print
(or slurmrestd's `GET .../jobs` and `.../nodes`) and prints the ledger's report
as JSON, with the GPU-seconds by state under the live exporter's names, so a
window of `slurmkube_goodput_*` can be checked against Slurm after the fact.
Finished jobs stay in Slurm's list for MinJobAge (300 s by default).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from slurmkube.goodput.live import LiveNode
from slurmkube.goodput.offline import recompute
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.parse import jobs_from, nodes_from


class GoodputInputError(Exception):
    """A file that is not Slurm's JSON, or a window that makes no sense."""


def add_parser(sub: Any) -> None:
    goodput = sub.add_parser(
        "goodput",
        help="recompute a window's goodput from Slurm's job and node lists (JSON)",
    )
    goodput.add_argument("--jobs", required=True, help="`scontrol show job --json` output")
    goodput.add_argument("--nodes", required=True, help="`scontrol show node --json` output")
    goodput.add_argument(
        "--from", dest="start", type=float, help="window start, Unix time (default: first submit)"
    )
    goodput.add_argument("--to", dest="end", type=float, help="window end (default: now)")
    goodput.set_defaults(func=run)


def _document(path: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise GoodputInputError(f"--{what} {path}: {err}") from err
    if not isinstance(doc, dict) or what not in doc:
        raise GoodputInputError(f"--{what} {path}: no {what!r} list (Slurm's --json output?)")
    return doc


def report(args: argparse.Namespace) -> dict[str, Any]:
    # The exporter's reading of a job, imported here: the other subcommands need no
    # controller modules.
    from slurmkube.controllers.goodput_observe import slurm_gang

    end = args.end if args.end is not None else time.time()
    try:
        jobs = jobs_from(_document(args.jobs, "jobs"))
        listed = nodes_from(_document(args.nodes, "nodes"))
    except SlurmError as err:
        raise GoodputInputError(str(err)) from err
    gangs = [slurm_gang(job, end) for job in jobs]
    start = args.start
    if start is None:
        start = min((g.submitted for g in gangs), default=end)
    if end < start:
        raise GoodputInputError(f"--to {end} is before --from {start}")
    nodes = [
        LiveNode(n.name, n.gpus)
        for n in listed
        if "POWERED_DOWN" not in n.state  # not deployed: no GPUs in the fleet
    ]
    found = recompute(nodes, gangs, (start, end))
    out = found.report.as_dict()
    out["gpu_seconds"] = dict(found.gpu_seconds)
    out["waits_s"] = {b: list(w) for b, w in found.report.waits_by_bucket.items() if w}
    return out


def run(args: argparse.Namespace) -> int:
    print(json.dumps(report(args), indent=2, sort_keys=True))
    return 0
