"""`make demo`: slurmkube installed with Helm on the local control plane, its
operator a pod from the operator image, a SlurmCluster of Slurm 26.05.5
(examples/real-node-cluster.yaml) on the real nodes (upstream kubelets on
containerd 2.x, docs/local-kubernetes.md), its topology.yaml in force as the
nodes' NVLink labels say, a gang job in one NVLink block, and the goodput of a
job mix from Prometheus scraping the operator pod.

Everything stays up for a look around; `make demo-down` deletes the demo's
objects (slurmd pods drain first), uninstalls the chart and stops the cluster.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import yaml

from slurmkube.api import well_known as wk
from slurmkube.slurm.hostlist import expand
from slurmkube_e2e import demo_goodput, processes
from slurmkube_e2e.demo_goodput import GOODPUT_SECONDS
from slurmkube_e2e.fleet import CLIQUE_LABEL
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.kubectl import kubectl
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.operator_cluster import API
from slurmkube_e2e.pod_exec import kubectl_exec
from slurmkube_e2e.realnode_config import REAL_FLEET, REAL_NODE_TAINT
from slurmkube_e2e.topology import parse_blocks
from slurmkube_e2e.waiting import has_condition, wait_for, wait_gone

RELEASE = "slurmkube"
OPERATOR_NAMESPACE = "slurmkube-system"
# `make images` tags its images localhost/slurmkube/<name>; the chart wants a source named.
LOCAL_IMAGE_REGISTRY = "localhost/slurmkube"
METRICS_PORT = 9090  # the chart's metrics.port
PRIORITY_API = "scheduling.k8s.io/v1"
SLURMCTLD_PORT = 6817  # slurmctld serves its OpenMetrics on its own port
ON_REAL = {"e2e.slurmkube.io/fleet": REAL_FLEET}
NAMESPACE = "slurm-demo"
CLUSTER = "demo"
CTLD_POD = f"{CLUSTER}-slurmctld-0"
# The values the demo installs the chart with, and the e2e RBAC audit renders it with.
CHART_VALUES = (
    "--set",
    "replicaCount=1",
    # The chart names no image by default; the local one `make images` builds.
    "--set",
    f"image.registry={LOCAL_IMAGE_REGISTRY}",
    # Only pods that tolerate the real nodes' taint land there.
    "--set-json",
    f'nodeSelector={{"e2e.slurmkube.io/fleet": "{REAL_FLEET}"}}',
    "--set-json",
    f'tolerations=[{{"key": "{REAL_NODE_TAINT}", "operator": "Exists", "effect": "NoSchedule"}}]',
    # The goodput exporter ticks every 5 s so a two-minute mix draws a line.
    "--set-json",
    "extraEnv=" + json.dumps([{"name": "SLURMKUBE_GOODPUT_SECONDS", "value": GOODPUT_SECONDS}]),
)


class DemoError(RuntimeError):
    """A demo step failed; the message says which and where to look."""


def _demo_dir(layout: Layout) -> Path:
    return layout.run / "demo"


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


def in_ctld(*argv: str) -> str:
    return kubectl_exec(NAMESPACE, CTLD_POD, *argv, container="slurmctld")


def job_state(job: str) -> tuple[str, str]:
    """(JobState, NodeList) as slurmctld reports them."""
    out = in_ctld("scontrol", "-o", "show", "job", job)
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return fields.get("JobState", "?"), fields.get("NodeList", "")


def _section(title: str, body: str) -> None:
    print(f"\n=== {title}\n{body.rstrip()}", flush=True)


def _wait_job_done(job: str, timeout: float = 120) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        state, nodes = job_state(job)
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state, nodes
        if time.monotonic() > deadline:
            raise DemoError(f"job {job} still {state} after {timeout:.0f}s")
        time.sleep(1)


def _labelled_blocks(kube: Kube) -> dict[str, frozenset[str]]:
    """{NVLink domain: its nodes} as the real nodes' clique labels say: the blocks
    topology.yaml's `nvlink` topology must hold (two nodes a domain, blockSize 2)."""
    domains: dict[str, set[str]] = {}
    selector = ",".join(f"{key}={value}" for key, value in ON_REAL.items())
    for node in kube.list("v1", "Node", label_selector=selector):
        labels = node["metadata"].get("labels") or {}
        if CLIQUE_LABEL in labels:
            domains.setdefault(labels[CLIQUE_LABEL], set()).add(node["metadata"]["name"])
    return {domain: frozenset(nodes) for domain, nodes in domains.items()}


def _release_priority_class(kube: Kube) -> None:
    """The chart ships the slurmd PriorityClass; on a cluster the e2e suite used, its
    operator harness made one Helm does not own, and `helm install` refuses to adopt
    it. The demo deletes that one (running pods keep their priority)."""
    found = kube.get(PRIORITY_API, "PriorityClass", wk.SLURMD_PRIORITY_CLASS)
    annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
    if found is not None and annotations.get("meta.helm.sh/release-name") != RELEASE:
        kube.delete(PRIORITY_API, "PriorityClass", wk.SLURMD_PRIORITY_CLASS)
        print(f"demo: deleted PriorityClass {wk.SLURMD_PRIORITY_CLASS} (not the chart's)")


def up(layout: Layout) -> int:
    kube = Kube(layout.kubeconfig)
    chart = layout.root / "helm" / "slurmkube"
    _release_priority_class(kube)
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
    deployment = wait_for(
        kube,
        "apps/v1",
        "Deployment",
        RELEASE,
        lambda d: (d.get("status") or {}).get("availableReplicas", 0) >= 1,
        namespace=OPERATOR_NAMESPACE,
        timeout=180,
    )
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    print(f"demo: the operator runs in its pod ({image})", flush=True)
    pods = kube.list(
        "v1",
        "Pod",
        namespace=OPERATOR_NAMESPACE,
        label_selector=f"app.kubernetes.io/name={RELEASE}",
    )
    ready = [p["status"]["podIP"] for p in pods if (p.get("status") or {}).get("podIP")]
    if not ready:
        raise DemoError(f"no operator pod with an address in {OPERATOR_NAMESPACE}")
    target = f"{ready[0]}:{METRICS_PORT}"
    prometheus = demo_goodput.start_prometheus(layout, _demo_dir(layout), target)
    print(f"demo: prometheus {prometheus} scrapes the operator pod's /metrics", flush=True)

    if kube.get("v1", "Namespace", NAMESPACE) is None:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=NAMESPACE)
    sample = layout.root / "examples" / "real-node-cluster.yaml"
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
    for title, args in (
        ("the nodes", ["get", "nodes", "-l", f"e2e.slurmkube.io/fleet={REAL_FLEET}", "-o", "wide"]),
        ("the operator", ["-n", OPERATOR_NAMESPACE, "get", "pods", "-o", "wide"]),
        ("the cluster", ["-n", NAMESPACE, "get", "slurmclusters,nodesets,pods,pvc", "-o", "wide"]),
    ):
        _section(
            f"{title}: kubectl {' '.join(args)}", kubectl(layout.kubectl, layout.kubeconfig, args)
        )
    ctld_pod = kube.get("v1", "Pod", CTLD_POD, namespace=NAMESPACE) or {}
    ctld_ip = (ctld_pod.get("status") or {}).get("podIP")
    if not ctld_ip:
        raise DemoError(f"the slurmctld pod {CTLD_POD} has no address")
    demo_goodput.scrape_slurmctld(_demo_dir(layout), f"{ctld_ip}:{SLURMCTLD_PORT}")
    _section("sinfo --version (in the slurmctld pod)", in_ctld("sinfo", "--version"))
    _section("slurmctld's user", in_ctld("ps", "-eo", "user,uid,args"))
    _section("sinfo (in the slurmctld pod)", in_ctld("sinfo", "-N", "-l"))
    topology = in_ctld("scontrol", "show", "topology")
    _section("scontrol show topology", topology)
    blocks, labelled = parse_blocks(topology), _labelled_blocks(kube)
    if blocks != labelled:
        raise DemoError(
            f"Slurm shows the blocks {blocks}, the nodes' {CLIQUE_LABEL} labels {labelled}"
        )
    print(f"\ndemo: the blocks Slurm shows are the nodes' {CLIQUE_LABEL} domains ({len(blocks)})")

    script = "#!/bin/sh\nsrun sh -c 'echo $SLURMD_NODENAME' | sort | tr '\\n' ' '\n"
    job = in_ctld(
        "sbatch",
        "--parsable",
        "-N2",
        "--segment=2",
        "--gres=gpu:4",
        "--wrap",
        script.splitlines()[1],
    ).strip()
    print(f"\ndemo: sbatch -N2 --segment=2 --gres=gpu:4 (a gang in one NVLink block): job {job}")
    state, nodes = _wait_job_done(job)
    inside = [name for name, members in blocks.items() if members == frozenset(expand(nodes))]
    _section(f"job {job}: {state}", f"ran on {nodes}; block: {inside[0] if inside else 'NONE'}")

    settle = float(demo_goodput.GOODPUT_SECONDS) + 2 * demo_goodput.SCRAPE_SECONDS
    time.sleep(settle)  # the gang job's start reaches the counters before the window
    began = time.time()
    mix = demo_goodput.run_mix(in_ctld)
    print(f"\ndemo: a job mix for goodput: jobs {' '.join(mix)}", flush=True)
    for each in mix:
        _wait_job_done(each, timeout=300)
    time.sleep(settle)
    png = _demo_dir(layout) / "goodput.png"
    figures = demo_goodput.report(prometheus, NAMESPACE, began, time.time(), png)
    _section("goodput of the job mix (PromQL against Prometheus)", figures)
    _section(
        "Slurm's own metrics (slurmctld's OpenMetrics, scraped by Prometheus)",
        demo_goodput.slurm_metrics(prometheus),
    )
    latest = kube.get(API, "SlurmCluster", CLUSTER, namespace=NAMESPACE) or cluster
    conditions = "\n".join(
        f"  {c['type']:<22} {c['status']:<5} {c['reason']}: {c['message']}"
        for c in latest["status"]["conditions"]
    )
    _section(f"SlurmCluster {CLUSTER} status", conditions)
    print(
        f"\ndemo: left running. KUBECONFIG={layout.kubeconfig}; "
        f"Slurm commands: kubectl exec -n {NAMESPACE} {CTLD_POD} -- sinfo; "
        "stop it all with `make demo-down`."
    )
    return 0 if state == "COMPLETED" and inside else 1


def down(layout: Layout) -> int:
    kube = Kube(layout.kubeconfig)
    if kube.get("v1", "Namespace", NAMESPACE) is not None:
        # The operator drains and removes the slurmd pods before the NodeSet goes.
        for kind, name in (("NodeSet", "gpu"), ("SlurmCluster", CLUSTER)):
            kube.delete(API, kind, name, namespace=NAMESPACE)
        wait_gone(kube, API, "NodeSet", "gpu", namespace=NAMESPACE, timeout=180)
        kube.delete("v1", "Namespace", NAMESPACE)
        wait_gone(kube, "v1", "Namespace", NAMESPACE, timeout=180)
    if processes.stop(demo_goodput.prometheus_process(layout, _demo_dir(layout))) is not None:
        print("demo: prometheus stopped")
    if _helm(layout, "list", "-q", "--namespace", OPERATOR_NAMESPACE).strip():
        _helm(layout, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE)
        print(f"demo: helm release {RELEASE} uninstalled")
    return 0
