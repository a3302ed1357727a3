"""kopf wiring of the SlurmCluster controller: events add keys to one work queue.

Handlers never branch on create vs update: any event on a SlurmCluster, one
of its NodeSets, or a Node change the config would see (the label keys the
specs read, resources, readiness, cordon; not heartbeats, not labels no config
reads) adds the cluster's key to the queue, debounced by
`spec.topology.debounceSeconds` (topology/debounce.py): a burst of label
changes costs one reconcile; a slurmd pod gone adds it at once. The queue
(`controllers/queue.py`) holds every "when next": the 30 s resync, a
pending config's next look and a rollout's (plan/rollout.py) come back as the
reconcile's `requeue_after`, a failed reconcile is backed off. A Node change
goes through the config queue first (controllers/early_config.py): its config
is written before the reconcile, which follows, reads Slurm. Another queue
polls Slurm every 2 s for each cluster with slurmd pods (plan/slurm_poll.py:
jobs first, nodes when a job changed or power saving is due): the busy labels
follow a job start within the poll, and a cluster's key is added when its
nodes changed if it autoscales (power saving is no Kubernetes event), a node
whose pod goes once idle is, or an awaited slurmd registered (a job's end and
a registration are none either).
Only the leader reconciles; the leader check is the queues' `leading`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.controllers import caches
from slurmkube.controllers.apply import apply_plan
from slurmkube.controllers.deletion import hold_while_jobs_run, remove_what_outlives
from slurmkube.controllers.early_config import deliver, deliver_early, deliver_if_safe
from slurmkube.controllers.heap import HEAP
from slurmkube.controllers.leadership import leader_only, start_lease
from slurmkube.controllers.memory import (
    DEFAULT_DEBOUNCE_SECONDS,
    State,
    cluster_memory,
    label_keys,
    relabel_nodes_seen,
)
from slurmkube.controllers.observe import NodeEntry, observe, observe_rest, with_nodes
from slurmkube.controllers.queue import Key, Result, WorkQueue
from slurmkube.controllers.reconfigure import ConfigDelivery
from slurmkube.controllers.slurm_poll import poll_slurm
from slurmkube.controllers.status import write_failure, write_status
from slurmkube.controllers.topology_moves import follow_slurm
from slurmkube.kube.client import Kube, Manifest, load_config
from slurmkube.plan.cluster import configure, plan_cluster
from slurmkube.plan.holds import not_responding_since
from slurmkube.plan.model import PodView
from slurmkube.plan.reconfigure import next_look
from slurmkube.plan.slurm_poll import node_reads, polled
from slurmkube.topology.fleet import config_label_keys, config_part, node_changed

log = logging.getLogger(__name__)
GROUP, VERSION = wk.GROUP, "v1alpha1"
RESYNC_SECONDS = 30.0
# Clusters reconciled at once: one slow cluster (a 10,000-node Slurm read) must
# not hold up another's label change.
WORKERS = 4
# What added a cluster's key, for slurmkube_reconciles_total; the first present wins.
TRIGGERS = ("cluster", "nodeset", "node", "pod", "lease", "poll")


async def _reconcile_key(key: Key) -> Result:
    memory = cluster_memory(key)
    trigger = next((t for t in TRIGGERS if t in memory.triggers), "requeue")
    memory.triggers.clear()
    metrics.RECONCILES.labels(*key, trigger).inc()
    nodes_at, nodes, keys_before = time.monotonic(), caches.nodes_now(), label_keys()
    requeue = await asyncio.to_thread(
        reconcile,
        *key,
        nodes,
        caches.node_sets_now(key),
        caches.slurmd_pods_now(key),
        nodes_at=nodes_at,
    )
    keys = label_keys()
    if keys != keys_before:
        relabel_nodes_seen({name: e.labels for name, e in nodes.items()}, keys)
    await asyncio.to_thread(HEAP.settle)
    return Result(requeue_after=requeue)


async def _config_key(key: Key) -> Result:
    """A Node change's config, written before Slurm is read (controllers/early_config.py);
    the cluster's reconcile follows."""
    memory = State.clusters.get(key)
    try:
        if memory is not None and memory.delivered is not None:
            nodes_at = time.monotonic()
            await asyncio.to_thread(
                deliver_early,
                _kube(),
                key,
                memory,
                nodes=caches.nodes_now(),
                node_sets=caches.node_sets_now(key),
                pods=caches.slurmd_pods_now(key),
                nodes_at=nodes_at,
            )
    finally:
        CLUSTERS.add(key)
    return Result()


async def _poll_key(key: Key) -> Result:
    """A cluster's Slurm node states: busy labels follow them; an autoscaled
    cluster reconciles when they changed."""
    memory = State.clusters.get(key)
    if memory is None or not memory.polled:
        return Result()
    pods, since, now = caches.slurmd_pods_now(key), memory.nodes_read_at, time.time()
    step, read = await asyncio.to_thread(
        poll_slurm,
        _kube(),
        State.clients,
        key,
        pods,
        since=since,
        autoscaling=memory.autoscaling,
        answered_before=memory.poll_answered,
        jobs_since=memory.jobs_read_at,
        # A slurmd registering changes no job: its node is read for while awaited.
        nodes_due=memory.node_reads.due(now) or bool(memory.awaited),
        go_when_idle=memory.pods_go_when_idle,
        awaited=memory.awaited,
    )
    memory.nodes_read_at = max(memory.nodes_read_at, read.read_at)
    memory.jobs_read_at = max(memory.jobs_read_at, read.jobs_at)
    memory.poll_answered = read.answered
    if read.nodes is not None:
        memory.node_reads = node_reads(read.nodes, memory.suspend_time, now)
    if step.reconcile:
        _mark(key, "poll", debounce=False)
    return Result(requeue_after=State.settings.autoscale_poll_seconds)


CLUSTERS: WorkQueue[Key] = WorkQueue(_reconcile_key, name="slurmclusters", workers=WORKERS)
CONFIGS: WorkQueue[Key] = WorkQueue(_config_key, name="slurmcluster-configs", workers=WORKERS)
POLLS: WorkQueue[Key] = WorkQueue(_poll_key, name="autoscale-polls")


def _mark(key: Key, trigger: str, *, debounce: bool = True, config_first: bool = False) -> None:
    """Called from kopf's handler threads and from the event loop alike.
    `config_first`: the config queue runs first, then the reconcile."""
    memory = cluster_memory(key)
    memory.triggers.add(trigger)
    if config_first:
        CONFIGS.add_debounced(key, memory.debounce)
    elif debounce:
        CLUSTERS.add_debounced(key, memory.debounce)
    else:
        CLUSTERS.add(key)


def _kube() -> Kube:
    assert State.kube is not None, "operator not started"
    return State.kube


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = wk.FINALIZER
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # kopf holds each object's event this long for a newer one of the same object
    # (default 0.1 s). Handlers here are idempotent and cheap, and a Node label
    # change is on the clock of the label-to-Slurm target (DESIGN.md §7).
    settings.batching.batch_window = 0.02
    # Each kind's initial list in pages, as client-go's reflector reads it (500 a
    # page), not in one response (Nodes have a reflector of their own: caches.py).
    settings.watching.chunk_size = 500
    api = load_config(os.environ.get("KUBECONFIG"))
    State.kube = Kube(api)
    State.lease = start_lease(api, State.settings)


@kopf.on.startup()
async def start_queues(**_: Any) -> None:
    loop = asyncio.get_running_loop()
    State.tasks = [loop.create_task(q.run(caches.serving)) for q in (CLUSTERS, CONFIGS, POLLS)]


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    for task in State.tasks:
        task.cancel()
    if State.lease is not None:
        await asyncio.to_thread(State.lease.stop)  # steps down, then releases the Lease
    State.clients.close_all()


@kopf.on.event(GROUP, VERSION, "slurmclusters")
def cluster_event(
    type: str | None, namespace: str | None, name: str, spec: kopf.Spec, **kwargs: Any
) -> None:
    caches.take(kwargs)
    key = (wk.namespace_or_default(namespace), name)
    if type == "DELETED":
        _forget(key)
        return
    memory = cluster_memory(key)
    memory.debounce = float(
        (spec.get("topology") or {}).get("debounceSeconds", DEFAULT_DEBOUNCE_SECONDS)
    )
    _mark(key, "cluster")


def _forget(key: Key) -> None:
    CLUSTERS.forget(key)
    CONFIGS.forget(key)
    POLLS.forget(key)
    State.clusters.pop(key, None)
    State.clients.close(*key)


@kopf.on.delete(GROUP, VERSION, "slurmclusters")
def cluster_deleted(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> None:
    """Once no job runs (or the deletion is forced): namespaced objects go by owner
    references, the cluster-scoped Kueue ones by label."""
    leader_only(State.lease, "SlurmCluster", namespace, name)
    kube = _kube()
    hold_while_jobs_run(kube, State.clients, dict(body))
    remove_what_outlives(kube, wk.namespace_or_default(namespace), name)


@kopf.on.event(GROUP, VERSION, "nodesets")
def node_set_event(namespace: str | None, spec: kopf.Spec, **kwargs: Any) -> None:
    caches.take(kwargs)
    if spec.get("clusterRef"):
        _mark((wk.namespace_or_default(namespace), str(spec["clusterRef"])), "nodeset")


@kopf.on.delete(GROUP, VERSION, "nodesets")
def node_set_deleted(namespace: str | None, name: str, spec: kopf.Spec, **_: Any) -> None:
    """Hold the NodeSet until its slurmd pods are gone (each drained first).

    Only while its SlurmCluster lives: the cluster's reconcile is what drains
    and removes the pods. Without one (deleted, or on its way out, taking
    slurmctld with it) nothing could drain them, so the NodeSet goes at once
    and garbage collection takes its pods.
    """
    leader_only(State.lease, "NodeSet", namespace, name)
    namespace = wk.namespace_or_default(namespace)
    cluster = str(spec.get("clusterRef", ""))
    cluster_obj = _kube().get(wk.API_VERSION, "SlurmCluster", cluster, namespace)
    if cluster_obj is None or cluster_obj["metadata"].get("deletionTimestamp"):
        log.info("nodeset released namespace=%s nodeset=%s cluster_gone=true", namespace, name)
        return
    _mark((namespace, cluster), "nodeset")
    selector = f"{wk.LABEL_NODESET}={name},{wk.LABEL_NAME}=slurmd"
    left = _kube().list("v1", "Pod", namespace, selector)
    if left:
        raise kopf.TemporaryError(f"{len(left)} slurmd pods still draining", delay=5)


@kopf.on.event("", "v1", "pods", labels={wk.LABEL_NAME: "slurmd"})
def slurmd_pod_event(
    type: str | None, namespace: str | None, labels: kopf.Labels, **_: Any
) -> None:
    """A slurmd pod gone (its node failed, a forced delete): made again at once, its
    node set DOWN first if Slurm shows a job there (plan/lost_pods.py)."""
    if type == "DELETED" and labels.get(wk.LABEL_CLUSTER):
        _mark((wk.namespace_or_default(namespace), labels[wk.LABEL_CLUSTER]), "pod", debounce=False)


@caches.on_node
def node_event(type: str, body: Manifest) -> None:
    """A node that appeared, went, or changed what a config reads marks every
    cluster dirty; heartbeats and labels no config reads (most Node events in a
    large fleet) do not."""
    name = body["metadata"]["name"]
    before = State.nodes_seen.get(name)
    if not node_changed(State.nodes_seen, type, body, label_keys()):
        return
    # A change the config reads goes through the config queue first; readiness,
    # cordon and health signals only place pods: the reconcile alone.
    config = config_part(before) != config_part(State.nodes_seen.get(name))
    for key in list(State.clusters):
        _mark(key, "node", config_first=config)


async def reconcile_now(key: Key) -> None:
    """Reconcile a cluster at once, not debounced: for a change whose latency a
    user waits on (the Kueue bridge's lease labels)."""
    if key in State.clusters:
        _mark(key, "lease", debounce=False)


def reconcile(
    namespace: str,
    name: str,
    nodes: Mapping[str, NodeEntry],
    node_sets: tuple[Manifest, ...],
    pods: tuple[PodView, ...],
    *,
    nodes_at: float = 0.0,
) -> float | None:
    """One observe -> plan -> apply; returns when to come back (None: only on events).
    `nodes_at`: when `nodes` was taken from the Node cache (controllers/early_config.py)."""
    kube = _kube()
    key = (namespace, name)
    memory = cluster_memory(key)
    started = time.monotonic()
    # Seconds per step, for the log line: where a slow reconcile spends its time.
    steps: dict[str, float] = {}

    def step(label: str) -> None:
        steps[label] = time.monotonic() - started - sum(steps.values())

    snap = None
    try:
        with metrics.RECONCILE_SECONDS.labels(namespace, name).time():
            snap = observe(kube, namespace, name, nodes, node_sets)
            if snap is None:
                # No such SlurmCluster (a NodeSet may name one): its config reads no label.
                memory.label_keys = frozenset()
                memory.observed = None
                return None
            memory.observed = with_nodes(snap, {})
            # The pods' images too: the files suit the oldest Slurm a slurmd runs.
            configured = configure(replace(snap.observed, pods=pods))
            # A label change does not wait for Slurm's answer, unless the new config
            # would take a line from a node that may run a job: then the plan holds it.
            early = deliver_if_safe(kube, snap, memory, configured, nodes_at)
            step("config")
            snap = observe_rest(kube, snap, State.clients, pods)
            now = time.time()
            observed = replace(snap.observed, now=now, not_responding_since=memory.not_responding)
            snap = replace(snap, observed=observed)
            follow_slurm(kube, snap, memory)
            step("observe")
            plan = plan_cluster(observed, configured)
            power = plan.config.power if plan.config is not None else None
            memory.suspend_time = power.suspend_time if power is not None else None
            memory.pods_go_when_idle = plan.pods_go_when_idle
            memory.awaited = plan.awaited
            if observed.slurm_nodes is not None:
                memory.node_reads = node_reads(observed.slurm_nodes, memory.suspend_time, now)
            memory.not_responding = not_responding_since(
                memory.not_responding, observed.slurm_nodes, now
            )
            if plan.rendered is not None and (
                not early or plan.rendered.content_hash != memory.delivered_content
            ):
                deliver(kube, snap, memory, plan, nodes_at)
            cluster = observed.bundle.cluster
            delivery = ConfigDelivery(
                memory.config_clock,
                lambda: State.clients.scontrol(kube, cluster),
                State.settings.propagation_seconds,
            )
            conditions = apply_plan(kube, snap, plan, delivery)
            step("apply")
            write_status(kube, snap, plan, conditions)
            step("status")
    except Exception as err:
        metrics.RECONCILE_ERRORS.labels(namespace, name).inc()
        if snap is not None:
            with contextlib.suppress(Exception):
                write_failure(kube, snap.cluster_obj, err)
        raise
    memory.label_keys = config_label_keys(snap.observed.bundle)
    memory.autoscaling = bool(plan.scaling)
    memory.polled = polled(
        autoscaling=memory.autoscaling, pods=len(pods), creating=len(plan.create_pods)
    )
    memory.nodes_read_at = snap.nodes_read_at
    if memory.polled:
        POLLS.add(key, State.settings.autoscale_poll_seconds)
    requeue = RESYNC_SECONDS
    if plan.look_again_seconds is not None:
        requeue = min(requeue, plan.look_again_seconds)
    if plan.rendered and any(c.reason == "Propagating" for c in conditions):
        # Come back when the window ends, not at the next resync.
        window = State.settings.propagation_seconds
        requeue = min(requeue, next_look(memory.config_clock, time.monotonic(), window))
    log.info(
        "reconciled cluster=%s/%s pods_created=%d drained=%d deleted=%d seconds=%.2f (%s)",
        namespace,
        name,
        len(plan.create_pods),
        len(plan.drain),
        len(plan.delete_pods),
        time.monotonic() - started,
        " ".join(f"{label}={seconds:.2f}" for label, seconds in steps.items()),
    )
    return requeue
