"""`make demo`: slurmkube installed with Helm on the local control plane, a
SlurmCluster of Slurm 26.05.5 (examples/local-cluster.yaml) on the local
runtime's GPU nodes, its topology.yaml in force as the nodes' NVLink labels
say, a gang job in one NVLink block.

The chart is installed for real (CRDs, ServiceAccount, RBAC, metrics Service).
Its operator Deployment is scaled to zero, because the local pod runtime runs
only the Slurm image; the operator runs on the host instead, authenticated as
the chart's ServiceAccount with a token from the TokenRequest API, so it has
exactly the permissions the chart grants, no more. Everything stays up for a
look around; `make demo-down` stops the operator by PID, deletes the demo's
objects (slurmd pods drain first) and stops the cluster.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from slurmkube.slurm.hostlist import expand
from slurmkube_e2e import demo_goodput, processes
from slurmkube_e2e.fleet import CLIQUE_LABEL
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.kubectl import kubectl
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.operator import OPERATOR_ARGV, host_operator_env
from slurmkube_e2e.operator_cluster import API, LOCAL, in_pod, job_state
from slurmkube_e2e.topology import parse_blocks
from slurmkube_e2e.waiting import has_condition, wait_for, wait_gone

RELEASE = "slurmkube"
OPERATOR_NAMESPACE = "slurmkube-system"
# `make images` tags its images slurmkube/<name> (IMAGE_REPO); the chart wants a source named.
LOCAL_IMAGE_REGISTRY = "slurmkube"
NAMESPACE = "slurm-demo"
CLUSTER = "demo"
CTLD_POD = f"{CLUSTER}-slurmctld-0"
# The values the demo installs the chart with, and the e2e RBAC audit renders it with.
CHART_VALUES = (
    # The local runtime runs only the Slurm image: the operator runs on the
    # host, as the chart's ServiceAccount (see the module docstring).
    "--set",
    "replicaCount=0",
    # The chart names no image by default; the local one `make images` builds.
    "--set",
    f"image.registry={LOCAL_IMAGE_REGISTRY}",
)


class DemoError(RuntimeError):
    """A demo step failed; the message says which and where to look."""


def _demo_dir(layout: Layout) -> Path:
    return layout.run / "demo"


def _operator(layout: Layout, kubeconfig: Path) -> processes.Process:
    env = host_operator_env(kubeconfig, "demo-operator", OPERATOR_NAMESPACE)
    env["SLURMKUBE_GOODPUT_SECONDS"] = demo_goodput.GOODPUT_SECONDS
    return processes.Process(
        name="slurmkube-operator",
        argv=(*OPERATOR_ARGV, "--metrics-port", str(layout.ports.demo_operator_metrics)),
        pid_dir=layout.pids,
        log_dir=layout.logs,
        env=tuple(env.items()),
    )


def _helm(layout: Layout, *args: str) -> str:
    done = subprocess.run(
        [str(layout.bin / "helm"), f"--kubeconfig={layout.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"helm {' '.join(args[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def _service_account_kubeconfig(layout: Layout) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount (TokenRequest)."""
    token = kubectl(
        layout.kubectl,
        layout.kubeconfig,
        ["-n", OPERATOR_NAMESPACE, "create", "token", RELEASE, "--duration=24h"],
    ).strip()
    admin: dict[str, Any] = yaml.safe_load(layout.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": RELEASE, "user": {"token": token}}],
        "contexts": [{"name": RELEASE, "context": {"cluster": "local", "user": RELEASE}}],
        "current-context": RELEASE,
    }
    path = _demo_dir(layout) / "operator.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    # A bearer token: readable by the owner only.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(config, out)
    return path


def _section(title: str, body: str) -> None:
    print(f"\n=== {title}\n{body.rstrip()}", flush=True)


def _wait_job_done(job: str, timeout: float = 120) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        state, nodes = job_state(NAMESPACE, job, CTLD_POD)
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state, nodes
        if time.monotonic() > deadline:
            raise DemoError(f"job {job} still {state} after {timeout:.0f}s")
        time.sleep(1)


def _labelled_blocks(kube: Kube) -> dict[str, frozenset[str]]:
    """{NVLink domain: its nodes} as the local nodes' clique labels say: the blocks
    topology.yaml's `nvlink` topology must hold (four nodes a domain, blockSize 4)."""
    domains: dict[str, set[str]] = {}
    selector = ",".join(f"{key}={value}" for key, value in LOCAL.items())
    for node in kube.list("v1", "Node", label_selector=selector):
        labels = node["metadata"].get("labels") or {}
        if CLIQUE_LABEL in labels:
            domains.setdefault(labels[CLIQUE_LABEL], set()).add(node["metadata"]["name"])
    return {domain: frozenset(nodes) for domain, nodes in domains.items()}


def up(layout: Layout) -> int:
    kube = Kube(layout.kubeconfig)
    chart = layout.root / "helm" / "slurmkube"
    print(f"demo: helm upgrade --install {RELEASE} {chart.relative_to(layout.root)}", flush=True)
    _helm(
        layout,
        "upgrade",
        "--install",
        RELEASE,
        str(chart),
        "--namespace",
        OPERATOR_NAMESPACE,
        "--create-namespace",
        *CHART_VALUES,
    )
    print(_helm(layout, "list", "--namespace", OPERATOR_NAMESPACE).rstrip())
    operator_kubeconfig = _service_account_kubeconfig(layout)
    operator = _operator(layout, operator_kubeconfig)
    pid = processes.start(operator)
    print(
        f"demo: operator pid {pid} as system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}, "
        f"log {operator.log_file}",
        flush=True,
    )
    prometheus = demo_goodput.start_prometheus(layout, _demo_dir(layout))
    print(f"demo: prometheus {prometheus} scrapes the operator's /metrics", flush=True)

    if kube.get("v1", "Namespace", NAMESPACE) is None:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=NAMESPACE)
    sample = layout.root / "examples" / "local-cluster.yaml"
    for doc in yaml.safe_load_all(sample.read_text()):
        kube.apply(doc, namespace=NAMESPACE)
    print(f"demo: applied {sample.relative_to(layout.root)} in namespace {NAMESPACE}", flush=True)
    started = time.monotonic()
    cluster = wait_for(
        kube,
        API,
        "SlurmCluster",
        CLUSTER,
        lambda o: has_condition(o, "Ready"),
        namespace=NAMESPACE,
        timeout=300,
    )
    status = cluster["status"]
    print(
        f"demo: SlurmCluster {CLUSTER} Ready in {time.monotonic() - started:.1f}s: "
        f"{status['nodes']['idle']} idle nodes, {status['gpus']['total']} GPUs, "
        f"config {status.get('configHash', '')[:12]}",
        flush=True,
    )
    _section(
        f"kubectl -n {NAMESPACE} get slurmclusters,nodesets,pods -o wide",
        kubectl(
            layout.kubectl,
            layout.kubeconfig,
            ["-n", NAMESPACE, "get", "slurmclusters,nodesets,pods", "-o", "wide"],
        ),
    )
    _section(
        "sinfo --version (in the slurmctld pod)", in_pod(NAMESPACE, CTLD_POD, "sinfo", "--version")
    )
    _section("sinfo (in the slurmctld pod)", in_pod(NAMESPACE, CTLD_POD, "sinfo", "-N", "-l"))
    topology = in_pod(NAMESPACE, CTLD_POD, "scontrol", "show", "topology")
    _section("scontrol show topology", topology)
    blocks, labelled = parse_blocks(topology), _labelled_blocks(kube)
    if blocks != labelled:
        raise DemoError(
            f"Slurm shows the blocks {blocks}, the nodes' {CLIQUE_LABEL} labels {labelled}"
        )
    print(f"\ndemo: the blocks Slurm shows are the nodes' {CLIQUE_LABEL} domains ({len(blocks)})")

    script = "#!/bin/sh\nsrun sh -c 'echo $SLURMD_NODENAME' | sort | tr '\\n' ' '\n"
    job = in_pod(
        NAMESPACE,
        CTLD_POD,
        "sbatch",
        "--parsable",
        "-N4",
        "--segment=4",
        "--gres=gpu:4",
        "--wrap",
        script.splitlines()[1],
    ).strip()
    print(f"\ndemo: sbatch -N4 --segment=4 --gres=gpu:4 (a gang in one NVLink block): job {job}")
    state, nodes = _wait_job_done(job)
    inside = [name for name, members in blocks.items() if members == frozenset(expand(nodes))]
    _section(f"job {job}: {state}", f"ran on {nodes}; block: {inside[0] if inside else 'NONE'}")

    settle = float(demo_goodput.GOODPUT_SECONDS) + 2 * demo_goodput.SCRAPE_SECONDS
    time.sleep(settle)  # the gang job's start reaches the counters before the window
    began = time.time()
    mix = demo_goodput.run_mix(NAMESPACE, CTLD_POD)
    print(f"\ndemo: a job mix for goodput: jobs {' '.join(mix)}", flush=True)
    for each in mix:
        _wait_job_done(each, timeout=300)
    time.sleep(settle)
    png = _demo_dir(layout) / "goodput.png"
    figures = demo_goodput.report(prometheus, NAMESPACE, began, time.time(), png)
    _section("goodput of the job mix (PromQL against Prometheus)", figures)
    latest = kube.get(API, "SlurmCluster", CLUSTER, namespace=NAMESPACE) or cluster
    conditions = "\n".join(
        f"  {c['type']:<22} {c['status']:<5} {c['reason']}: {c['message']}"
        for c in latest["status"]["conditions"]
    )
    _section(f"SlurmCluster {CLUSTER} status", conditions)
    print(
        f"\ndemo: left running. KUBECONFIG={layout.kubeconfig}; "
        f"Slurm commands: slurmkube-e2e exec -n {NAMESPACE} {CTLD_POD} -- sinfo; "
        "stop it all with `make demo-down`."
    )
    return 0 if state == "COMPLETED" and inside else 1


def down(layout: Layout) -> int:
    kube = Kube(layout.kubeconfig)
    operator = _operator(layout, _demo_dir(layout) / "operator.kubeconfig")
    if kube.get("v1", "Namespace", NAMESPACE) is not None:
        # The operator drains and removes the slurmd pods before the NodeSet goes.
        for kind, name in (("NodeSet", "gpu"), ("SlurmCluster", CLUSTER)):
            kube.delete(API, kind, name, namespace=NAMESPACE)
        wait_gone(kube, API, "NodeSet", "gpu", namespace=NAMESPACE, timeout=180)
        kube.delete("v1", "Namespace", NAMESPACE)
        wait_gone(kube, "v1", "Namespace", NAMESPACE, timeout=180)
    stopped = processes.stop(operator)
    if stopped is not None:
        print(f"demo: operator pid {stopped} stopped")
    if processes.stop(demo_goodput.prometheus_process(layout, _demo_dir(layout))) is not None:
        print("demo: prometheus stopped")
    if _helm(layout, "list", "-q", "--namespace", OPERATOR_NAMESPACE).strip():
        _helm(layout, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE)
        print(f"demo: helm release {RELEASE} uninstalled")
    return 0
