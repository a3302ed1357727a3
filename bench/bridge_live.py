"""The Kueue bridge on the live local cluster (issue 7): lend latency and queue drain.

Real parts: Kueue, the operator (a host process, started and stopped here by
PID, as in the e2e suite), slurmctld and one slurmd pod per local runtime node
(`--nodes`, 8 by default; more need SLURMKUBE_RUNTIME_NODES at cluster-up).

(1) `--sequential` 1-node Jobs, one at a time, each submitted once every node
    is idle in Slurm again: QuotaReserved -> our AdmissionCheck state Ready,
    p50/p95 (target, DESIGN.md §7: p50 under 1 s), split into the steps of the
    lend path.
(2) `--workloads` 1-node Jobs of 1 s queued at once, with quota for every
    node: drain throughput (workloads per minute from the first create to the
    last Finished), then, once all finished, zero `slurmkube-*` reservations
    and zero lease labels must remain (the seconds that took are reported).

Times come from watch events taken on the bench side (Workloads, the local
Nodes, the slurmd pods), stamped with the bench's monotonic clock when they
arrive. Kubernetes' own timestamps (condition lastTransitionTime) have
one-second resolution, too coarse for a target under a second; a watch event
arrives within milliseconds of the write on this machine, so the error is the
same on both ends of each interval.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
    namespace,
    operator_env,
)
from reconcile import poll as wait  # noqa: E402
from slurmkube_e2e.kube import Kube, Manifest  # noqa: E402
from slurmkube_e2e.lending import (  # noqa: E402
    GPUS_PER_NODE,
    KUEUE,
    LEASE,
    RESERVATION_PREFIX,
    cluster_scoped,
    gpu_job,
    kueue_docs,
)
from slurmkube_e2e.operator import OperatorProcess  # noqa: E402
from slurmkube_e2e.operator_cluster import API, LOCAL, docs, in_ctld  # noqa: E402
from topology import _free_port as free_port  # noqa: E402
from topology import percentile  # noqa: E402

TARGET_P50_S = 1.0
SLURMD = "app.kubernetes.io/name=slurmd"
LOCAL_SELECTOR = ",".join(f"{k}={v}" for k, v in LOCAL.items())


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    return {"p50": round(statistics.median(values), 3), "p95": round(percentile(values, 0.95), 3)}


# --- what the watches saw ----------------------------------------------------------------


@dataclass
class WorkloadTimes:
    job: str = ""
    # The latest QuotaReserved: a Retry answer gives the quota back and Kueue
    # reserves it again later; the lend that succeeded starts at the last one.
    quota_reserved: float | None = None
    state: str = ""  # our check's state in the last event
    holds_quota: bool = False  # QuotaReserved in the last event
    reserved_message: float | None = None  # our check Pending "reserved ..."
    ready: float | None = None
    finished: float | None = None
    retries: int = 0
    nodes: set[str] = field(default_factory=set)


@dataclass
class Seen:
    """First times of each step, per workload UID and per node, from watch events."""

    workloads: dict[str, WorkloadTimes] = field(default_factory=dict)
    lease_label: dict[tuple[str, str], float] = field(default_factory=dict)  # (uid, node)
    slurmd_terminating: dict[str, list[float]] = field(default_factory=dict)  # node -> times
    slurmd_gone: dict[str, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def by_job(self, job: str) -> tuple[str, WorkloadTimes] | None:
        with self.lock:
            return next(((u, w) for u, w in self.workloads.items() if w.job == job), None)

    def workload(self, now: float, obj: Manifest, check: str) -> None:
        meta, status = obj["metadata"], obj.get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        ours = next((e for e in status.get("admissionChecks") or [] if e["name"] == check), {})
        with self.lock:
            w = self.workloads.setdefault(meta["uid"], WorkloadTimes())
            w.job = next((o["name"] for o in meta.get("ownerReferences") or []), "")
            reserved = conditions.get("QuotaReserved") == "True"
            if reserved and not w.holds_quota and not w.ready:
                w.quota_reserved = now
            w.holds_quota = reserved
            state, message = ours.get("state", ""), ours.get("message", "")
            if state == "Pending" and message.startswith("reserved") and not w.reserved_message:
                w.reserved_message = now
            if state == "Ready" and w.ready is None:
                w.ready = now
            if state == "Retry" and w.state != "Retry":
                w.retries += 1
            w.state = state
            if conditions.get("Finished") == "True" and w.finished is None:
                w.finished = now

    def node(self, now: float, obj: Manifest) -> None:
        uid = (obj["metadata"].get("labels") or {}).get(LEASE)
        if uid:
            with self.lock:
                self.lease_label.setdefault((uid, obj["metadata"]["name"]), now)
                self.workloads.setdefault(uid, WorkloadTimes()).nodes.add(obj["metadata"]["name"])

    def slurmd_pod(self, now: float, kind: str, obj: Manifest) -> None:
        node = obj["spec"].get("nodeName", "")
        with self.lock:
            if kind == "DELETED":
                self.slurmd_gone.setdefault(node, []).append(now)
            elif obj["metadata"].get("deletionTimestamp"):
                times = self.slurmd_terminating.setdefault(node, [])
                gone = self.slurmd_gone.get(node, [])
                if len(times) <= len(gone):  # first event of this pod's termination
                    times.append(now)


def _watch(
    kube: Kube,
    api_version: str,
    kind: str,
    stop: threading.Event,
    on_event: Callable[[float, str, Manifest], None],
    **query: str,
) -> None:
    resource = kube.resource(api_version, kind)
    while not stop.is_set():
        try:
            for event in resource.watch(timeout=5, **query):
                on_event(time.monotonic(), event["type"], event["raw_object"])
                if stop.is_set():
                    return
        except Exception as err:  # an expired watch: start again with a fresh list
            print(f"bench/bridge: watch {kind} restarted ({err})", file=sys.stderr)


def start_watches(kube: Kube, namespace: str, check: str, stop: threading.Event) -> Seen:
    seen = Seen()
    watches: list[tuple[str, str, Callable[[float, str, Manifest], None], dict[str, str]]] = [
        (KUEUE, "Workload", lambda t, _k, o: seen.workload(t, o, check), {"namespace": namespace}),
        ("v1", "Node", lambda t, _k, o: seen.node(t, o), {"label_selector": LOCAL_SELECTOR}),
        ("v1", "Pod", seen.slurmd_pod, {"namespace": namespace, "label_selector": SLURMD}),
    ]
    for api_version, kind, handler, query in watches:
        threading.Thread(
            target=_watch,
            args=(kube, api_version, kind, stop, handler),
            kwargs=query,
            daemon=True,
        ).start()
    return seen


# --- the cluster ---------------------------------------------------------------------------


def our_reservations(namespace: str) -> list[str]:
    out = in_ctld(namespace, "scontrol", "-o", "show", "reservation")
    names = re.findall(r"ReservationName=(\S+)", out)
    return [n for n in names if n.startswith(RESERVATION_PREFIX)]


def leased(kube: Kube) -> list[str]:
    return [n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector=LEASE)]


@dataclass(frozen=True)
class Lender:
    kube: Kube
    namespace: str
    nodes: int

    def all_idle(self) -> bool:
        """Every lending node back in Slurm, idle, and no lease left."""
        obj = self.kube.get(API, "SlurmCluster", "local", self.namespace) or {}
        counts = (obj.get("status") or {}).get("nodes") or {}
        return counts.get("idle") == self.nodes and not leased(self.kube)


def set_up(kube: Kube, nodes: int) -> Lender:
    local = kube.list("v1", "Node", label_selector=LOCAL_SELECTOR)
    if len(local) < nodes:
        raise SystemExit(
            f"bench/bridge: {len(local)} local nodes, {nodes} needed; start the cluster "
            f"with SLURMKUBE_RUNTIME_NODES={nodes} make cluster-up"
        )
    ns = namespace(kube, "bridge")
    cluster, node_set = docs(ns, replicas=nodes)
    # NodeSet first: a first render without nodes would cost a reconfigure.
    for doc in (node_set, cluster):
        kube.apply(doc)
    lender = Lender(kube, ns, nodes)
    wait("SlurmCluster Ready with every node idle", lender.all_idle, 300, 1.0)
    for doc in kueue_docs(ns, gpu_quota=nodes * GPUS_PER_NODE, retry_after=1):
        kube.apply(doc)
    wait(
        "AdmissionCheck Active",
        lambda: condition(kube.get(KUEUE, "AdmissionCheck", ns), "Active"),
        60,
    )
    return lender


def tear_down(kube: Kube, ns: str) -> None:
    for api, kind, name in cluster_scoped(ns):
        kube.delete(api, kind, name)
    delete_namespace(kube, ns)
    for name in leased(kube):
        kube.patch("v1", "Node", name, {"metadata": {"labels": {LEASE: None}}})


# --- (1) one at a time on idle nodes -------------------------------------------------------


def steps(seen: Seen, uid: str, w: WorkloadTimes) -> dict[str, float] | None:
    """The lend path of one workload, each step from QuotaReserved."""
    if w.quota_reserved is None or w.ready is None or len(w.nodes) != 1:
        return None
    (node,) = w.nodes
    start = w.quota_reserved

    def first_after(times: list[float]) -> float | None:
        return next((t for t in sorted(times) if t >= start), None)

    marks = {
        "reserved": w.reserved_message,
        "lease_label": seen.lease_label.get((uid, node)),
        "slurmd_terminating": first_after(seen.slurmd_terminating.get(node, [])),
        "slurmd_gone": first_after(seen.slurmd_gone.get(node, [])),
        "ready": w.ready,
    }
    return {k: round(v - start, 3) for k, v in marks.items() if v is not None}


def part_sequential(lender: Lender, seen: Seen, count: int) -> dict[str, Any]:
    kube, ns = lender.kube, lender.namespace
    samples: list[dict[str, float]] = []
    for i in range(count):
        job = f"seq-{i}"
        kube.create(gpu_job(job, pods=1, seconds=1), namespace=ns)
        wait(f"{job} Ready", _reached(seen, job, "ready"), 120, 0.05)
        wait(f"{job} finished", _reached(seen, job, "finished"), 120)
        found = seen.by_job(job)
        assert found is not None
        sample = steps(seen, *found)
        if sample is not None:
            samples.append(sample)
        wait("nodes idle in Slurm again", lender.all_idle, 180, 0.5)
    keys = ("reserved", "lease_label", "slurmd_terminating", "slurmd_gone", "ready")
    return {
        "workloads": count,
        "quota_reserved_to_ready_s": spread([s["ready"] for s in samples]),
        # Each step from QuotaReserved: where the time goes.
        "steps_from_quota_reserved_s": {k: spread([s[k] for s in samples if k in s]) for k in keys},
        "samples": len(samples),
    }


def _reached(seen: Seen, job: str, step: str) -> Callable[[], bool]:
    def check() -> bool:
        found = seen.by_job(job)
        return found is not None and getattr(found[1], step) is not None

    return check


# --- (2) many queued -----------------------------------------------------------------------


def part_queued(lender: Lender, seen: Seen, count: int) -> dict[str, Any]:
    kube, ns = lender.kube, lender.namespace
    jobs = [f"q-{i}" for i in range(count)]
    start = time.monotonic()
    for job in jobs:
        kube.create(gpu_job(job, pods=1, seconds=1), namespace=ns)
    created = time.monotonic() - start

    def finished() -> list[WorkloadTimes]:
        with seen.lock:
            return [w for w in seen.workloads.values() if w.job.startswith("q-") and w.finished]

    wait(f"{count} workloads finished", lambda: len(finished()) == count, 60 + 10 * count, 1.0)
    done = finished()
    last = max(w.finished or 0.0 for w in done)
    minutes = (last - start) / 60
    settle_start = time.monotonic()
    with contextlib.suppress(SystemExit):  # a leak is reported, not raised
        wait(
            "no lease label and no slurmkube reservation",
            lambda: not leased(kube) and not our_reservations(ns),
            120,
            0.5,
        )
    settle = time.monotonic() - settle_start
    reservations, labels = our_reservations(ns), leased(kube)
    latencies = [w.ready - w.quota_reserved for w in done if w.ready and w.quota_reserved]
    return {
        "workloads": count,
        "create_seconds": round(created, 1),
        "drain_seconds": round(last - start, 1),
        "workloads_per_minute": round(count / minutes, 1),
        "quota_reserved_to_ready_s": spread(latencies),
        "retry_answers": sum(w.retries for w in done),
        "settle_seconds": round(settle, 1),
        "leaked_reservations": len(reservations),
        "leaked_lease_labels": len(labels),
    }


# --- main --------------------------------------------------------------------------------


def live_main(*, sequential: int, queued: int, nodes: int) -> int:
    found = local_cluster("bridge")
    if found is None:
        return 1
    kubeconfig, kube = found
    # scontrol for reservation writes comes with it (SLURMKUBE_SLURM_PREFIX).
    env = operator_env(kubeconfig)
    # `in_ctld` runs `python -m slurmkube_e2e exec` in a child process.
    os.environ["PYTHONPATH"] = os.pathsep.join([*E2E_PATH, os.environ.get("PYTHONPATH", "")])
    result: dict[str, Any] = {"bench": "bridge_live", "nodes": nodes}
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        operator = OperatorProcess(
            env, Path(tmp) / "operator.log", ["--metrics-port", str(free_port())]
        )
        operator.start()
        lender = set_up(kube, nodes)
        try:
            seen = start_watches(kube, lender.namespace, lender.namespace, stop)
            time.sleep(1)  # the watches' initial lists
            load = [os.getloadavg()[0]]
            if sequential:
                result["sequential"] = part_sequential(lender, seen, sequential)
                load.append(os.getloadavg()[0])
            if queued:
                result["queued"] = part_queued(lender, seen, queued)
                load.append(os.getloadavg()[0])
            result["load_average_1m"] = [round(x, 1) for x in load]
        finally:
            stop.set()
            tear_down(kube, lender.namespace)
            if operator.stop() not in (0, -15, None):
                print(operator.tail(), file=sys.stderr)
    p50 = (result.get("sequential") or {}).get("quota_reserved_to_ready_s", {}).get("p50")
    result["target_p50_s"] = TARGET_P50_S
    result["meets_target"] = p50 is not None and p50 < TARGET_P50_S
    print(json.dumps(result), flush=True)
    leaks = result.get("queued") or {}
    return 1 if leaks.get("leaked_reservations") or leaks.get("leaked_lease_labels") else 0
