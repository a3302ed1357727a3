"""Topology benchmarks (issue 6): render cost, and how fast Slurm follows a relabelled fleet.

(a) render: for 1k/10k/50k nodes (140 NVLink blocks per 10k, three network
    tiers; the fleet of bench/render.py) the time to build the topology model,
    render topology.conf as block and as tree, build the Kueue Topology and
    ResourceFlavors, and the whole plan + render a fleet change costs. One
    child process per size, so its peak RSS is that size's alone. No cluster.
(b) follow: on the local control plane (`make cluster-up`) with N kwok nodes
    in a SlurmCluster (replicas 0: all State=CLOUD, all in topology.conf):
    the time from a Node label patch (`nvidia.com/gpu.clique` moved to another
    domain) to `scontrol show topology` (the host's scontrol with a JWT, as
    the operator reads Slurm) showing the node in its new block, p50/p95 over
    C changes, split into label -> ConfigMap rendered (debounce + the reconcile
    up to its write) and ConfigMap -> shown, itself split by the config
    reloader's log into -> landed (pod annotation, volume sync, reloader poll),
    -> reconfigured (`scontrol reconfigure`) and -> shown (slurmctld re-execs);
    the reconfigures each change cost; then a burst of B label changes and
    the reconfigures it cost (the config reloader's, counted in its log, plus
    the operator's backstop ones, slurmkube_reconfigures_total). The operator
    runs as in the e2e suite, started and stopped here by PID, with
    SLURMKUBE_CONFIG_PROPAGATION_SECONDS as given (default 12, the e2e value:
    only the backstop waits for it).

Prints one JSON line per size (a) and one for (b); exits 1 when (b) misses its
target. Targets: label change to `scontrol show topology` p50 under 2 s with
1,000 nodes (DESIGN.md §7, the default), under 1 s with 10,000 nodes and a
0.25 s debounce (issue 15: `--nodes 10000 --debounce 0.25 --target 1`).

    python bench/topology.py --part render [--sizes 1000,10000,50000]
    python bench/topology.py --part follow [--nodes 1000 --changes 20 --burst 100]
        [--debounce 1] [--target 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The e2e helpers (cluster, operator process, slurmctld pod), as `make e2e-local` finds them.
E2E_PATH = [str(ROOT / "e2e"), str(ROOT / "e2e/local/runtime")]
sys.path[1:1] = E2E_PATH


from reconcile import (  # noqa: E402
    condition,
    delete_namespace,
    local_cluster,
    metric_total,
    namespace,
    operator_env,
    poll,
)
from render import cluster_docs, fleet_dicts  # noqa: E402
from slurmkube.api.models import SlurmCluster, from_object  # noqa: E402
from slurmkube.controllers.clients import SlurmClients  # noqa: E402
from slurmkube.controllers.settings import Settings  # noqa: E402
from slurmkube.kube.client import Kube as OperatorKube  # noqa: E402
from slurmkube.kube.client import load_config  # noqa: E402
from slurmkube.slurm.cli import CliClient  # noqa: E402
from slurmkube.slurm.topology_text import parse_topology  # noqa: E402
from slurmkube_e2e import fleet  # noqa: E402
from slurmkube_e2e.cluster import apply_fleet, wait_nodes_ready  # noqa: E402
from slurmkube_e2e.kube import Kube  # noqa: E402
from slurmkube_e2e.operator import OperatorProcess  # noqa: E402
from slurmkube_e2e.operator_cluster import (  # noqa: E402
    API,
    LOCAL,
    SLURM_ENV,
    TOLERATE,
    docs,
    pod_log,
    slurm_image,
)
from slurmkube_e2e.topology import reloads, rendered_blocks  # noqa: E402

TARGET_FOLLOW_P50_S = 2.0
FOLLOW_FLEET = "bench-topo"
PER_DOMAIN = 20
BLOCK_SIZE = 8  # below every domain's size while nodes move between domains


# --- (a) render ------------------------------------------------------------------


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


def measure_render(nodes: int, blocks: int, repeat: int) -> dict[str, Any]:
    """In a child process: each stage's median over `repeat` runs, then peak RSS."""
    from slurmkube.api.documents import parse_cluster, parse_nodes
    from slurmkube.plan.objects import kueue_name
    from slurmkube.render import plan_config
    from slurmkube.render.files import render_files, render_topology_conf
    from slurmkube.topology.fleet import fleet_node
    from slurmkube.topology.kueue import kueue_topology, resource_flavors
    from slurmkube.topology.model import build_topology

    fleet = [fleet_node(n) for n in parse_nodes(fleet_dicts(nodes, blocks))]
    result: dict[str, Any] = {"bench": "topology_render", "nodes": nodes, "blocks": blocks}
    for plugin in ("block", "tree"):
        bundle = parse_cluster(cluster_docs(plugin))
        spec = bundle.cluster.spec.topology
        config = plan_config(bundle, fleet)
        runs: dict[str, list[float]] = {"model_ms": [], "conf_ms": [], "kueue_ms": [], "all_ms": []}
        for _ in range(repeat):
            t0 = time.perf_counter()
            topology = build_topology(fleet, spec)
            runs["model_ms"].append(_ms(t0))
            t0 = time.perf_counter()
            text = render_topology_conf(config)
            runs["conf_ms"].append(_ms(t0))
            t0 = time.perf_counter()
            name = kueue_name(bundle)
            kueue_topology(name, spec)
            resource_flavors(bundle, name, prefix=name)
            runs["kueue_ms"].append(_ms(t0))
            # What one fleet change costs the operator: plan and every file.
            t0 = time.perf_counter()
            render_files(plan_config(bundle, fleet))
            runs["all_ms"].append(_ms(t0))
        result[plugin] = {
            **{k: round(statistics.median(v), 2) for k, v in runs.items()},
            "topology_conf_lines": text.count("\n"),
            "model_blocks": len(topology.blocks),
            "model_switches": len(topology.switches),
        }
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def part_render(sizes: list[int], repeat: int) -> None:
    for size in sizes:
        blocks = max(1, round(size * 140 / 10_000))
        argv = [
            sys.executable,
            __file__,
            "--child",
            str(size),
            str(blocks),
            "--repeat",
            str(repeat),
        ]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        print(out.strip(), flush=True)


# --- (b) follow ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reconfigures(port: int, namespace: str, cluster: str = "local") -> int:
    """`scontrol reconfigure` runs for one cluster: its slurmctld pod's config reloader's,
    plus the operator's backstop ones (slurmkube_reconfigures_total{result="ok"})."""
    return reloads(namespace) + backstop_reconfigures(port, cluster)


def backstop_reconfigures(port: int, cluster: str) -> int:
    return int(metric_total(port, "slurmkube_reconfigures_total", cluster=cluster, result="ok"))


def reconcile_counts(port: int, namespace: str) -> tuple[int, int]:
    """(started, finished) reconciles of the namespace's cluster, from the metrics:
    slurmkube_reconciles_total counts one as it starts, the duration histogram
    as it ends."""
    started = metric_total(port, "slurmkube_reconciles_total", namespace=namespace)
    finished = metric_total(port, "slurmkube_reconcile_duration_seconds_count", namespace=namespace)
    return int(started), int(finished)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Follow:
    """One SlurmCluster over the bench fleet, and the places a label change shows up.

    Slurm is read as the operator reads it: the host's scontrol, authenticated by
    a JWT, against slurmctld's pod IP (one short process per look, not a Python
    one per look as `kubectl exec` would be here). A cluster of another release
    (`--slurm 26.05`: the host's 24.11 scontrol is outside its protocol window)
    is read by the pod's own scontrol, entered as the runtime's exec does
    (`nsenter` into the sandbox), again one short process per look."""

    def __init__(self, kube: Kube, namespace: str, metrics_port: int, in_pod: bool) -> None:
        self.kube = kube
        self.namespace = namespace
        self.port = metrics_port
        self.in_pod = in_pod
        self._scontrol: CliClient | None = None
        self._sandbox: int | None = None
        # The last ConfigMap read, by resourceVersion: a look that finds it
        # unchanged parses nothing (the bench shares 2 cores with the operator).
        self._read: tuple[str, dict[str, frozenset[str]], str] = ("", {}, "")

    def config_blocks(self) -> tuple[dict[str, frozenset[str]], str]:
        cm = self.kube.get("v1", "ConfigMap", "local-slurm-config", self.namespace) or {}
        version = (cm.get("metadata") or {}).get("resourceVersion", "")
        if not version or version != self._read[0]:
            data = cm.get("data") or {}
            self._read = (version, rendered_blocks(data), data.get("config-hash", ""))
        return self._read[1], self._read[2]

    def shown_blocks(self) -> dict[str, frozenset[str]]:
        if self.in_pod:
            return self._shown_in_pod()
        if self._scontrol is None:
            raw = self.kube.get(API, "SlurmCluster", "local", self.namespace)
            assert raw is not None
            cluster = from_object(SlurmCluster, raw)
            clients = SlurmClients(Settings.from_environment(os.environ))
            self._scontrol = clients.scontrol(OperatorKube(load_config(None)), cluster)
            assert self._scontrol is not None, "no scontrol: SLURMKUBE_SLURM_PREFIX?"
        shown = self._scontrol.show_topology()
        return {name: frozenset(record.nodes) for name, record in shown.items()}

    def _shown_in_pod(self) -> dict[str, frozenset[str]]:
        if self._sandbox is None:
            pod = self.kube.get("v1", "Pod", "local-slurmctld-0", self.namespace)
            assert pod is not None, "no slurmctld pod"
            self._sandbox = sandbox_init(pod["metadata"]["uid"])
        enter = ["nsenter", "-t", str(self._sandbox), "-n", "-m", "-u", "-i", "-p", "-r", "-w"]
        argv = [
            *enter,
            "--",
            "env",
            "SLURM_CONF=/etc/slurm/slurm.conf",
            "scontrol",
            "show",
            "topology",
        ]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        shown = parse_topology(out.stdout) if out.returncode == 0 else {}
        return {name: frozenset(record.nodes) for name, record in shown.items()}

    def wait_moved(self, moves: dict[str, str], start: float, timeout: float) -> dict[str, Any]:
        """Seconds from `start` until the ConfigMap, then `scontrol show topology`, show
        every node of `moves` in its block, and the config-hash that carried them.
        A mark is the end of the look that saw it, so figures err on the slow side
        by up to one look (a ConfigMap GET, or one scontrol, ~0.05 s)."""
        marks: dict[str, float] = {}
        config_hash = ""

        def placed(blocks: dict[str, frozenset[str]]) -> bool:
            return all(node in blocks.get(block, ()) for node, block in moves.items())

        while "shown" not in marks:
            if time.monotonic() - start > timeout:
                raise SystemExit(f"bench/topology: change not shown after {timeout:.0f}s: {marks}")
            if "configmap" not in marks:
                blocks, config_hash = self.config_blocks()
                if placed(blocks):
                    marks["configmap"] = time.monotonic()
                time.sleep(0.02)
            elif placed(self.shown_blocks()):
                marks["shown"] = time.monotonic()
            else:
                time.sleep(0.02)
        return {**{k: round(v - start, 3) for k, v in marks.items()}, "hash": config_hash}


def sandbox_init(pod_uid: str) -> int:
    """The host PID of the local runtime's init in the sandbox of the pod `pod_uid`
    (its command line names the pod's plan file, under `pods/<uid>/`)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # The init itself (python ... init.py <plan>), not `unshare` that forked it.
        if (
            "python" in Path(argv[0].decode()).name
            and any(a.endswith(b"init.py") for a in argv)
            and any(pod_uid.encode() in a for a in argv)
        ):
            return int(proc.name)
    raise SystemExit(f"bench/topology: no sandbox for pod {pod_uid}")


_RELOADER_LINE = re.compile(
    r"^(\S+) (?:config-hash=(\w+) landed|reconfigured config-hash=(\w+))", re.MULTILINE
)


def reloader_marks(namespace: str) -> dict[str, dict[str, float]]:
    """{config-hash: {"landed": t, "reconfigured": t}} from the reloader's log (wall
    clock, seconds since the epoch; the pod runs on this host's clock)."""
    marks: dict[str, dict[str, float]] = {}
    log = pod_log(namespace, "local-slurmctld-0", "config-reloader")
    for stamp, landed, done in _RELOADER_LINE.findall(log):
        when = dt.datetime.fromisoformat(stamp).replace(tzinfo=dt.UTC).timestamp()
        marks.setdefault(landed or done, {})["landed" if landed else "reconfigured"] = when
    return marks


def part_follow(
    kube: Kube,
    kubeconfig: Path,
    port: int,
    operator_log: Path,
    *,
    nodes: int,
    changes: int,
    burst: int,
    propagation: float,
    debounce: float,
    target: float,
) -> dict[str, Any]:
    domains = max(2, nodes // PER_DOMAIN)
    spec = fleet.FleetSpec(name=FOLLOW_FLEET, nvl_domains=domains, nodes_per_domain=PER_DOMAIN)
    layout = fleet.layout(spec)
    clique = {n.domain: n.clique for n in layout}
    names = apply_fleet(kubeconfig, spec)
    wait_nodes_ready(kubeconfig, names, timeout=900)
    ns = namespace(kube, "topo")
    cluster, node_set = docs(ns, replicas=0)
    node_set["spec"]["nodeSelector"] = {"matchLabels": {fleet.FLEET_LABEL: FOLLOW_FLEET}}
    node_set["spec"].pop("tolerations", None)
    cluster["spec"]["topology"] = {"blockSize": BLOCK_SIZE, "debounceSeconds": debounce}
    cluster["spec"]["controller"]["nodeSelector"] = LOCAL
    cluster["spec"]["controller"]["tolerations"] = TOLERATE
    follow = Follow(kube, ns, port, in_pod=slurm_image() is not None)

    def move(node: fleet.SimulatedNode, step: int) -> tuple[str, str]:
        target = clique[(node.domain + step) % domains]
        kube.patch("v1", "Node", node.name, {"metadata": {"labels": {fleet.CLIQUE_LABEL: target}}})
        return node.name, target

    def settled() -> bool:
        return condition(kube.get(API, "SlurmCluster", "local", ns), "ConfigApplied")

    def quiet(started_before: int) -> bool:
        started, finished = reconcile_counts(port, ns)
        return started > started_before and started == finished

    try:
        for doc in (cluster, node_set):
            kube.apply(doc)
        poll("Ready", lambda: condition(kube.get(API, "SlurmCluster", "local", ns), "Ready"), 600)
        samples: list[dict[str, Any]] = []
        per_change: list[int] = []
        # Node index 0 of successive domains, each moved one domain on.
        for node in [n for n in layout if n.index == 0][:changes]:
            count_before = reconfigures(port, ns)
            started_before = reconcile_counts(port, ns)[0]
            start, wall = time.monotonic(), time.time()
            moved = dict([move(node, 1)])
            samples.append({**follow.wait_moved(moved, start, 300), "wall": wall})
            poll("ConfigApplied", settled, 120)
            # Each change from a settled operator: the reconcile the change set off
            # (a full Slurm node read, 7-17 s at 10,000 nodes) is over before the
            # next change. The burst below measures changes that overlap.
            poll("the change's reconcile done", partial(quiet, started_before), 300)
            per_change.append(reconfigures(port, ns) - count_before)
        load = os.getloadavg()[0]  # the machine is shared: say how busy it was
        # The burst: other nodes, a few from every domain, patched back to back.
        others = (n for n in layout if n.index > 0)
        chosen = sorted(others, key=lambda n: (n.index, n.domain))[:burst]
        count_before = reconfigures(port, ns)
        start = time.monotonic()
        moves = dict(move(node, 1) for node in chosen)
        patch_seconds = time.monotonic() - start
        burst_marks = follow.wait_moved(moves, start, 600)
        poll("ConfigApplied", settled, 120)
        time.sleep(3)  # a late second reconfigure would show up here
        burst_reconfigures = reconfigures(port, ns) - count_before
        reloader = reloader_marks(ns)
        for sample in samples:
            for mark, when in reloader.get(sample["hash"], {}).items():
                sample[mark] = when - sample["wall"]
    finally:
        delete_namespace(kube, ns)
        for name in names:
            kube.delete("v1", "Node", name)

    def stage(key: str, since: str | None = None) -> dict[str, float | None]:
        values = [
            s[key] - (s[since] if since else 0.0)
            for s in samples
            if key in s and (since is None or since in s)
        ]
        if not values:
            return {"p50": None, "p95": None}
        return {
            "p50": round(statistics.median(values), 2),
            "p95": round(percentile(values, 0.95), 2),
        }

    shown = stage("shown")
    log = operator_log.read_text(errors="replace") if operator_log.exists() else ""
    reconciles = [float(x) for x in re.findall(r"reconciled cluster=\S+ .*seconds=([\d.]+)", log)]
    return {
        "bench": "topology_follow",
        "slurm": os.environ.get(SLURM_ENV) or "24.11 (host build)",
        "nodes": len(names),
        "changes": len(samples),
        "propagation_seconds": propagation,
        "debounce_seconds": debounce,
        "label_to_scontrol_s": shown,
        "breakdown_s": {
            # Debounce (spec.topology.debounceSeconds) + the reconcile up to its
            # ConfigMap write.
            "label_to_configmap": stage("configmap"),
            "configmap_to_shown": stage("shown", "configmap"),
            # Of which, from the reloader's log: pod annotation -> volume sync ->
            # the reloader's next look at config-hash,
            "configmap_to_landed": stage("landed", "configmap"),
            # `scontrol reconfigure` (slurmctld re-reads its files),
            "landed_to_reconfigured": stage("reconfigured", "landed"),
            # and this bench's next look.
            "reconfigured_to_shown": stage("shown", "reconfigured"),
        },
        # Whole reconciles (from the operator's log): the ConfigMap is written early in one.
        "reconcile_s": {
            "p50": round(statistics.median(reconciles), 2) if reconciles else None,
            "count": len(reconciles),
        },
        # One each: the reloader's; a second one would be an operator backstop.
        "reconfigures_per_change": dict(sorted(Counter(per_change).items())),
        "backstop_reconfigures": backstop_reconfigures(port, "local"),
        "load_average_1m": round(load, 1),
        "target_p50_s": target,
        "meets_target": shown["p50"] is not None and shown["p50"] < target,
        "burst": {
            "label_changes": len(moves),
            "patch_seconds": round(patch_seconds, 2),
            "reconfigures": burst_reconfigures,
            "label_to_scontrol_s": burst_marks.get("shown"),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("render", "follow", "all"), default="render")
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--propagation", type=float, default=12.0)
    parser.add_argument(
        "--debounce", type=float, default=1.0, help="spec.topology.debounceSeconds (default 1)"
    )
    parser.add_argument(
        "--target",
        type=float,
        default=TARGET_FOLLOW_P50_S,
        help="p50 label -> scontrol show topology, seconds (default 2)",
    )
    parser.add_argument("--keep-log", type=Path, help="copy the operator's log here")
    parser.add_argument(
        "--slurm",
        help="the cluster's Slurm: a tag of the image `make images` built (26.05); "
        "default the host's 24.11 build",
    )
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_render(args.child[0], args.child[1], args.repeat)))
        return 0
    if args.slurm:
        os.environ[SLURM_ENV] = args.slurm
    if args.part in ("render", "all"):
        part_render([int(s) for s in args.sizes.split(",")], args.repeat)
    if args.part in ("follow", "all"):
        return follow_main(args)
    return 0


def follow_main(args: argparse.Namespace) -> int:
    found = local_cluster("topology")
    if found is None:
        return 1
    kubeconfig, kube = found
    port = _free_port()
    env = operator_env(kubeconfig)
    env["SLURMKUBE_CONFIG_PROPAGATION_SECONDS"] = str(args.propagation)
    # `Follow.shown_blocks` runs scontrol as the operator does: the same environment.
    os.environ.update({k: v for k, v in env.items() if k != "KUBECONFIG"})
    # `pod_log` runs `python -m slurmkube_e2e logs` in a child process.
    os.environ["PYTHONPATH"] = os.pathsep.join([*E2E_PATH, os.environ.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "operator.log"
        operator = OperatorProcess(env, log, ["--metrics-port", str(port)])
        operator.start()
        try:
            result = part_follow(
                kube,
                kubeconfig,
                port,
                log,
                nodes=args.nodes,
                changes=args.changes,
                burst=args.burst,
                propagation=args.propagation,
                debounce=args.debounce,
                target=args.target,
            )
            print(json.dumps(result), flush=True)
        finally:
            if operator.stop() not in (0, -15, None):
                print(operator.tail(), file=sys.stderr)
            if args.keep_log:
                shutil.copyfile(log, args.keep_log)
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
