"""The operator's informer caches: kopf indexes of Nodes, slurmd pods, NodeSets and
Workloads, each object converted once per event into what a reconcile reads.

kopf fills every index from its initial list before any handler runs, keeps it
from the watch and hands all of them to every handler by their functions'
names (`take`). Reconciles run in worker threads, so they read copies taken on
the event loop (`nodes_now`, `slurmd_pods_now`, ...): a reconcile or a bridge
round lists none of these kinds, and costs the same at 25,000 Nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from slurmkube.api import well_known as wk
from slurmkube.controllers.observe import NodeEntry, node_entry, pod_view
from slurmkube.controllers.queue import Key
from slurmkube.kube.client import Manifest
from slurmkube.plan.model import PodView
from slurmkube.topology.fleet import node_fingerprint


@dataclass
class _Caches:
    nodes: kopf.Index[None, NodeEntry] | None = None
    pods: kopf.Index[Key, PodView] | None = None
    node_sets: kopf.Index[Key, Manifest] | None = None
    workloads: kopf.Index[str, Manifest] | None = None
    # Per Node: the entry and the fingerprint it was converted from (heartbeats reuse it).
    entries: dict[str, tuple[int, NodeEntry]] = field(default_factory=dict)
    # The condition types and taint keys health rules read (controllers/health.py):
    # a change of one converts a Node again.
    health_keys: frozenset[str] = frozenset()


CACHES = _Caches()


def take(kwargs: Mapping[str, Any]) -> None:
    """Keep the indexes kopf passes to a handler (the same objects every time)."""
    if CACHES.nodes is None and "fleet_nodes" in kwargs:
        CACHES.nodes = kwargs["fleet_nodes"]
    if CACHES.pods is None and "slurmd_pods" in kwargs:
        CACHES.pods = kwargs["slurmd_pods"]
    if CACHES.node_sets is None and "cluster_node_sets" in kwargs:
        CACHES.node_sets = kwargs["cluster_node_sets"]
    if CACHES.workloads is None and "kueue_workloads" in kwargs:
        CACHES.workloads = kwargs["kueue_workloads"]


def ready() -> bool:
    """Whether kopf has handed over the indexes (with the first event of any kind)."""
    return CACHES.nodes is not None


@kopf.index("", "v1", "nodes")
async def fleet_nodes(name: str, body: kopf.Body, **_: Any) -> dict[None, NodeEntry]:
    """Every Node as a reconcile reads it; converted again only when the Node
    changed what a conversion reads. All under one key: kopf keeps a store per
    key, and one per Node cost ~300 bytes each (an entry knows its name)."""
    fingerprint = node_fingerprint(body, signal_keys=CACHES.health_keys)
    cached = CACHES.entries.get(name)
    if cached is None or cached[0] != fingerprint:
        cached = CACHES.entries[name] = (fingerprint, node_entry(dict(body)))
    return {None: cached[1]}


def node_gone(name: str) -> None:
    CACHES.entries.pop(name, None)


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
    index = CACHES.nodes
    assert index is not None, "kopf hands the indexes over before any key is added"
    return {entry.name: entry for store in index.values() for entry in store}


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
