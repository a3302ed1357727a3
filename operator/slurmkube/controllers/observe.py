"""Observe: read a SlurmCluster's world from Kubernetes and Slurm into a frozen snapshot."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubernetes.dynamic.exceptions import ResourceNotFoundError
from pydantic import ValidationError

from slurmkube.api import well_known as wk
from slurmkube.api.allocation_source import AllocationSourceSpec
from slurmkube.api.documents import ClusterBundle
from slurmkube.api.grammar import SlurmToken
from slurmkube.api.models import AutoscalingSpec, NodeSet, SlurmCluster, from_object
from slurmkube.build.names import names_of
from slurmkube.build.slurmrestd import TLS_CERT, tls_revision, tls_secret_name
from slurmkube.controllers.certificates import expires_at
from slurmkube.controllers.clients import SlurmClients
from slurmkube.controllers.node_entry import NodeEntry, node_entry
from slurmkube.controllers.upgrade_observe import (
    maintenance_reservations,
    observe_components,
    upgrade_memory,
)
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan import autoscale
from slurmkube.plan.conditions import unreachable_reason
from slurmkube.plan.model import Observed, PodView, SlurmNodeView
from slurmkube.plan.policy.slurm import slurm_config_keys
from slurmkube.plan.status import POD_CONDITION
from slurmkube.render.slurmdbd import DatabaseCredentials
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.models import Node
from slurmkube.slurm.rest import RestClient

__all__ = [
    "API",
    "NodeEntry",
    "Snapshot",
    "node_entry",
    "observe",
    "observe_again",
    "observe_rest",
    "pod_view",
    "slurm_view",
    "with_nodes",
]

log = logging.getLogger(__name__)
API = wk.API_VERSION


def slurm_view(node: Node) -> SlurmNodeView:
    return SlurmNodeView(
        name=node.name,
        busy=node.busy,
        drain=node.drain,
        reason=node.reason,
        responding=node.responding,
        state=_state_class(node),
        gpus=node.gpus,
        gpus_allocated=node.gpus_allocated,
        power=_power(node),
        down=bool({"DOWN", "FAIL"} & node.state),
        cpus=node.cpus,
        real_memory=node.memory_mib,
        gpu_type=node.gpu_type,
        last_busy=node.last_busy,
        topology=node.topology,
    )


def _power(node: Node) -> str:
    """Where power saving has the node, from slurmrestd's state flags (slurm.conf(5))."""
    if "POWERED_DOWN" in node.state:
        return autoscale.SUSPENDED
    if "POWERING_DOWN" in node.state:
        return autoscale.SUSPENDING
    if "POWERING_UP" in node.state:
        return autoscale.RESUMING
    if "POWER_DOWN" in node.state:
        return autoscale.POWER_DOWN_REQUESTED
    return autoscale.UP


def _state_class(node: Node) -> str:
    """sinfo's state names (sinfo(1) NODE STATE CODES), folded to what the status counts."""
    if "POWERED_DOWN" in node.state:
        return "cloud"
    if {"DOWN", "NOT_RESPONDING", "FAIL"} & node.state:
        return "down"
    if node.drain:
        return "drain"
    if "MIXED" in node.state:
        return "mixed"
    if node.state & {"ALLOCATED", "COMPLETING"}:
        return "allocated"
    return "idle"


@dataclass(frozen=True)
class Snapshot:
    cluster_obj: Manifest
    node_set_objs: dict[str, Manifest]
    observed: Observed
    slurm: RestClient | None
    slurm_error: str
    # GPUs pending jobs ask for, per partition (read only while a NodeSet autoscales).
    pending_gpus: dict[str, int] | None = None
    # slurmctld's update_time of the node list read (0: not read).
    nodes_read_at: int = 0


def _node_set(raw: Manifest) -> NodeSet:
    node_set = from_object(NodeSet, raw)
    if raw["metadata"].get("deletionTimestamp"):
        # Leaving: its slurmd pods are drained and removed like a scale to zero.
        node_set = node_set.model_copy(
            update={
                "spec": node_set.spec.model_copy(
                    update={"replicas": 0, "autoscaling": AutoscalingSpec()}
                )
            }
        )
    return node_set


def observe(
    kube: Kube,
    namespace: str,
    name: str,
    nodes: Mapping[str, NodeEntry],
    node_sets: tuple[Manifest, ...],
) -> Snapshot | None:
    """What one cluster's config is made from: the SlurmCluster, its NodeSets, the
    Nodes, the accounting database's login (the rest: `observe_rest`).
    `nodes` is every Kubernetes Node and `node_sets` the NodeSets naming this
    cluster, from the operator's watch-fed indexes (controllers/caches.py)."""
    cluster_obj = _staying_cluster(kube, namespace, name)
    if cluster_obj is None:
        return None
    return with_nodes(_observe_objects(kube, cluster_obj, node_sets), nodes)


def _staying_cluster(kube: Kube, namespace: str, name: str) -> Manifest | None:
    """The SlurmCluster; None when it is gone or going: its delete handler removes
    what owner references do not, and a reconcile now would apply some of it again."""
    cluster_obj = kube.get(API, "SlurmCluster", name, namespace)
    if cluster_obj is None or cluster_obj["metadata"].get("deletionTimestamp"):
        return None
    return cluster_obj


def observe_again(
    kube: Kube,
    namespace: str,
    name: str,
    nodes: Mapping[str, NodeEntry],
    node_sets: tuple[Manifest, ...],
    *,
    last: Snapshot | None,
) -> Snapshot | None:
    """`observe`, reusing `last` (a reconcile's) for all but the Nodes when the
    SlurmCluster's spec and metadata and its NodeSets are the versions it read:
    one read instead of eight for the config queue. A status write (each
    reconcile's) does not count: the SlurmCluster read now replaces the one in
    `last`. The rest `last` read (Secrets, the control plane's objects) may be a
    resync old; a config made from it is written only if safe against the
    config in force (controllers/early_config.py)."""
    if last is None:
        return observe(kube, namespace, name, nodes, node_sets)
    cluster_obj = _staying_cluster(kube, namespace, name)
    if cluster_obj is None:
        return None
    read = {n: resource_version(o) for n, o in last.node_set_objs.items()}
    if _asked(cluster_obj) != _asked(last.cluster_obj) or read != {
        str(o["metadata"]["name"]): resource_version(o) for o in node_sets
    }:
        return with_nodes(_observe_objects(kube, cluster_obj, node_sets), nodes)
    if resource_version(cluster_obj) != resource_version(last.cluster_obj):
        last = replace(last, cluster_obj=cluster_obj)
    return with_nodes(last, nodes)


def _asked(obj: Manifest) -> tuple[object, ...]:
    """What a SlurmCluster asks for: its spec's generation, labels and annotations."""
    meta = obj.get("metadata") or {}
    return (meta.get("generation"), meta.get("labels"), meta.get("annotations"))


def resource_version(obj: Manifest) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def with_nodes(snap: Snapshot, nodes: Mapping[str, NodeEntry]) -> Snapshot:
    """`snap` with the Nodes `nodes` (by name, as a Node list returns them)."""
    fleet = [e.fleet for _, e in sorted(nodes.items()) if e.fleet is not None]
    unavailable = {n: e.unavailable for n, e in nodes.items() if e.unavailable is not None}
    return replace(snap, observed=replace(snap.observed, fleet=fleet, unavailable=unavailable))


def _observe_objects(
    kube: Kube, cluster_obj: Manifest, node_sets: tuple[Manifest, ...]
) -> Snapshot:
    """`observe` without the Nodes."""
    namespace = str(cluster_obj["metadata"]["namespace"])
    name = str(cluster_obj["metadata"]["name"])
    cluster = from_object(SlurmCluster, cluster_obj)
    node_set_objs = {ns["metadata"]["name"]: ns for ns in node_sets}
    policy_source, policy_keys = _allocation_policy(kube, namespace, name)
    bundle = ClusterBundle(
        cluster,
        tuple(_node_set(node_set_objs[n]) for n in sorted(node_set_objs)),
        policy_keys=policy_keys,
        policy_source=policy_source,
    )
    database = _database_credentials(kube, namespace, cluster)
    auth = cluster.spec.auth
    names = names_of(cluster)
    has_keys = bool(auth.slurm_key_secret and auth.jwt_key_secret) or bool(
        kube.secret_value(namespace, names.auth, "slurm.key")
    )
    restapi_tls, restapi_tls_expires = _restapi_tls(kube, namespace, cluster)
    return Snapshot(
        cluster_obj=cluster_obj,
        node_set_objs=node_set_objs,
        observed=Observed(
            bundle=bundle,
            fleet=[],
            pods=(),
            slurm_nodes=None,
            database=database,
            has_keys=has_keys,
            restapi_tls=restapi_tls,
            restapi_tls_expires=restapi_tls_expires,
            components=observe_components(kube, cluster, namespace),
            upgrade_memory=upgrade_memory(cluster_obj),
        ),
        slurm=None,
        slurm_error="Slurm not asked yet",
    )


def _restapi_tls(
    kube: Kube, namespace: str, cluster: SlurmCluster
) -> tuple[str | None, float | None]:
    """A digest of the certificate slurmrestd serves and when it expires; Nones without one."""
    secret = tls_secret_name(cluster) if cluster.spec.rest_api.replicas else None
    cert = kube.secret_value(namespace, secret, TLS_CERT) if secret else None
    if not cert:
        return None, None
    return tls_revision(cert), expires_at(cert)


def _allocation_policy(
    kube: Kube, namespace: str, name: str
) -> tuple[str, tuple[tuple[SlurmToken, SlurmToken], ...]]:
    """The slurm.conf keys of the AllocationSource whose clusterRef names this
    cluster (the first by name; the policy controller reports a second one)."""
    try:
        objects = kube.list(API, "AllocationSource", namespace)
    except ResourceNotFoundError:
        return "", ()  # the CRD is not installed
    for obj in sorted(objects, key=lambda o: str(o["metadata"]["name"])):
        spec = obj.get("spec") or {}
        if spec.get("clusterRef") != name:
            continue
        try:
            parsed = AllocationSourceSpec.model_validate(spec)
        except ValidationError:
            continue  # its own controller reports the field
        return (
            f"AllocationSource {obj['metadata']['name']}",
            slurm_config_keys(parsed.half_life_hours),
        )
    return "", ()


def observe_rest(
    kube: Kube, snap: Snapshot, clients: SlurmClients, pods: tuple[PodView, ...]
) -> Snapshot:
    """The snapshot with the rest of the world, read once the config is delivered:
    the cluster's slurmd pods (`pods`, from the operator's pod index) and what
    slurmrestd says of its nodes (and, while a NodeSet autoscales, of pending jobs)."""
    bundle = snap.observed.bundle
    cluster = bundle.cluster
    slurm = clients.rest(kube, cluster)
    slurm_nodes: dict[str, SlurmNodeView] | None = None
    error = "slurmrestd is disabled or its key is missing" if slurm is None else ""
    pending: dict[str, int] | None = None
    nodes_read_at = 0
    reservations = None
    if slurm is not None:
        try:
            listed = slurm.current_nodes()
            slurm_nodes = {n.name: slurm_view(n) for n in listed.nodes}
            nodes_read_at = listed.update_time
            if any(ns.spec.autoscaling.enabled for ns in bundle.node_sets):
                pending = _pending_gpus(slurm)
        except SlurmError as err:
            error = str(err)
        if slurm_nodes is not None and any(
            ns.spec.update_strategy.window for ns in bundle.node_sets
        ):
            reservations = maintenance_reservations(slurm)
    if error:
        error = unreachable_reason(cluster, snap.observed.restapi_tls is not None, error)
    return replace(
        snap,
        observed=replace(
            snap.observed, pods=pods, slurm_nodes=slurm_nodes, reservations=reservations
        ),
        slurm=slurm,
        slurm_error=error,
        pending_gpus=pending,
        nodes_read_at=nodes_read_at,
    )


def _database_credentials(
    kube: Kube, namespace: str, cluster: SlurmCluster
) -> DatabaseCredentials | None:
    """The external database's login from its Secret; None if off or incomplete
    (the plan then says which Secret and keys it needs)."""
    database = cluster.spec.accounting.database
    if not cluster.spec.accounting.enabled or database is None:
        return None
    user = kube.secret_value(namespace, database.secret_name, "username")
    password = kube.secret_value(namespace, database.secret_name, "password")
    if not user or not password:
        return None
    return DatabaseCredentials(
        user.decode(errors="replace").strip(), password.decode(errors="replace").strip()
    )


def _pending_gpus(slurm: RestClient) -> dict[str, int]:
    """A job pending in several partitions (`-p a,b`) counts in each."""
    demand: dict[str, int] = {}
    for job in slurm.list_jobs({"PENDING"}):
        for partition in filter(None, job.partition.split(",")):
            demand[partition] = demand.get(partition, 0) + job.gpus_requested
    return dict(sorted(demand.items()))


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """Converted once per slurmd pod event, by the operator's pod index."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    slurm_condition = next(
        (
            (c.get("status") == "True", c.get("reason", ""), c.get("message", ""))
            for c in conditions
            if c.get("type") == POD_CONDITION
        ),
        None,
    )
    containers = (pod.get("spec") or {}).get("containers") or []
    return PodView(
        image=next((str(c.get("image", "")) for c in containers if c.get("name") == "slurmd"), ""),
        name=meta["name"],
        node=labels.get(wk.LABEL_NODE, ""),
        node_set=labels.get(wk.LABEL_NODESET, ""),
        deleting=bool(meta.get("deletionTimestamp")),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        template_hash=(meta.get("annotations") or {}).get(wk.ANNOTATION_POD_TEMPLATE_HASH, ""),
        slurm_condition=slurm_condition,
        busy_label=labels.get(wk.LABEL_BUSY) == "true",
    )
