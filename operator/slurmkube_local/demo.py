"""`make demo`: the sample fleet rendered by slurmkube, run by real Slurm daemons.

Renders examples/cluster.yaml for examples/fleet-nodes.yaml, starts slurmctld,
one slurmd per node and slurmrestd on loopback, submits a GPU gang job with
`--segment`, prints what Slurm says, and stops everything it started.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import yaml

from slurmkube.api.documents import parse_cluster, parse_nodes
from slurmkube.slurm.hostlist import expand
from slurmkube_local.local_slurm import LocalSlurm, start_local_slurm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _section(title: str, body: str) -> None:
    print(f"\n=== {title}\n{body.rstrip()}")


def _job_nodes(cluster: LocalSlurm, job_id: str) -> tuple[str, tuple[str, ...]]:
    out = cluster.run("scontrol", "-o", "show", "job", job_id)
    state = re.search(r"JobState=(\S+)", out)
    nodes = re.search(r" NodeList=(\S+)", out)
    return (state.group(1) if state else "?"), expand(nodes.group(1)) if nodes else ()


def main() -> int:
    bundle = parse_cluster(yaml.safe_load_all((EXAMPLES / "cluster.yaml").read_text()))
    nodes = parse_nodes(yaml.safe_load_all((EXAMPLES / "fleet-nodes.yaml").read_text()))
    print(f"slurmkube demo: {len(nodes)} Kubernetes nodes, {len(bundle.node_sets)} NodeSets")
    started = time.monotonic()
    with start_local_slurm(bundle, nodes) as cluster:
        cluster.wait_nodes_idle(timeout=180)
        print(f"{len(cluster.nodes)} slurmd registered in {time.monotonic() - started:.1f}s")
        for name in ("topology.yaml", "topology.conf"):
            if (cluster.conf_dir / name).exists():
                _section(f"{name} (rendered)", (cluster.conf_dir / name).read_text())
        _section("sinfo", cluster.run("sinfo"))
        _section("scontrol show topology", cluster.run("scontrol", "show", "topology"))
        script = "#!/bin/sh\nsrun sh -c 'echo $SLURMD_NODENAME' | sort | tr '\\n' ' '\nsleep 2\n"
        job = cluster.run(
            "sbatch",
            "--parsable",
            "-p",
            "gb200",
            "-N",
            "16",
            "--segment=16",
            "--gres=gpu:4",
            "--output",
            str(cluster.root / "job-%j.out"),
            input_script=script,
        ).strip()
        print(f"\nsubmitted gang job {job}: 16 nodes x 4 GPUs, --segment=16 (one NVLink domain)")
        cluster.wait_for(lambda: _job_nodes(cluster, job)[0] == "COMPLETED", "job done", 120)
        state, placed = _job_nodes(cluster, job)
        blocks = {}
        for line in cluster.run("scontrol", "show", "topology").splitlines():
            match = re.match(r"BlockName=(\S+) .*Nodes=(\S+)", line)
            if match:
                blocks[match.group(1)] = set(expand(match.group(2)))
        inside = [name for name, members in blocks.items() if set(placed) <= members]
        _section(f"job {job}: {state}", f"ran on {len(placed)} nodes: {','.join(placed)}")
        print(f"inside one NVLink block: {inside[0] if inside else 'NO'}")
        output = cluster.root / f"job-{job}.out"
        if output.exists():
            _section("job output: SLURMD_NODENAME of each task (srun)", output.read_text())
        if not inside:
            return 1
    print("\nall daemons stopped; demo done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
