"""The operator's informer caches: Nodes from a reflector of our own, slurmd pods,
NodeSets and Workloads from kopf indexes; each object converted once per event
into what a reconcile reads.

Nodes are the fleet (25,000 at the scale target), read by the Node reflector
(kube/informer.py) in pages and converted in its thread; the event loop keeps
the entries and tells the Node subscribers (the cluster, health and lending
controllers) of each event. kopf fills its indexes from its initial lists
before any handler runs, keeps them from the watch and hands all of them to
every handler by their functions' names (`take`). Reconciles run in worker
threads, so they read copies taken on the event loop (`nodes_now`,
`slurmd_pods_now`, ...): a reconcile or a bridge round lists none of these
kinds, and costs the same at 25,000 Nodes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from slurmkube.api import well_known as wk
from slurmkube.controllers.memory import leading
from slurmkube.controllers.observe import NodeEntry, node_entry, pod_view
from slurmkube.controllers.queue import Key
from slurmkube.kube.client import Manifest, load_config
from slurmkube.kube.informer import Reflector, node_reflector
from slurmkube.plan.model import PodView
from slurmkube.topology.fleet import node_fingerprint

log = logging.getLogger(__name__)

# Told of every Node event, on the event loop, with the Node as `slim` keeps it.
NodeSubscriber = Callable[[str, Manifest], None]


@dataclass
class _Caches:
    pods: kopf.Index[Key, PodView] | None = None
    node_sets: kopf.Index[Key, Manifest] | None = None
    workloads: kopf.Index[str, Manifest] | None = None
    # The condition types and taint keys health rules read (controllers/health.py):
    # a change of one converts a Node again.
    health_keys: frozenset[str] = frozenset()


@dataclass
class _Nodes:
    """Every Node as a reconcile reads it (kept on the event loop)."""

    entries: dict[str, NodeEntry] = field(default_factory=dict)
    # Whether the reflector's first list is through: before, a config would miss nodes.
    listed: bool = False
    subscribers: list[NodeSubscriber] = field(default_factory=list)
    reflector: Reflector | None = None


CACHES = _Caches()
NODES = _Nodes()


def take(kwargs: Mapping[str, Any]) -> None:
    """Keep the indexes kopf passes to a handler (the same objects every time)."""
    if CACHES.pods is None and "slurmd_pods" in kwargs:
        CACHES.pods = kwargs["slurmd_pods"]
    if CACHES.node_sets is None and "cluster_node_sets" in kwargs:
        CACHES.node_sets = kwargs["cluster_node_sets"]
    if CACHES.workloads is None and "kueue_workloads" in kwargs:
        CACHES.workloads = kwargs["kueue_workloads"]


def ready() -> bool:
    """Whether every cache is filled: the Node reflector has listed the fleet once,
    and kopf has handed over its indexes (with the first event of any kind)."""
    return NODES.listed and CACHES.pods is not None


def serving() -> bool:
    """Whether this operator reconciles: it leads, and its caches are filled."""
    return leading() and ready()


def on_node(subscriber: NodeSubscriber) -> NodeSubscriber:
    """Register a Node subscriber (a decorator)."""
    NODES.subscribers.append(subscriber)
    return subscriber


def slim(raw: Manifest) -> Manifest:
    """A Node as its subscribers read it: its name and labels, cordon and taints,
    conditions and resources; not its images, addresses or managed fields, which
    are most of a Node and would be held while events wait for the event loop."""
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    return {
        "metadata": {"name": meta.get("name", ""), "labels": meta.get("labels") or {}},
        "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec},
        "status": {k: status[k] for k in ("conditions", "allocatable", "capacity") if k in status},
    }


# One Node event as the event loop takes it: type, the slim Node, its entry (None: gone).
_Change = tuple[str, Manifest, NodeEntry | None]


class NodeSink:
    """The Node reflector's sink: converts in the reflector's thread, then hands
    the entries to the event loop (a page at a time, waiting for each, so at
    most one page of Nodes is decoded at once)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # Per Node: the entry and the fingerprint it was converted from (heartbeats reuse it).
        self._converted: dict[str, tuple[int, NodeEntry]] = {}

    def _entry(self, raw: Manifest) -> NodeEntry:
        name = raw["metadata"]["name"]
        fingerprint = node_fingerprint(raw, signal_keys=CACHES.health_keys)
        cached = self._converted.get(name)
        if cached is None or cached[0] != fingerprint:
            cached = self._converted[name] = (fingerprint, node_entry(raw))
        return cached[1]

    def _changes(self, events: list[tuple[str, Manifest]]) -> list[_Change]:
        """Each event converted; one that cannot be (no Node the API server sends)
        is logged and skipped, so it cannot stall the watch, which would retry it."""
        changes: list[_Change] = []
        for event_type, raw in events:
            try:
                changes.append((event_type, slim(raw), self._entry(raw)))
            except Exception:
                log.exception("node event skipped type=%s", event_type)
        return changes

    def listed_page(self, items: list[Manifest]) -> None:
        known = self._converted
        events = [
            ("MODIFIED" if raw["metadata"]["name"] in known else "ADDED", raw) for raw in items
        ]
        self._post(self._changes(events), wait=True)

    def listed(self, names: frozenset[str]) -> None:
        gone = [name for name in self._converted if name not in names]
        for name in gone:
            del self._converted[name]
        changes: list[_Change] = [("DELETED", {"metadata": {"name": n}}, None) for n in gone]
        self._post(changes, wait=True, listed=True)

    def event(self, event_type: str, obj: Manifest) -> None:
        if event_type == "DELETED":
            self._converted.pop(obj["metadata"]["name"], None)
            self._post([(event_type, slim(obj), None)], wait=False)
        else:
            self._post(self._changes([(event_type, obj)]), wait=False)

    def _post(self, changes: list[_Change], *, wait: bool, listed: bool = False) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                _take_nodes(changes, listed=listed)
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        if wait:
            done.wait()


def _take_nodes(changes: list[_Change], *, listed: bool) -> None:
    for event_type, node, entry in changes:
        name = node["metadata"]["name"]
        if entry is None:
            NODES.entries.pop(name, None)
        else:
            NODES.entries[name] = entry
        for subscriber in NODES.subscribers:
            try:
                subscriber(event_type, node)
            except Exception:
                log.exception("node subscriber failed node=%s", name)
    if listed and not NODES.listed:
        NODES.listed = True
        log.info("nodes listed count=%d", len(NODES.entries))


@kopf.on.startup()
async def watch_nodes(**_: Any) -> None:
    """On a standby too: the one that takes over has its fleet at hand."""
    api = load_config(os.environ.get("KUBECONFIG"))
    NODES.reflector = node_reflector(api, NodeSink(asyncio.get_running_loop()))
    NODES.reflector.start()


@kopf.on.cleanup()
async def stop_watching_nodes(**_: Any) -> None:
    if NODES.reflector is not None:
        NODES.reflector.stop()


@kopf.index("", "v1", "pods", labels={wk.LABEL_NAME: "slurmd"})
def slurmd_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[Key, PodView] | None:
    """Every slurmd pod, by its cluster."""
    cluster = labels.get(wk.LABEL_CLUSTER)
    if not cluster:
        return None
    return {(wk.namespace_or_default(namespace), cluster): pod_view(body)}


@kopf.index(wk.GROUP, "v1alpha1", "nodesets")
def cluster_node_sets(
    namespace: str | None, spec: kopf.Spec, body: kopf.Body, **_: Any
) -> dict[Key, Manifest] | None:
    """Every NodeSet, by the cluster it names."""
    cluster = spec.get("clusterRef")
    if not cluster:
        return None
    return {(wk.namespace_or_default(namespace), str(cluster)): dict(body)}


@kopf.index("kueue.x-k8s.io", "v1beta2", "workloads")
def kueue_workloads(uid: str, body: kopf.Body, **_: Any) -> dict[str, Manifest]:
    """Every Workload in the operator's namespaces (kopf watches only those)."""
    return {uid: dict(body)}


def nodes_now() -> dict[str, NodeEntry]:
    assert NODES.listed, "the queues take no key before the fleet is listed"
    return dict(NODES.entries)


def slurmd_pods_now(key: Key) -> tuple[PodView, ...]:
    """One cluster's slurmd pods, by name (as a list returns them)."""
    index = CACHES.pods
    if index is None or key not in index:
        return ()
    return tuple(sorted(index[key], key=lambda pod: pod.name))


def all_slurmd_pods_now() -> dict[Key, tuple[PodView, ...]]:
    return {key: slurmd_pods_now(key) for key in list(CACHES.pods or {})}


def node_sets_now(key: Key) -> tuple[Manifest, ...]:
    """The NodeSets naming one cluster, by name."""
    index = CACHES.node_sets
    if index is None or key not in index:
        return ()
    return tuple(sorted(index[key], key=lambda raw: str(raw["metadata"]["name"])))


def all_node_sets_now() -> tuple[Manifest, ...]:
    """Every NodeSet, by namespace and name (as a list returns them)."""
    index = CACHES.node_sets
    found = [raw for store in (index or {}).values() for raw in store]
    return tuple(
        sorted(
            found, key=lambda raw: (raw["metadata"].get("namespace", ""), raw["metadata"]["name"])
        )
    )


def workloads_now() -> tuple[Manifest, ...]:
    index = CACHES.workloads
    return tuple(raw for store in (index or {}).values() for raw in store)
