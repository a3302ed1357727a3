"""Autoscaling benchmark on the local runtime: submit to job start when scaling from zero.

A SlurmCluster whose NodeSet (the eight local nodes, two NVLink blocks of
four) autoscales from zero; each round submits `sbatch -N <nodes>
--segment=<nodes>` while every node is powered down and times, from the
moment sbatch returned:

  slurm_decision        Slurm marks the job's nodes POWERING_UP (scheduler + power_save)
  pod_creation          the operator has created every slurmd pod for them
  slurmd_registration   every slurmd registered (POWERING_UP cleared)
  job_start             the job runs (RUNNING without CONFIGURING)

(each phase from the end of the one before), plus `sbatch_seconds`, the time
sbatch itself took (run inside the slurmctld pod). Slurm and Kubernetes are
polled every 50 ms (slurmrestd, the API server), so phases are exact to about
that. Between rounds the nodes power down again (SuspendTime 10 s).

Prints one JSON line. The operator runs as in the e2e suite (a host process
dialling pod IPs); it is started and stopped here, by PID.

    SLURMKUBE_SLOT=N KUBECONFIG=.run/kubeconfig PYTHONPATH=e2e \\
        .venv/bin/python bench/autoscale.py [--rounds 3] [--nodes 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurmkube.api.models import SlurmCluster, from_object
from slurmkube.controllers.clients import SlurmClients
from slurmkube.controllers.settings import Settings
from slurmkube.kube.client import Kube as OperatorKube
from slurmkube.kube.client import load_config
from slurmkube.slurm.rest import RestClient
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.operator import OperatorProcess, install_for_host_operator
from slurmkube_e2e.operator_cluster import API, autoscaled_docs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from reconcile import condition, delete_namespace, namespace, operator_env, poll  # noqa: E402

PHASES = ("slurm_decision", "pod_creation", "slurmd_registration", "job_start")
SLURMD = "app.kubernetes.io/name=slurmd"
EXEC = (sys.executable, "-m", "slurmkube_e2e", "exec", "-n")


def sbatch(ns: str, *argv: str) -> str:
    proc = subprocess.run(
        [*EXEC, ns, "local-slurmctld-0", "--", "sbatch", "--parsable", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout.strip()


def one_round(kube: Kube, slurm: RestClient, ns: str, nodes: int) -> dict[str, float]:
    poll(
        "every node powered down, no slurmd pod",
        lambda: (
            all("POWERED_DOWN" in n.state for n in slurm.list_nodes())
            and not kube.list("v1", "Pod", namespace=ns, label_selector=SLURMD)
        ),
        180,
        0.5,
    )
    before = time.monotonic()
    job = int(sbatch(ns, f"-N{nodes}", f"--segment={nodes}", "--wrap", "sleep 1"))
    submitted = time.monotonic()
    marks: dict[str, float] = {}
    chosen: set[str] = set()
    deadline = submitted + 300
    while "job_start" not in marks:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/autoscale: job {job} did not start: {marks}")
        now = time.monotonic()
        states = {n.name: n.state for n in slurm.list_nodes()}
        if not chosen:
            chosen = {n for n, s in states.items() if "POWERING_UP" in s}
            if chosen:
                marks["slurm_decision"] = now
        if chosen and "pod_creation" not in marks:
            pods = kube.list("v1", "Pod", namespace=ns, label_selector=SLURMD)
            if {p["metadata"]["labels"]["slurmkube.io/node"] for p in pods} >= chosen:
                marks["pod_creation"] = now
        registered = not any("POWERING_UP" in states[n] for n in chosen)
        if "pod_creation" in marks and "slurmd_registration" not in marks and registered:
            marks["slurmd_registration"] = now
        if "slurmd_registration" in marks:
            (found,) = [j for j in slurm.list_jobs({"RUNNING", "COMPLETED"}) if j.job_id == job]
            # A job on resuming nodes is RUNNING+CONFIGURING from its allocation on;
            # it starts when CONFIGURING clears.
            if found.state & {"RUNNING", "COMPLETED"} and "CONFIGURING" not in found.state:
                marks["job_start"] = now
        time.sleep(0.05)
    out = {"sbatch_seconds": submitted - before}
    start = submitted
    for phase in PHASES:
        out[phase] = marks[phase] - start
        start = marks[phase]
    out["submit_to_start"] = marks["job_start"] - submitted
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=4, help="nodes per job (a block: 4)")
    args = parser.parse_args()
    kubeconfig = Path(os.environ.get("KUBECONFIG") or Layout.from_env().kubeconfig)
    if not kubeconfig.exists():
        print(f"bench/autoscale: no cluster ({kubeconfig}); run make cluster-up", file=sys.stderr)
        return 1
    os.environ["SLURMKUBE_POD_IP_ENDPOINTS"] = "1"  # the bench, too, dials pod IPs
    kube = Kube(kubeconfig)
    install_for_host_operator(kube)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        operator = OperatorProcess(operator_env(kubeconfig), Path(tmp) / "operator.log")
        operator.start()
        ns = namespace(kube, "autoscale")
        try:
            for doc in autoscaled_docs(ns, suspendTimeSeconds=10, resumeTimeoutSeconds=120):
                kube.apply(doc)
            poll(
                "Ready",
                lambda: condition(kube.get(API, "SlurmCluster", "local", ns), "Ready"),
                300,
            )
            raw = kube.get(API, "SlurmCluster", "local", ns)
            assert raw is not None
            cluster = from_object(SlurmCluster, raw)
            clients = SlurmClients(Settings.from_environment(os.environ))
            slurm = clients.rest(OperatorKube(load_config(str(kubeconfig))), cluster)
            assert slurm is not None
            for _ in range(args.rounds):
                rounds.append(one_round(kube, slurm, ns, args.nodes))
        finally:
            delete_namespace(kube, ns)
            if operator.stop() not in (0, -15, None):
                print(operator.tail(), file=sys.stderr)
    keys = ("sbatch_seconds", *PHASES, "submit_to_start")
    print(
        json.dumps(
            {
                "bench": "autoscale_from_zero",
                "nodes_per_job": args.nodes,
                "rounds": len(rounds),
                "median_seconds": {
                    k: round(statistics.median(r[k] for r in rounds), 2) for k in keys
                },
                "max_seconds": {k: round(max(r[k] for r in rounds), 2) for k in keys},
                "per_round": [{k: round(r[k], 2) for k in keys} for r in rounds],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
