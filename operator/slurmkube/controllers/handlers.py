"""kopf wiring: events mark clusters dirty, a per-cluster timer reconciles (debounced).

Handlers never branch on create vs update: any event on a SlurmCluster, one
of its NodeSets, or a Node change the reconcile would see (labels, resources,
readiness, cordon; not heartbeats) marks the cluster dirty; a 1 s timer per
cluster runs the whole observe -> plan -> apply when dirty, and every 30 s
anyway to catch drift. Many label changes inside one second cost one reconcile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.controllers.apply import apply_plan, propagation_left, write_status
from slurmkube.controllers.observe import observe, slurm_fingerprint
from slurmkube.kube.client import Kube, load_config
from slurmkube.kube.lease import LeaderLease
from slurmkube.render.cluster import plan_cluster
from slurmkube.topology.fleet import node_changed

log = logging.getLogger(__name__)
GROUP, VERSION = wk.GROUP, "v1alpha1"
RESYNC_SECONDS = 30.0
# Slurm's power-saving decisions are no Kubernetes event: while a NodeSet
# autoscales, Slurm's nodes are read this often (one REST call), and the
# cluster reconciled when they changed.
AUTOSCALE_POLL_SECONDS = float(os.environ.get("SLURMKUBE_AUTOSCALE_POLL_SECONDS", "2"))


@dataclass
class _OperatorState:
    kube: Kube | None = None
    lease: LeaderLease | None = None
    # Clusters with an event since their last reconcile.
    dirty: set[tuple[str, str]] = field(default_factory=set)
    last: dict[tuple[str, str], float] = field(default_factory=dict)
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    # When a cluster wants its next reconcile anyway (a pending reconfigure).
    wake: dict[tuple[str, str], float] = field(default_factory=dict)
    # Per Node: node_fingerprint of the last event that marked clusters dirty.
    nodes: dict[str, int] = field(default_factory=dict)
    # Autoscaled clusters: when to look at Slurm's nodes next, and what they were.
    poll: dict[tuple[str, str], float] = field(default_factory=dict)
    fingerprints: dict[tuple[str, str], int | None] = field(default_factory=dict)


State = _OperatorState()


def _kube() -> Kube:
    assert State.kube is not None, "operator not started"
    return State.kube


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = wk.FINALIZER
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
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
    State.dirty.add((namespace or "default", name))


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
        State.dirty.add((namespace or "default", str(spec["clusterRef"])))


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
    State.dirty.add((namespace, cluster))
    selector = f"{wk.LABEL_NODESET}={name},{wk.LABEL_NAME}=slurmd"
    left = _kube().list("v1", "Pod", namespace, selector)
    if left:
        raise kopf.TemporaryError(f"{len(left)} slurmd pods still draining", delay=5)


@kopf.on.event("", "v1", "nodes")
def node_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    """A node that appeared, went, or changed what the reconcile reads marks every
    cluster dirty; heartbeats (most Node events in a large fleet) do not."""
    if not node_changed(State.nodes, type, body):
        return
    for key in list(State.last):
        State.dirty.add(key)


@kopf.timer(GROUP, VERSION, "slurmclusters", interval=1.0, sharp=False)
async def reconcile_timer(namespace: str | None, name: str, **_: Any) -> None:
    key = (namespace or "default", name)
    State.last.setdefault(key, 0.0)
    now = time.monotonic()
    woken = now >= State.wake.get(key, float("inf"))
    if woken:
        del State.wake[key]
    due = woken or now - State.last[key] > RESYNC_SECONDS
    polled = now >= State.poll.get(key, float("inf"))
    if key not in State.dirty and not due and not polled:
        return
    if State.lease is None or not State.lease.is_leader:
        return
    lock = State.locks.setdefault(key, asyncio.Lock())
    if lock.locked():
        return
    async with lock:
        if polled and key not in State.dirty and not due:
            State.poll[key] = now + AUTOSCALE_POLL_SECONDS
            if not await asyncio.to_thread(_slurm_changed, *key):
                return
        await _reconcile_locked(key)


async def reconcile_now(key: tuple[str, str]) -> None:
    """Reconcile a cluster at once, not at its next tick: for a change whose latency a
    user waits on (the Kueue bridge's lease labels). Runs after a reconcile in
    progress, never beside it; leader only, like the timer."""
    if State.lease is None or not State.lease.is_leader or key not in State.last:
        return
    async with State.locks.setdefault(key, asyncio.Lock()):
        await _reconcile_locked(key)


async def _reconcile_locked(key: tuple[str, str]) -> None:
    State.dirty.discard(key)
    State.last[key] = time.monotonic()
    await asyncio.to_thread(reconcile, *key)


def _slurm_changed(namespace: str, name: str) -> bool:
    fingerprint = slurm_fingerprint(_kube(), namespace, name)
    before = State.fingerprints.get((namespace, name))
    State.fingerprints[(namespace, name)] = fingerprint
    return fingerprint is None or fingerprint != before


def reconcile(namespace: str, name: str) -> None:
    kube = _kube()
    started = time.monotonic()
    try:
        with metrics.RECONCILE_SECONDS.labels(name).time():
            snap = observe(kube, namespace, name)
            if snap is None:
                return
            plan = plan_cluster(snap.observed)
            conditions = apply_plan(kube, snap, plan)
            write_status(kube, snap, plan, conditions)
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
        "reconciled cluster=%s/%s pods_created=%d drained=%d deleted=%d seconds=%.2f",
        namespace,
        name,
        len(plan.create_pods),
        len(plan.drain),
        len(plan.delete_pods),
        time.monotonic() - started,
    )
