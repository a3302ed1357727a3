"""The faults, one function each: pick a target from the seeded job mix, inject,
watch what the fault's contract says must hold while it lasts, and undo what
the suite itself changed. Each returns an optional extra "settled" check for
the convergence wait (None: nothing beyond the cluster being converged)."""

from __future__ import annotations

import contextlib
import json
import random
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client import CoreV1Api, V1Eviction, V1ObjectMeta
from kubernetes.client.exceptions import ApiException
from slurmkube_runtime import cli as runtime_cli
from slurmkube_runtime.layout import BRIDGE_IP, RuntimeLayout

from slurmkube.api import well_known as wk
from slurmkube_e2e.chaos.checks import slurm_nodes, slurmd_pod_on, slurmd_pods
from slurmkube_e2e.chaos.holder import LentHolder
from slurmkube_e2e.chaos.jobs import JobBook, JobSpec, RunningJob, ctld
from slurmkube_e2e.chaos.records import JobRecord
from slurmkube_e2e.chaos.report import FaultReport
from slurmkube_e2e.cluster import LocalCluster
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import API, LOCAL, ON_REAL_NODES
from slurmkube_e2e.waiting import condition, wait_gone

Settled = Callable[[], str | None] | None
GPU = "nvidia.com/gpu"
CLUSTER = "local"
PARTITION = "gpu"
# Partition MaxTimes the operator kill loop moves through (each a reconfigure).
MAX_TIMES = ("2-00:00:00", "1-12:00:00", "3-00:00:00")


@dataclass
class Chaos:
    """What every fault works with."""

    kube: Kube
    namespace: str
    rng: random.Random
    jobs: JobBook
    replicas: int  # slurmd pods the NodeSet wants
    operators: list[OperatorProcess]  # one, or the HA pair's processes
    api_server: LocalCluster | None  # None: the API server cannot be restarted (kind)
    max_time: str = "1-00:00:00"
    holder: LentHolder | None = None  # a Kueue workload on lent nodes throughout
    # Seconds a busy-node fault's job has left at least when it strikes; None:
    # each fault's own (a run of short jobs sets fewer).
    busy_left: int | None = None

    def since(self, started: float) -> str:
        return f"{time.monotonic() - started:.1f}s"


Fault = Callable[[Chaos, FaultReport], Settled]


# --- shared steps -------------------------------------------------------------


def busy_target(ctx: Chaos, min_seconds_left: int) -> tuple[RunningJob, str, Manifest]:
    """A running job with time left, one of its nodes (seeded) and that node's slurmd pod."""
    job = ctx.jobs.victim(ctx.busy_left or min_seconds_left)
    node = ctx.rng.choice(sorted(job.nodes))
    pod = slurmd_pod_on(ctx.kube, ctx.namespace, node)
    assert pod is not None, f"job {job.job_id} runs on {node}, which has no slurmd pod"
    return job, node, pod


def final_record(ctx: Chaos, job: str, timeout: float = 90) -> JobRecord | None:
    """The job's record once it has ended (sacct writes asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        record = ctx.jobs.records().get(job)
        if (record is not None and record.ended) or time.monotonic() > deadline:
            return record
        time.sleep(3)


def await_job(ctx: Chaos, rep: FaultReport, job: RunningJob, slack: float = 120) -> None:
    """Wait for the job to end and say how. One Slurm still shows running well
    after its sleep ended is a ghost (its processes died unseen): it would hold
    its nodes until its time limit, so it is cancelled, and counted lost."""
    if ctx.jobs.wait_ended({job.job_id}, job.seconds_left + slack):
        rep.violations.append(
            f"job {job.job_id} still running {slack:.0f}s after its end: a ghost, cancelled"
        )
        ctld(ctx.namespace, "scancel", job.job_id)
    record = final_record(ctx, job.job_id)
    rep.observations.append(
        f"job {job.job_id} ended {record.state if record else '(no record)'}"
        + (" after a requeue" if record and record.requeued else "")
    )


_SHAPE = re.compile(r"\b(CPUTot|RealMemory|Gres)=(\S*)")


def node_shape(namespace: str, node: str) -> dict[str, str]:
    """CPUs, memory and GRES slurmctld holds for the node (empty when it has no
    such node: all nodes are read, since `show node X` fails for a removed one)."""
    out = ctld(namespace, "scontrol", "-o", "show", "nodes")
    line = next((ln for ln in out.splitlines() if ln.startswith(f"NodeName={node} ")), "")
    return dict(_SHAPE.findall(line))


def operator_drained(ctx: Chaos, rep: FaultReport, node: str, started: float) -> bool:
    """Whether the operator has drained the node (its reason prefix); any drain
    is reported the first time it is seen (Slurm drains too, e.g. Duplicate jobid)."""
    state, reason = slurm_nodes(ctx.namespace).get(node, ("", ""))
    if "drain" not in state:
        return False
    seen = f"{node} {state} ({reason})"
    if not any(o.startswith(seen) for o in rep.observations):
        rep.observations.append(f"{seen} {ctx.since(started)} later")
    return wk.is_ours(reason)


def set_max_time(ctx: Chaos, max_time: str) -> None:
    cluster = ctx.kube.get(API, "SlurmCluster", CLUSTER, namespace=ctx.namespace)
    assert cluster is not None
    partitions = [
        {**p, "maxTime": max_time} if p["name"] == PARTITION else p
        for p in cluster["spec"]["partitions"]
    ]
    ctx.kube.patch(
        API, "SlurmCluster", CLUSTER, {"spec": {"partitions": partitions}}, ctx.namespace
    )


def label_node(kube: Kube, node: str, value: str | None) -> None:
    ((key, _),) = LOCAL.items()
    kube.patch("v1", "Node", node, {"metadata": {"labels": {key: value}}})


def pod_uids(kube: Kube, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in slurmd_pods(kube, namespace)}


def same_pod(pod: Manifest, now: Manifest | None) -> bool:
    """Whether `now` is still `pod`: not gone, replaced or being deleted."""
    return (
        now is not None
        and now["metadata"]["uid"] == pod["metadata"]["uid"]
        and not now["metadata"].get("deletionTimestamp")
    )


def note(found: list[str], message: str) -> None:
    if message not in found:
        found.append(message)


def watch_pod(ctx: Chaos, rep: FaultReport, pod: Manifest, why: str) -> None:
    """A violation when the pod is gone, replaced or being deleted."""
    now = ctx.kube.get("v1", "Pod", pod["metadata"]["name"], namespace=ctx.namespace)
    if not same_pod(pod, now):
        note(rep.violations, f"slurmd pod {pod['metadata']['name']} deleted {why}")


# --- the faults ---------------------------------------------------------------


def busy_pod_deleted(ctx: Chaos, rep: FaultReport) -> Settled:
    """`kubectl delete pod` of a slurmd pod under a running job, every 3 s for 12 s
    once it is labelled busy: the chart's guard (bound to the run's namespace)
    must refuse each, and the job run on. (Unguarded, the job's processes die
    with the pod: plan/lost_pods.py then fails it in Slurm, a loss by design.)"""
    job, node, pod = busy_target(ctx, 40)
    name = pod["metadata"]["name"]
    wait_busy_label(ctx, rep, job, name)
    rep.detail = f"deleted pod {name} on {node} under job {job.job_id} ({job.seconds_left}s left)"
    refusals: list[str] = []
    for _ in range(5):
        if not ctx.jobs.wait_ended({job.job_id}, 0):
            break  # an idle pod may go
        rep.injected = True
        try:
            CoreV1Api(ctx.kube.api_client).delete_namespaced_pod(name, ctx.namespace)
        except ApiException as err:
            refusals.append(f"{err.status} {_message(err)}")
        else:
            rep.violations.append(f"the DELETE of busy pod {name} was admitted")
            break
        time.sleep(3)
    if refusals:
        rep.observations.append(f"{len(refusals)} deletes refused: {refusals[0]}")
    watch_pod(ctx, rep, pod, "by kubectl delete")
    await_job(ctx, rep, job)
    return None


def wait_busy_label(ctx: Chaos, rep: FaultReport, job: RunningJob, name: str) -> None:
    """Until the operator labels the pod busy (its poll follows Slurm's node
    states), nothing selects it: the guard and the budget let it go. The lag
    is reported."""
    started = time.monotonic()
    while _label(ctx.kube.get("v1", "Pod", name, namespace=ctx.namespace), wk.LABEL_BUSY) != "true":
        if time.monotonic() - started > 60:
            rep.violations.append(f"{name} not labelled busy within 60s")
            break
        time.sleep(1)
    ran = ctx.jobs.specs[job.job_id].seconds - job.seconds_left + time.monotonic() - started
    rep.observations.append(f"{name} labelled busy {ran:.0f}s after its job started")


def operator_kill_loop(ctx: Chaos, rep: FaultReport) -> Settled:
    """SIGKILL an operator (of the pair, seeded) 20+ times 0.3-4 s apart, each
    restarted at once; the partition's MaxTime changes every fifth kill."""
    kills = 20 + ctx.rng.randint(0, 4)
    counts = [0] * len(ctx.operators)
    for kill in range(kills):
        if kill % 5 == 0:
            set_max_time(ctx, MAX_TIMES[(kill // 5) % len(MAX_TIMES)])
        time.sleep(ctx.rng.uniform(0.3, 4.0))
        which = ctx.rng.randrange(len(ctx.operators))
        ctx.operators[which].kill()
        ctx.operators[which].start()
        counts[which] += 1
        rep.injected = True
    set_max_time(ctx, ctx.max_time)
    rep.detail = f"{kills} SIGKILLs (per operator: {counts}), MaxTime changed every 5 kills"
    want = f"MaxTime={ctx.max_time}"

    def max_time_in_force() -> str | None:
        shown = ctld(ctx.namespace, "scontrol", "show", "partition", PARTITION)
        return None if want in shown else f"partition {PARTITION} lacks {want}"

    return max_time_in_force


def slurmctld_pod_deleted(ctx: Chaos, rep: FaultReport) -> Settled:
    """`kubectl delete pod` of slurmctld's pod with jobs running: its StatefulSet
    makes a new one, which reads the state from its PersistentVolumeClaim (the
    run's cluster has persistence on). A SIGKILL of the daemon is not injected:
    slurmctld saves its state asynchronously, so a kill forgets the last seconds'
    submissions (Slurm's own behaviour, the first runs' finding)."""
    name = f"{CLUSTER}-slurmctld-0"
    old = ctx.kube.get("v1", "Pod", name, namespace=ctx.namespace)
    assert old is not None
    running = {r.job_id for r in ctx.jobs.running()}
    started = time.monotonic()
    ctx.kube.delete("v1", "Pod", name, namespace=ctx.namespace)
    rep.injected = True
    rep.detail = f"deleted pod {name} with jobs {sorted(running, key=int)} running"
    ctld(ctx.namespace, "squeue", "-h", retry_for=180)
    rep.observations.append(f"slurmctld answered again {ctx.since(started)} later")
    new = ctx.kube.get("v1", "Pod", name, namespace=ctx.namespace) or {}
    if (new.get("metadata") or {}).get("uid") == old["metadata"]["uid"]:
        rep.violations.append(f"{name} answered, but it is the old pod")
    return None


def busy_node_relabelled(ctx: Chaos, rep: FaultReport) -> Settled:
    """A busy node's NodeSet label removed: it must keep its pod and its line's
    shape, drained, until its job ends; then it leaves. The label is put back."""
    job, node, pod = busy_target(ctx, 40)
    shape = node_shape(ctx.namespace, node)
    rep.detail = f"relabelled {node} out of its NodeSet under job {job.job_id}"
    started = time.monotonic()
    label_node(ctx.kube, node, "chaos-out")
    rep.injected = True
    try:
        drained = False
        while True:
            pod_now = ctx.kube.get("v1", "Pod", pod["metadata"]["name"], namespace=ctx.namespace)
            now = node_shape(ctx.namespace, node)
            drained_now = operator_drained(ctx, rep, node, started)
            # Judged only when the job still runs after the reads: the node and
            # its pod may rightly go the moment it ends.
            if not ctx.jobs.wait_ended({job.job_id}, 0):
                break
            if not same_pod(pod, pod_now):
                note(
                    rep.violations,
                    f"slurmd pod {pod['metadata']['name']} deleted while its node ran a job",
                )
            if now != shape:
                note(rep.violations, f"shape changed: {now}")
            drained = drained or drained_now
            assert time.monotonic() - started < job.seconds_left + 120, "job did not end"
            time.sleep(2)
        ended = time.monotonic()
        if not drained:
            rep.violations.append(f"{node} never drained while its job ran")
        try:
            wait_gone(ctx.kube, "v1", "Pod", pod["metadata"]["name"], namespace=ctx.namespace)
            rep.observations.append(f"its slurmd pod removed {ctx.since(ended)} after the job")
        except AssertionError:
            rep.violations.append("the slurmd pod of the relabelled node stayed after its job")
        await_job(ctx, rep, job)
    finally:
        label_node(ctx.kube, node, LOCAL[next(iter(LOCAL))])
    return None


def busy_node_gpu_drop(ctx: Chaos, rep: FaultReport) -> Settled:
    """A busy node's allocatable GPUs drop by one (an XID) for 25 s: it must be
    drained, its GRES kept, the job left running."""
    job, node, _ = busy_target(ctx, 45)
    shape = node_shape(ctx.namespace, node)
    kube_node = ctx.kube.get("v1", "Node", node)
    assert kube_node is not None
    gpus = int(kube_node["status"]["allocatable"][GPU])
    rep.detail = f"{node} allocatable {GPU} {gpus} -> {gpus - 1} for 25s under job {job.job_id}"
    started = time.monotonic()
    drained = False
    try:
        # The runtime re-asserts its nodes' status every 30 s: patch again meanwhile.
        while time.monotonic() - started < 25:
            ctx.kube.patch_status(
                "v1", "Node", node, {"status": {"allocatable": {GPU: str(gpus - 1)}}}
            )
            rep.injected = True
            drained = drained or operator_drained(ctx, rep, node, started)
            now = node_shape(ctx.namespace, node)
            if now != shape and f"shape changed: {now}" not in rep.violations:
                rep.violations.append(f"shape changed: {now}")
            if ctx.jobs.wait_ended({job.job_id}, 0) != {job.job_id}:
                rep.violations.append(f"job {job.job_id} ended during the drop")
                break
            time.sleep(3)
    finally:
        ctx.kube.patch_status("v1", "Node", node, {"status": {"allocatable": {GPU: str(gpus)}}})
    if not drained:
        rep.violations.append(f"{node} not drained within 25s of its GPUs dropping")
    return None


def busy_node_drained(ctx: Chaos, rep: FaultReport) -> Settled:
    """`kubectl drain` of a busy node: cordon, then evictions of its slurmd pod
    (the Eviction API, as kubectl, cluster-autoscaler and Karpenter use) every 3 s
    for 12 s while its job runs; the PodDisruptionBudget must refuse each. The
    node is uncordoned after."""
    job, node, pod = busy_target(ctx, 50)
    name = pod["metadata"]["name"]
    wait_busy_label(ctx, rep, job, name)
    rep.detail = f"cordoned {node}, evicted {name} under job {job.job_id}"
    core = CoreV1Api(ctx.kube.api_client)
    ctx.kube.patch("v1", "Node", node, {"spec": {"unschedulable": True}})
    try:
        refusals: list[str] = []
        for _ in range(5):
            if not ctx.jobs.wait_ended({job.job_id}, 0):
                break  # an idle pod may be evicted: the budget selects busy ones only
            rep.injected = True
            body = V1Eviction(metadata=V1ObjectMeta(name=name, namespace=ctx.namespace))
            try:
                core.create_namespaced_pod_eviction(name, ctx.namespace, body)
            except ApiException as err:
                refusals.append(f"{err.status} {_message(err)}")
            else:
                rep.violations.append(f"the eviction of busy pod {name} was admitted")
                break
            time.sleep(3)
        if refusals:
            rep.observations.append(f"{len(refusals)} evictions refused: {refusals[0]}")
        watch_pod(ctx, rep, pod, "by the eviction")
    finally:
        ctx.kube.patch("v1", "Node", node, {"spec": {"unschedulable": None}})
    return None


def _label(obj: Manifest | None, key: str) -> str | None:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    value = labels.get(key)
    return None if value is None else str(value)


def _message(err: ApiException) -> str:
    """The API server's Status message (a JSON body), else the HTTP reason."""
    try:
        message = json.loads(err.body or "").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or err.reason)


def slurmrestd_down(ctx: Chaos, rep: FaultReport) -> Settled:
    """slurmrestd's Deployment scaled to 0 for 30 s: Slurm cannot be read over
    REST, so nothing may be deleted or drained; jobs keep running."""
    deployment = f"{CLUSTER}-slurmrestd"
    before = pod_uids(ctx.kube, ctx.namespace)
    started = time.monotonic()
    ctx.kube.patch("apps/v1", "Deployment", deployment, {"spec": {"replicas": 0}}, ctx.namespace)
    rep.injected = True
    rep.detail = f"Deployment {deployment} scaled to 0 for 30s"
    restored = False
    try:
        while time.monotonic() - started < 30:
            if pod_uids(ctx.kube, ctx.namespace) != before:
                message = "slurmd pods changed while slurmrestd was down"
                if message not in rep.violations:
                    rep.violations.append(message)
            got = ctx.kube.get("apps/v1", "Deployment", deployment, namespace=ctx.namespace)
            if not restored and ((got or {}).get("spec") or {}).get("replicas"):
                restored = True
                rep.observations.append(f"the operator scaled it back {ctx.since(started)} later")
            time.sleep(3)
    finally:
        ctx.kube.patch(
            "apps/v1", "Deployment", deployment, {"spec": {"replicas": 1}}, ctx.namespace
        )
    cluster = ctx.kube.get(API, "SlurmCluster", CLUSTER, namespace=ctx.namespace)
    rep.observations.append(f"Ready then: {condition(cluster, 'Ready')}")
    return None


PARTITION_SECONDS = 30


def network_partition(ctx: Chaos, rep: FaultReport) -> Settled:
    """The host, where both operators run, cut off from slurmctld and slurmrestd
    for 30 s: in each pod's network namespace (a runtime sandbox's or a real
    node's pod's), packets from the slot's bridge address are dropped. Slurm
    cannot be read, so nothing may be deleted or replaced, and Ready must say
    so; jobs run on (slurmd reaches slurmctld pod to pod)."""
    targets = [
        p
        for p in ctx.kube.list("v1", "Pod", namespace=ctx.namespace)
        if not p["metadata"].get("deletionTimestamp")
        and (
            p["metadata"]["name"] == f"{CLUSTER}-slurmctld-0"
            or p["metadata"]["name"].startswith(f"{CLUSTER}-slurmrestd-")
        )
    ]
    pods = [p["metadata"]["name"] for p in targets]
    pids = [_netns_pid(ctx.namespace, pod) for pod in targets]
    rule = ["INPUT", "-s", str(BRIDGE_IP), "-j", "DROP"]
    before = pod_uids(ctx.kube, ctx.namespace)
    started = time.monotonic()
    try:
        for pid in pids:
            subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", "-I", *rule], check=True)
            rep.injected = True
        rep.detail = f"{', '.join(pods)} dropped packets from {BRIDGE_IP} for {PARTITION_SECONDS}s"
        while time.monotonic() - started < PARTITION_SECONDS:
            if pod_uids(ctx.kube, ctx.namespace) != before:
                note(rep.violations, "slurmd pods changed while Slurm could not be read")
            time.sleep(3)
        cluster = ctx.kube.get(API, "SlurmCluster", CLUSTER, namespace=ctx.namespace)
        ready = condition(cluster, "Ready") or {}
        rep.observations.append(f"Ready at the end of the partition: {ready}")
        if ready.get("status") == "True":
            rep.violations.append("Ready stayed True while Slurm could not be read")
    finally:
        for pid in pids:
            subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", "-D", *rule], check=False)
    return None


def _netns_pid(namespace: str, pod: Manifest) -> int:
    """A process in the pod's network namespace: the runtime sandbox's init, or on
    real nodes a process of the pod's cgroup (the kubelet's cgroupfs driver names
    it pod<uid>, under the node's cgroup root)."""
    if not ON_REAL_NODES:
        layout = RuntimeLayout.from_env()
        name = pod["metadata"]["name"]
        return runtime_cli.running_sandbox(layout, namespace, name).init_pid
    uid = pod["metadata"]["uid"]
    for pod_dir in Path("/sys/fs/cgroup/pids").glob(f"slurmkube-*/*/kubepods*/**/pod{uid}"):
        for procs in pod_dir.rglob("cgroup.procs"):
            pids = procs.read_text().split()
            if pids:
                return int(pids[0])
    raise AssertionError(f"no process of pod {pod['metadata']['name']} ({uid}) found")


def api_server_restart(ctx: Chaos, rep: FaultReport) -> Settled:
    """The kube-apiserver stopped for 9 s and started again (this slot's only)."""
    if ctx.api_server is None:
        rep.detail = "not injected: the API server of this cluster cannot be restarted (kind)"
        return None
    started = time.monotonic()
    ctx.api_server.restart("kube-apiserver", down_seconds=9)
    rep.injected = True
    rep.detail = "kube-apiserver down 9 s"
    rep.observations.append(f"API server serving again {ctx.since(started)} after the stop")
    return None


def cluster_deleted_and_recreated(ctx: Chaos, rep: FaultReport) -> Settled:
    """With the queue empty, two 2-node jobs of 45 s run; the SlurmCluster is
    deleted (deletionPolicy Drain): it must wait, drained, until they end, then go;
    then it is created again with the same spec."""
    held = ctx.jobs.cancel_held()
    if held:
        rep.observations.append(f"cancelled jobs {held}, held after a failed launch")
    left = ctx.jobs.wait_ended(set(ctx.jobs.specs), 480)
    assert not left, f"jobs {sorted(left)} still queued before the deletion"
    size = max(1, ctx.replicas // 2)
    victims = {ctx.jobs.submit(JobSpec(size, 45)) for _ in range(2)}
    deadline = time.monotonic() + 90
    while {r.job_id for r in ctx.jobs.running()} < victims:
        assert time.monotonic() < deadline, f"jobs {sorted(victims)} did not start"
        time.sleep(2)
    cluster = ctx.kube.get(API, "SlurmCluster", CLUSTER, namespace=ctx.namespace)
    assert cluster is not None
    started = time.monotonic()
    ctx.kube.delete(API, "SlurmCluster", CLUSTER, namespace=ctx.namespace)
    rep.injected = True
    rep.detail = f"deleted the SlurmCluster under jobs {sorted(victims, key=int)}"
    waiting: str | None = None
    last: set[str] = set(victims)
    while True:
        now = ctx.kube.get(API, "SlurmCluster", CLUSTER, namespace=ctx.namespace)
        if now is None:
            break
        deleting = condition(now, "Deleting") or {}
        if waiting is None and deleting.get("reason") == "WaitingForJobs":
            waiting = ctx.since(started)
            rep.observations.append(f"Deleting/WaitingForJobs {waiting} later")
        with contextlib.suppress(AssertionError):  # slurmctld going with the cluster
            last = {q.job_id for q in ctx.jobs.queue(retry_for=0)} & victims
        assert time.monotonic() - started < 300, "the SlurmCluster was not deleted in 300s"
        time.sleep(1)
    rep.observations.append(f"SlurmCluster gone {ctx.since(started)} after the delete")
    if waiting is None:
        rep.violations.append("no Deleting/WaitingForJobs condition while jobs ran")
    # Their end states come from sacct (the jobs-lost check); this is what the
    # suite last saw before slurmctld went.
    rep.observations.append(f"jobs last seen queued: {sorted(last, key=int)}")
    ctx.kube.create(_same_cluster(cluster))
    return None


def _same_cluster(cluster: Manifest) -> dict[str, Any]:
    meta = cluster["metadata"]
    return {
        "apiVersion": cluster["apiVersion"],
        "kind": cluster["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": cluster["spec"],
    }


# In order of value; the deletion is last (a re-created slurmctld starts its job
# ids again, so no job may be submitted after it).
FAULTS: dict[str, Fault] = {
    "busy_pod_deleted": busy_pod_deleted,
    "operator_kill_loop": operator_kill_loop,
    "slurmctld_pod_deleted": slurmctld_pod_deleted,
    "busy_node_relabelled": busy_node_relabelled,
    "busy_node_gpu_drop": busy_node_gpu_drop,
    "busy_node_drained": busy_node_drained,
    "slurmrestd_down": slurmrestd_down,
    "network_partition": network_partition,
    "api_server_restart": api_server_restart,
    "cluster_deleted_and_recreated": cluster_deleted_and_recreated,
}
