"""kopf wiring: events mark clusters dirty, a per-cluster loop reconciles (debounced).

Handlers never branch on create vs update: any event on a SlurmCluster, one
of its NodeSets, or a Node change the reconcile would see (labels, resources,
readiness, cordon; not heartbeats) marks the cluster dirty; a kopf daemon per
cluster (`cluster_loop`) sleeps until the events have been quiet for
`spec.topology.debounceSeconds` (topology/debounce.py), then runs the whole
observe -> plan -> apply; and every 30 s anyway to catch drift. A burst of
label changes costs one reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.api.models import TopologySpec
from slurmkube.controllers.apply import (
    apply_plan,
    deliver_config,
    propagation_left,
    write_status,
)
from slurmkube.controllers.observe import (
    NodeEntry,
    node_entry,
    observe,
    observe_rest,
    slurm_fingerprint,
)
from slurmkube.kube.client import Kube, load_config
from slurmkube.kube.lease import LeaderLease
from slurmkube.plan.cluster import Configured, configure, plan_cluster
from slurmkube.topology.debounce import Burst, extend, settled, settles_at
from slurmkube.topology.fleet import node_changed, node_fingerprint

log = logging.getLogger(__name__)
GROUP, VERSION = wk.GROUP, "v1alpha1"
RESYNC_SECONDS = 30.0
RETRY_SECONDS = 5.0  # after a reconcile raised
STANDBY_LOOK_SECONDS = 1.0
DEFAULT_DEBOUNCE_SECONDS = TopologySpec.model_fields["debounce_seconds"].default
# Slurm's power-saving decisions are no Kubernetes event: while a NodeSet
# autoscales, Slurm's nodes are read this often (one REST call), and the
# cluster reconciled when they changed.
AUTOSCALE_POLL_SECONDS = float(os.environ.get("SLURMKUBE_AUTOSCALE_POLL_SECONDS", "2"))


@dataclass
class _OperatorState:
    kube: Kube | None = None
    lease: LeaderLease | None = None
    # Clusters with an event since their last reconcile, and when those came.
    dirty: dict[tuple[str, str], Burst] = field(default_factory=dict)
    last: dict[tuple[str, str], float] = field(default_factory=dict)
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    # When a cluster wants its next reconcile anyway (a pending reconfigure).
    wake: dict[tuple[str, str], float] = field(default_factory=dict)
    # Per Node: node_fingerprint of the last event that marked clusters dirty.
    nodes: dict[str, int] = field(default_factory=dict)
    # Per Node: the fleet_nodes index entry and the fingerprint it was made from.
    entries: dict[str, tuple[int, NodeEntry]] = field(default_factory=dict)
    # The fleet_nodes index, for reconciles started outside a cluster's loop (reconcile_now).
    index: kopf.Index[str, NodeEntry] | None = None
    # Per cluster: set to wake its loop (cluster_loop) before the deadline it sleeps to.
    nudged: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop | None = None
    # Autoscaled clusters: when to look at Slurm's nodes next, and what they were.
    poll: dict[tuple[str, str], float] = field(default_factory=dict)
    fingerprints: dict[tuple[str, str], int | None] = field(default_factory=dict)


State = _OperatorState()


def _mark(key: tuple[str, str]) -> None:
    """Called from kopf's handler threads and from the event loop alike."""
    State.dirty[key] = extend(State.dirty.get(key), time.monotonic())
    if State.loop is not None:
        State.loop.call_soon_threadsafe(_nudge, key)


def _nudge(key: tuple[str, str]) -> None:
    """In the event loop: wake the cluster's loop to reread when it is due."""
    event = State.nudged.get(key)
    if event is not None:
        event.set()


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
    api = load_config(os.environ.get("KUBECONFIG"))
    State.kube = Kube(api)
    namespace = os.environ.get("SLURMKUBE_OPERATOR_NAMESPACE", "default")
    # In a pod the hostname is the pod name, so a restarted container takes its
    # own lease back at once; elsewhere SLURMKUBE_OPERATOR_IDENTITY can say the same.
    identity = os.environ.get("SLURMKUBE_OPERATOR_IDENTITY") or (
        f"{socket.gethostname()}-{os.getpid()}"
    )
    State.lease = LeaderLease(api, namespace, identity)
    State.lease.start()


@kopf.on.cleanup()
def cleanup(**_: Any) -> None:
    if State.lease is not None:
        State.lease.stop()


@kopf.on.event(GROUP, VERSION, "slurmclusters")
def cluster_event(namespace: str | None, name: str, **_: Any) -> None:
    _mark((namespace or "default", name))


@kopf.on.delete(GROUP, VERSION, "slurmclusters")
def cluster_deleted(namespace: str | None, name: str, **_: Any) -> None:
    """Namespaced objects go by owner references; the cluster-scoped Kueue ones by label."""
    kube = _kube()
    selector = f"{wk.LABEL_CLUSTER}={name},slurmkube.io/namespace={namespace or 'default'}"
    for kind in ("Topology", "ResourceFlavor"):
        try:
            objects = kube.list("kueue.x-k8s.io/v1beta2", kind, None, selector)
        except ResourceNotFoundError:
            continue
        for obj in objects:
            kube.delete("kueue.x-k8s.io/v1beta2", kind, obj["metadata"]["name"], None)


@kopf.on.event(GROUP, VERSION, "nodesets")
def node_set_event(namespace: str | None, spec: kopf.Spec, **_: Any) -> None:
    if spec.get("clusterRef"):
        _mark((namespace or "default", str(spec["clusterRef"])))


@kopf.on.delete(GROUP, VERSION, "nodesets")
def node_set_deleted(namespace: str | None, name: str, spec: kopf.Spec, **_: Any) -> None:
    """Hold the NodeSet until its slurmd pods are gone (each drained first).

    Only while its SlurmCluster lives: the cluster's reconcile is what drains
    and removes the pods. Without one (deleted, or on its way out, taking
    slurmctld with it) nothing could drain them, so the NodeSet goes at once
    and garbage collection takes its pods.
    """
    namespace = namespace or "default"
    cluster = str(spec.get("clusterRef", ""))
    cluster_obj = _kube().get(wk.API_VERSION, "SlurmCluster", cluster, namespace)
    if cluster_obj is None or cluster_obj["metadata"].get("deletionTimestamp"):
        log.info("nodeset released namespace=%s nodeset=%s cluster_gone=true", namespace, name)
        return
    _mark((namespace, cluster))
    selector = f"{wk.LABEL_NODESET}={name},{wk.LABEL_NAME}=slurmd"
    left = _kube().list("v1", "Pod", namespace, selector)
    if left:
        raise kopf.TemporaryError(f"{len(left)} slurmd pods still draining", delay=5)


@kopf.index("", "v1", "nodes")
def fleet_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeEntry]:
    """Every Node as the reconcile reads it, kept by the Node watch (an informer's
    cache): kopf fills it from the initial list before any handler or daemon runs,
    and drops a deleted Node's entry. Converted again only when the Node changed
    what the reconcile reads; heartbeats reuse the entry."""
    fingerprint = node_fingerprint(body)
    cached = State.entries.get(name)
    if cached is None or cached[0] != fingerprint:
        cached = State.entries[name] = (fingerprint, node_entry(dict(body)))
    return {name: cached[1]}


@kopf.on.event("", "v1", "nodes")
def node_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    """A node that appeared, went, or changed what the reconcile reads marks every
    cluster dirty; heartbeats (most Node events in a large fleet) do not."""
    if type == "DELETED":
        State.entries.pop(body["metadata"]["name"], None)
    if not node_changed(State.nodes, type, body):
        return
    for key in list(State.last):
        _mark(key)


def _nodes_now(index: kopf.Index[str, NodeEntry]) -> dict[str, NodeEntry]:
    """A copy the reconcile thread may read while the event loop updates the index."""
    return {name: entry for name, store in index.items() for entry in store}


def _due_at(key: tuple[str, str], quiet: float) -> float:
    """When the cluster's next reconcile (or autoscale poll) is due: its events
    settled, a pending config to confirm, an autoscale poll, or the resync."""
    due = [State.last[key] + RESYNC_SECONDS]
    burst = State.dirty.get(key)
    if burst is not None:
        due.append(settles_at(burst, quiet))
    for at in (State.wake.get(key), State.poll.get(key)):
        if at is not None:
            due.append(at)
    return min(due)


@kopf.daemon(GROUP, VERSION, "slurmclusters", cancellation_timeout=10.0)
async def cluster_loop(
    namespace: str | None,
    name: str,
    spec: kopf.Spec,
    stopped: kopf.DaemonStopped,
    **kwargs: Any,
) -> None:
    """One per SlurmCluster: sleeps until its next reconcile is due, woken early by
    every event that marks it dirty, so a settled burst is reconciled on the
    instant, not at a timer's next tick. `spec` is kopf's live view."""
    State.loop = asyncio.get_running_loop()
    # kopf passes each index by its function's name.
    State.index = kwargs["fleet_nodes"]
    key = (namespace or "default", name)
    State.last.setdefault(key, 0.0)
    nudged = State.nudged.setdefault(key, asyncio.Event())
    try:
        while not stopped:
            if State.lease is None or not State.lease.is_leader:
                # A standby follows nothing; it looks each second whether it leads now.
                await asyncio.sleep(STANDBY_LOOK_SECONDS)
                continue
            # Cleared before the deadline is read: a nudge from here on wakes the wait
            # (everything below up to the wait runs without yielding to the loop).
            nudged.clear()
            quiet = float(
                (spec.get("topology") or {}).get("debounceSeconds", DEFAULT_DEBOUNCE_SECONDS)
            )
            delay = _due_at(key, quiet) - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(nudged.wait(), timeout=delay)
                continue
            try:
                await _tick(key, quiet)
            except Exception:
                # Logged and counted (slurmkube_reconcile_errors_total); tried again soon.
                log.exception("reconcile failed cluster=%s/%s", *key)
                State.wake[key] = time.monotonic() + RETRY_SECONDS
    finally:
        State.nudged.pop(key, None)


async def _tick(key: tuple[str, str], quiet: float) -> None:
    now = time.monotonic()
    woken = now >= State.wake.get(key, float("inf"))
    if woken:
        del State.wake[key]
    due = woken or now >= State.last[key] + RESYNC_SECONDS
    polled = now >= State.poll.get(key, float("inf"))
    burst = State.dirty.get(key)
    ready = burst is not None and settled(burst, now, quiet)
    if not ready and not due and not polled:
        return
    if State.lease is None or not State.lease.is_leader:
        return  # lost the lease just now: the loop waits as a standby
    async with State.locks.setdefault(key, asyncio.Lock()):
        if State.last[key] > now:
            return  # a reconcile_now ran while this waited for the lock: it read all this would
        if polled and not ready and not due:
            State.poll[key] = now + AUTOSCALE_POLL_SECONDS
            if not await asyncio.to_thread(_slurm_changed, *key):
                return
        await _reconcile_locked(key)


async def reconcile_now(key: tuple[str, str]) -> None:
    """Reconcile a cluster at once, not at its next tick: for a change whose latency a
    user waits on (the Kueue bridge's lease labels). Runs after a reconcile in
    progress, never beside it; leader only, like the cluster's loop."""
    if State.lease is None or not State.lease.is_leader or key not in State.last:
        return
    if State.index is None:  # kopf has not handed the Node index to a cluster loop yet
        return
    async with State.locks.setdefault(key, asyncio.Lock()):
        await _reconcile_locked(key)


async def _reconcile_locked(key: tuple[str, str]) -> None:
    assert State.index is not None, "set by a cluster's loop, which runs first"
    # Events from here on belong to the next reconcile, which reads them.
    State.dirty.pop(key, None)
    State.last[key] = time.monotonic()
    try:
        await asyncio.to_thread(reconcile, *key, _nodes_now(State.index))
    finally:
        # The reconcile may have set a wake or a poll: the cluster's loop rereads them.
        _nudge(key)


def _slurm_changed(namespace: str, name: str) -> bool:
    fingerprint = slurm_fingerprint(_kube(), namespace, name)
    before = State.fingerprints.get((namespace, name))
    State.fingerprints[(namespace, name)] = fingerprint
    return fingerprint is None or fingerprint != before


def reconcile(namespace: str, name: str, nodes: Mapping[str, NodeEntry]) -> None:
    kube = _kube()
    started = time.monotonic()
    # Seconds per step, for the log line: where a slow reconcile spends its time.
    steps: dict[str, float] = {}

    def step(label: str) -> None:
        steps[label] = time.monotonic() - started - sum(steps.values())

    try:
        with metrics.RECONCILE_SECONDS.labels(name).time():
            snap = observe(kube, namespace, name, nodes)
            if snap is None:
                return
            configured = configure(snap.observed)
            if isinstance(configured, Configured):
                deliver_config(kube, snap, configured)
            step("config")
            snap = observe_rest(kube, snap)
            step("observe")
            plan = plan_cluster(snap.observed, configured)
            conditions = apply_plan(kube, snap, plan)
            step("apply")
            write_status(kube, snap, plan, conditions)
            step("status")
    except Exception:
        metrics.RECONCILE_ERRORS.labels(name).inc()
        raise
    wake = []
    if plan.rendered and any(c.reason == "Propagating" for c in conditions):
        # Come back when the window ends, not at the next resync.
        wake.append(propagation_left(namespace, name))
    if wake:
        State.wake[(namespace, name)] = time.monotonic() + min(wake)
    if plan.scaling:
        State.poll[(namespace, name)] = time.monotonic() + AUTOSCALE_POLL_SECONDS
    else:
        State.poll.pop((namespace, name), None)
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
