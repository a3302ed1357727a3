"""A SlurmCluster's deletion waits while its jobs run (plan/deletion.py decides).

Called from the SlurmCluster's delete handler, on the leader: observe Slurm's
nodes and the slurmctld pod, drain what the plan says, and either let kopf
remove the finalizer or raise a temporary error and retry.
"""

from __future__ import annotations

import datetime as dt
import logging

import kopf
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from pydantic import ValidationError

from slurmkube.api import well_known as wk
from slurmkube.api.meta import from_object
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import names_of
from slurmkube.controllers.clients import SlurmClients
from slurmkube.controllers.observe import API, slurm_view
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.conditions import timestamp
from slurmkube.plan.deletion import (
    DRAIN_REASON,
    deletion_conditions,
    plan_deletion,
    reads_slurm,
)
from slurmkube.plan.model import SlurmNodeView
from slurmkube.slurm.drain import drain
from slurmkube.slurm.errors import SlurmError

log = logging.getLogger(__name__)

RETRY_SECONDS = 5


def remove_slurmd_pods(kube: Kube, namespace: str, cluster: str) -> None:
    """The cluster's slurmd pods go with it, although their NodeSets stay: a slurmd
    left running holds the old slurm.key and would never register with a
    re-created cluster of the same name (which generates new keys)."""
    selector = f"{wk.LABEL_CLUSTER}={cluster},{wk.LABEL_NAME}=slurmd"
    for pod in kube.list("v1", "Pod", namespace, selector):
        kube.delete("v1", "Pod", pod["metadata"]["name"], namespace)


def remove_what_outlives(kube: Kube, namespace: str, cluster: str) -> None:
    """What owner references do not take with the cluster: its slurmd pods (owned
    by their NodeSets) and the cluster-scoped Kueue Topology and ResourceFlavors."""
    remove_slurmd_pods(kube, namespace, cluster)
    selector = f"{wk.LABEL_CLUSTER}={cluster},slurmkube.io/namespace={namespace}"
    for kind in ("Topology", "ResourceFlavor"):
        try:
            objects = kube.list("kueue.x-k8s.io/v1beta2", kind, None, selector)
        except ResourceNotFoundError:
            continue
        for obj in objects:
            kube.delete("kueue.x-k8s.io/v1beta2", kind, obj["metadata"]["name"], None)


def hold_while_jobs_run(kube: Kube, clients: SlurmClients, obj: Manifest) -> None:
    """Return when the cluster may go; raise kopf.TemporaryError while it waits."""
    meta = obj["metadata"]
    try:
        cluster = from_object(SlurmCluster, obj)
    except ValidationError:
        return  # a spec the operator never ran: nothing of it to keep
    policy = cluster.spec.deletion_policy
    forced = (meta.get("annotations") or {}).get(wk.ANNOTATION_FORCE_DELETE) == "true"
    running = _controller_running(kube, cluster)
    slurm = clients.rest(kube, cluster)
    nodes: dict[str, SlurmNodeView] | None = None
    if slurm is not None and reads_slurm(policy=policy, forced=forced, controller_running=running):
        try:
            nodes = {n.name: slurm_view(n) for n in slurm.current_nodes().nodes}
        except SlurmError as err:
            log.info("deletion: Slurm unreadable cluster=%s error=%s", meta["name"], err)
    step = plan_deletion(
        policy=policy,
        forced=forced,
        slurm_nodes=nodes,
        controller_running=running,
        registered=(obj.get("status") or {}).get("slurmdRegistered"),
    )
    for node in step.drain:
        assert slurm is not None
        try:
            drain(slurm, node, DRAIN_REASON)
        except SlurmError as err:
            log.warning("deletion: drain failed node=%s error=%s", node, err)
    log.info("deletion cluster=%s proceed=%s %s", meta["name"], step.proceed, step.message)
    if step.proceed:
        return
    previous = (obj.get("status") or {}).get("conditions") or []
    now = timestamp(dt.datetime.now(dt.UTC))
    conditions = deletion_conditions(previous, step, meta.get("generation"), now)
    kube.patch_status(
        API, "SlurmCluster", meta["name"], meta["namespace"], {"conditions": conditions}
    )
    raise kopf.TemporaryError(step.message, delay=RETRY_SECONDS)


def _controller_running(kube: Kube, cluster: SlurmCluster) -> bool:
    names = names_of(cluster)
    pod = kube.get("v1", "Pod", names.controller_pod, names.namespace)
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return False
    return bool((pod.get("status") or {}).get("phase") == "Running")
