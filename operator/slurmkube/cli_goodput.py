"""`slurmkube goodput`: one window's goodput recomputed from Slurm's own records.

It reads what `scontrol show job --json` and `scontrol show node --json` print
(or slurmrestd's `GET .../jobs` and `.../nodes`), and where the cluster lends to
Kueue, the Workloads under the bridge's check and the operator's handover
Events on the lent Nodes (`goodput.handovers`), and where slurmdbd keeps the
cluster's accounting, its node events (`goodput.node_history`: drained and down
nodes), and prints the ledger's report
as JSON, with the GPU-seconds by state under the live exporter's names, so a
window of `slurmkube_goodput_*` can be checked against Slurm after the fact.
Finished jobs stay in Slurm's list for MinJobAge (300 s by default).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.goodput.handovers import KINDS, Handover, lent_nodes
from slurmkube.goodput.live import LiveGang, LiveNode
from slurmkube.goodput.node_history import Outage, parse_events
from slurmkube.goodput.offline import recompute
from slurmkube.lending import our_check
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
        "--workloads",
        help="`kubectl get workloads -o json` output: the Kueue Workloads lent Slurm nodes",
    )
    goodput.add_argument("--check", help="with --workloads: the bridge's AdmissionCheck name")
    goodput.add_argument(
        "--events",
        help="`kubectl get events -n NAMESPACE -o json` output: the operator's handover "
        "Events on the SlurmCluster (reasons Lent, LeaseEnded, BackInSlurm)",
    )
    goodput.add_argument(
        "--node-events",
        help="`SLURM_TIME_FORMAT=%%s sacctmgr -P -n list event Event=Node All_Time "
        "Format=NodeName,TimeStart,TimeEnd,State,Reason` output: the drained and down "
        "nodes (default: every node healthy the whole window)",
    )
    goodput.add_argument(
        "--from", dest="start", type=float, help="window start, Unix time (default: first submit)"
    )
    goodput.add_argument("--to", dest="end", type=float, help="window end (default: now)")
    goodput.set_defaults(func=run)


def _document(path: str, what: str, key: str | None = None) -> dict[str, Any]:
    key = key or what
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise GoodputInputError(f"--{what} {path}: {err}") from err
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        hint = "" if key == "items" else " (Slurm's --json output?)"
        raise GoodputInputError(f"--{what} {path}: no {key!r} list{hint}")
    return doc


def _handovers(path: str) -> list[Handover]:
    """The operator's handover Events (on the SlurmCluster), by their microsecond
    `eventTime`."""
    out = []
    for item in _document(path, "events", "items")["items"]:
        reason = item.get("reason")
        annotations = (item.get("metadata") or {}).get("annotations") or {}
        if reason not in KINDS or item.get("reportingComponent") != wk.FIELD_MANAGER:
            continue
        if not item.get("eventTime") or wk.ANNOTATION_NODE not in annotations:
            continue
        try:
            at = dt.datetime.fromisoformat(str(item["eventTime"]).replace("Z", "+00:00"))
        except ValueError as err:
            name = (item.get("metadata") or {}).get("name")
            raise GoodputInputError(f"--events {path}: Event {name} eventTime: {err}") from err
        node, lease = annotations[wk.ANNOTATION_NODE], annotations.get(wk.ANNOTATION_LEASE, "")
        out.append(Handover(at.timestamp(), str(node), reason, str(lease)))
    return sorted(out, key=lambda h: (h.t, h.node))


def _outages(path: str) -> list[Outage]:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise GoodputInputError(f"--node-events {path}: {err}") from err
    try:
        return parse_events(text, f"--node-events {path}")
    except ValueError as err:
        raise GoodputInputError(str(err)) from err


def _kueue_gangs(
    path: str, check: str | None, handovers: list[Handover], gpus: dict[str, int], end: float
) -> list[LiveGang]:
    from slurmkube.controllers.goodput_observe import kueue_gang

    if not check:
        raise GoodputInputError("--workloads needs --check (the bridge's AdmissionCheck)")
    lent = lent_nodes(handovers)
    gangs = []
    for raw in _document(path, "workloads", "items")["items"]:
        if our_check(raw, {check}) is None:
            continue
        meta = raw["metadata"]
        nodes = [(n, gpus.get(n, 0)) for n in lent.get(str(meta["uid"]), [])]
        gang = kueue_gang(raw, check, str(meta.get("namespace", "")), nodes, end)
        if gang is not None:
            gangs.append(gang)
    return gangs


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
    fleet = {n.name: n.gpus for n in listed if "POWERED_DOWN" not in n.state}  # deployed
    recorded = _handovers(args.events) if args.events else []
    handovers = [h for h in recorded if h.node in fleet]  # not another cluster's nodes
    lends = args.workloads is not None or bool(handovers)  # the nodes are transferable
    if args.workloads is not None:
        gangs += _kueue_gangs(args.workloads, args.check, handovers, fleet, end)
    start = args.start
    if start is None:
        start = min((g.submitted for g in gangs), default=end)
    if end < start:
        raise GoodputInputError(f"--to {end} is before --from {start}")
    nodes = [LiveNode(name, gpus, transferable=lends) for name, gpus in fleet.items()]
    outages = _outages(args.node_events) if args.node_events else []
    found = recompute(nodes, gangs, (start, end), handovers=handovers, outages=outages)
    out = found.report.as_dict()
    out["gpu_seconds"] = dict(found.gpu_seconds)
    out["waits_s"] = {b: list(w) for b, w in found.report.waits_by_bucket.items() if w}
    return out


def run(args: argparse.Namespace) -> int:
    print(json.dumps(report(args), indent=2, sort_keys=True))
    return 0
