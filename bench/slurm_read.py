"""The autoscale poll's Slurm read at 1,000 and 25,000 nodes (issue 15).

Starts real slurmctld and slurmrestd (Slurm 24.11.5, `make slurm`) with a
rendered fleet of N GPU nodes that run no slurmd, and times, once the nodes
are quiet:
- `node_list`: every node, as a reconcile reads them after a change;
- each candidate "did anything change" signal, asked with the update_time of
  its last full answer (the median of repeated calls):
  `nodes` (`GET /nodes/?update_time`: 304 when no node changed), `jobs`
  (`/jobs/?update_time`, the poll's first question), `partitions`
  (`/partitions/?update_time`), `diag` (sdiag's counters) and `ping`;
- what each signal sees: a node drained with `scontrol`, and a job submitted,
  each asked again with the update_time from before it. `diag` and `ping`
  carry no update time, so they cannot tell.

The poll (controllers/slurm_poll.py) asks `jobs` every 2 s: a node turns busy
or idle, and power saving resumes one, only as a job starts or ends. It asks
`nodes` only after a job changed or while a node read is due (a node between
power states, an idle node whose SuspendTime ran out); a drain is read by the
cluster's reconcile. So its cost in a quiet fleet is the `jobs` signal's,
which must see a job submitted.

`--slurm 26.05` runs slurmctld and slurmrestd from the Slurm 26.05 image `make
images` built (bench/slurm_image_stack.py) instead of the 24.11.5 host build.

Target: the poll's signal at 25,000 nodes within 2x of its cost at 1,000.
One JSON line per fleet size and one verdict line; exits 1 on a miss.

    python bench/slurm_read.py [--sizes 1000,25000] [--repeat 20] [--slurm 26.05]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx

from slurmkube.api.documents import parse_cluster
from slurmkube.slurm.errors import SlurmUnreachable
from slurmkube.slurm.parse import update_time_of
from slurmkube.slurm.rest import RestClient
from slurmkube.slurm.tokens import JwtMinter
from slurmkube_local.builders import cluster_docs, nvl_fleet
from slurmkube_local.local_slurm import start_local_slurm

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_image_stack import start_image_slurm

PER_DOMAIN = 18
TARGET_RATIO = 2.0
# The signal the poll asks every 2 s (RestClient.jobs_changed_since), and the one it
# asks after that when a job changed or a node read is due (nodes_changed_since).
POLL_SIGNAL = "jobs"
NODE_SIGNAL = "nodes"
# Signals whose answer says "changed since update_time" (304 or no last_update: no).
SINCE_SIGNALS = ("nodes", "jobs", "partitions")
TIMED_SIGNALS = (*SINCE_SIGNALS, "diag", "ping")


HOST_SLURM = "24.11"


class SlurmUnderTest(Protocol):
    """The host build (LocalSlurm) or an image's daemons (ImageSlurm)."""

    @property
    def conf_dir(self) -> Path: ...
    @property
    def rest_url(self) -> str: ...
    @property
    def nodes(self) -> list[str]: ...
    def run(self, *argv: str) -> str: ...


@contextmanager
def started(size: int, slurm: str) -> Iterator[SlurmUnderTest]:
    fleet = nvl_fleet(-(-size // PER_DOMAIN), PER_DOMAIN)[:size]
    if slurm == HOST_SLURM:
        bundle = parse_cluster(cluster_docs(block_size=PER_DOMAIN))
        with start_local_slurm(bundle, fleet, start_slurmd=[]) as cluster:
            yield cluster
        return
    versioned = cluster_docs(block_size=PER_DOMAIN, extra={"slurm": {"version": slurm}})
    with start_image_slurm(parse_cluster(versioned), fleet, slurm) as image:
        yield image


def timed(call: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


class Signals:
    """Raw slurmrestd GETs, so each signal costs one request and no decoding
    beyond its own (small) answer."""

    def __init__(self, cluster: SlurmUnderTest, data_parser: str) -> None:
        token = JwtMinter.from_file(cluster.conf_dir / "jwt.key", "root")
        self._http = httpx.Client(
            base_url=f"{cluster.rest_url}/slurm/{data_parser}",
            timeout=300.0,
            headers={"X-SLURM-USER-TOKEN": token()},
        )
        self.since: dict[str, int] = {}

    def close(self) -> None:
        self._http.close()

    def settle(self) -> None:
        """Each signal's update_time, from a full answer of it."""
        for name in SINCE_SIGNALS:
            answer = self._http.get(f"/{name}/")
            answer.raise_for_status()
            self.since[name] = update_time_of(answer.json())

    def wait_quiet(self, size: int) -> None:
        """Until no signal changes: nodes without slurmd go NOT_RESPONDING once,
        then nothing changes."""
        deadline = time.monotonic() + 120
        self.settle()
        while any(self.changed(name) for name in SINCE_SIGNALS):
            if time.monotonic() > deadline:
                raise SystemExit(f"bench/slurm_read: {size} nodes never stopped changing")
            time.sleep(2)
            self.settle()

    def changed(self, name: str) -> bool:
        """Whether `name` says something changed since its update_time. 24.11's
        slurmrestd answers `nodes` with 500 when nodes changed but partitions did
        not (openapi/slurmctld nodes.c): any answer but a 304 or an unchanged
        one is a change."""
        answer = self._http.get(f"/{name}/", params={"update_time": self.since[name]})
        if answer.status_code == 304:
            return False
        if answer.status_code != 200:
            return True
        # /jobs answers "No job changes" as a 200 without last_update.
        return bool(update_time_of(answer.json()))

    def ask(self, name: str) -> None:
        if name in SINCE_SIGNALS:
            self.changed(name)
        else:
            self._http.get(f"/{name}/").raise_for_status()


def measure(size: int, repeat: int, slurm: str) -> dict[str, Any]:
    begun = time.monotonic()
    with started(size, slurm) as cluster:
        up = time.monotonic() - begun
        with RestClient(
            cluster.rest_url, jwt_key_file=cluster.conf_dir / "jwt.key", timeout=300.0
        ) as rest:
            signals = Signals(cluster, _data_parser(rest))
            try:
                return {
                    "bench": "slurm_read",
                    "slurm": slurm,
                    "nodes": len(rest.node_list().nodes),
                    "slurm_up_seconds": round(up, 1),
                    **_quiet_figures(cluster, rest, signals, size, repeat),
                }
            finally:
                signals.close()


def _data_parser(rest: RestClient) -> str:
    """Once slurmrestd listens: start_local_slurm does not wait for it, and beside a
    slurmctld loading 25,000 nodes it may take a while."""
    deadline = time.monotonic() + 300
    while True:
        try:
            return rest.data_parser
        except SlurmUnreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def _quiet_figures(
    cluster: SlurmUnderTest, rest: RestClient, signals: Signals, size: int, repeat: int
) -> dict[str, Any]:
    signals.wait_quiet(size)
    full = timed(rest.node_list, max(3, repeat // 5))
    costs = {name: timed(functools.partial(signals.ask, name), repeat) for name in TIMED_SIGNALS}
    quiet = {name: signals.changed(name) for name in SINCE_SIGNALS}
    node = cluster.nodes[0]
    cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=bench")
    try:
        # The node probe after a change: 24.11's slurmrestd has slurmctld pack every
        # node before it answers, so this one grows with the fleet.
        start = time.perf_counter()
        seen = {NODE_SIGNAL: signals.changed(NODE_SIGNAL)}
        changed_probe = time.perf_counter() - start
        seen |= {name: signals.changed(name) for name in SINCE_SIGNALS if name not in seen}
    finally:
        cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
    return {
        "full_read_s_p50": round(full, 4),
        "signal_s_p50": {name: round(cost, 5) for name, cost in costs.items()},
        "node_probe_after_change_s": round(changed_probe, 4),
        # A sound signal answers "no change" while quiet and "changed" after the change.
        "sees_node_drain": {n: seen[n] and not quiet[n] for n in SINCE_SIGNALS},
        "sees_job_submitted": _sees_job_submitted(cluster, signals, size),
    }


def _sees_job_submitted(cluster: SlurmUnderTest, signals: Signals, size: int) -> dict[str, bool]:
    """Each signal's answer to a held job submitted once it is quiet again."""
    signals.wait_quiet(size)
    time.sleep(1.1)  # slurmctld counts a change in the answer's own second as a change
    quiet = {name: signals.changed(name) for name in SINCE_SIGNALS}
    job = cluster.run("sbatch", "--parsable", "--hold", "-N1", "--wrap", "true").strip()
    try:
        return {n: signals.changed(n) and not quiet[n] for n in SINCE_SIGNALS}
    finally:
        cluster.run("scancel", job.split(";")[0])


def verdict(small: dict[str, Any], large: dict[str, Any]) -> dict[str, Any]:
    ratios = {
        name: round(large["signal_s_p50"][name] / small["signal_s_p50"][name], 2)
        for name in TIMED_SIGNALS
    }
    sound = all(r["sees_job_submitted"][POLL_SIGNAL] for r in (small, large))
    return {
        "bench": "slurm_read_poll_scaling",
        "slurm": small["slurm"],
        "nodes": [small["nodes"], large["nodes"]],
        "poll_signal": POLL_SIGNAL,
        "poll_signal_sees_a_job": sound,
        "poll_ratio": ratios[POLL_SIGNAL],
        # What a node read costs when one is due (a job changed, power saving at work).
        "node_probe_ratio": ratios[NODE_SIGNAL],
        "signal_ratios": ratios,
        "full_read_ratio": round(large["full_read_s_p50"] / small["full_read_s_p50"], 2),
        "target_ratio": TARGET_RATIO,
        "load_average": os.getloadavg()[0],
        "meets_target": sound and ratios[POLL_SIGNAL] <= TARGET_RATIO,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,25000")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--slurm", default=HOST_SLURM, help="24.11 (the host build) or an image's series (26.05)"
    )
    args = parser.parse_args()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        results.append(measure(size, args.repeat, args.slurm))
        print(json.dumps(results[-1]), flush=True)
    judged = verdict(results[0], results[-1])
    print(json.dumps(judged), flush=True)
    return 0 if judged["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
