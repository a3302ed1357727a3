"""Apply a plan: server-side apply, drain, delete, deliver the config (whether
Slurm has it in force: `controllers/reconfigure.py`)."""

from __future__ import annotations

import base64
import datetime as dt
import functools
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import replace

from kubernetes.dynamic.exceptions import ResourceNotFoundError, UnprocessibleEntityError

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.build.auth import auth_secret, restapi_tls_secret
from slurmkube.build.names import deployment_context, names_of
from slurmkube.build.slurmd import busy_label_patch
from slurmkube.build.slurmrestd import CA_CERT, tls_revision, with_tls_revision
from slurmkube.controllers import handovers
from slurmkube.controllers.certificates import first_certificate, issue_server_certificate
from slurmkube.controllers.failpoints import Step, reached
from slurmkube.controllers.observe import Snapshot
from slurmkube.controllers.reconfigure import ConfigDelivery, confirm_config
from slurmkube.controllers.scaling import apply_scaling
from slurmkube.controllers.upgrade_apply import apply_maintenance
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.cluster import mounted_first, undrain_candidates
from slurmkube.plan.events import aggregate
from slurmkube.plan.lost_pods import LOST_REASON
from slurmkube.plan.model import Condition, Plan
from slurmkube.plan.reconfigure import (
    ConfigClock,
    advance,
)
from slurmkube.plan.topology_status import topology_applied
from slurmkube.render.files import RenderedConfig
from slurmkube.slurm.drain import down, drain, resume_if_ours
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.protocol import SlurmClient
from slurmkube.slurm.rest import RestClient

log = logging.getLogger(__name__)


def deliver_config(
    kube: Kube,
    snap: Snapshot,
    config_map: Manifest,
    rendered: RenderedConfig,
    clock: ConfigClock | None,
    *,
    changed: bool = True,
) -> ConfigClock:
    """Write the ConfigMap of `rendered` and tell the slurmctld pods (build/reloader.py
    takes it from there). `changed`: its files differ from the last ones written.
    Returns the config's clock, which the controller keeps for the next reconciles."""
    wanted = rendered.hash
    # Before the write: a reconfigure that read the new files happened after
    # this instant, which is what `loaded_since` compares against.
    clock = advance(clock, wanted, time.monotonic(), dt.datetime.now(dt.UTC))
    kube.apply(config_map, owner=snap.cluster_obj)
    if (snap.cluster_obj.get("status") or {}).get("configHash") != wanted:
        _annotate_controllers(kube, snap, wk.ANNOTATION_CONFIG_HASH, wanted)
    elif changed and rendered.topology_frame is not None:
        # Nodes moved live: no reconfigure, but a slurmctld that restarts must
        # find the files that place them so; the kubelet copies them now.
        _annotate_controllers(kube, snap, wk.ANNOTATION_CONFIG_CONTENT, rendered.content_hash)
    return clock


def _generate_keys(kube: Kube, snap: Snapshot) -> None:
    """slurm.key (1 KiB) and jwt.key (32 bytes), made once: only if no Secret has them."""
    cluster = snap.observed.bundle.cluster
    secret = auth_secret(
        cluster,
        base64.b64encode(secrets.token_bytes(1024)).decode(),
        base64.b64encode(secrets.token_bytes(32)).decode(),
    )
    if kube.create_if_absent(secret, owner=snap.cluster_obj):
        kube.event(snap.cluster_obj, "KeysGenerated", f"generated Secret {names_of(cluster).auth}")


def _issue_restapi_tls(kube: Kube, snap: Snapshot) -> str | None:
    """slurmrestd's certificate: created if its Secret has none, replaced when it
    ends soon, with the CA before it still in `ca.crt` while the pods roll.
    Returns the new certificate's revision (None: another writer was first)."""
    cluster = snap.observed.bundle.cluster
    names = names_of(cluster)
    issued = issue_server_certificate(names.restapi_dns_names)
    if snap.observed.restapi_tls is None:
        secret = restapi_tls_secret(cluster, issued.ca_pem, issued.cert_pem, issued.key_pem)
        if not kube.create_if_absent(secret, owner=snap.cluster_obj):
            return None
        message = f"issued slurmrestd's certificate into Secret {names.restapi_tls}"
        kube.event(snap.cluster_obj, "CertificateIssued", message)
        return tls_revision(issued.cert_pem)
    before = kube.secret_value(names.namespace, names.restapi_tls, CA_CERT) or b""
    bundle = issued.ca_pem + first_certificate(before)
    kube.apply(
        restapi_tls_secret(cluster, bundle, issued.cert_pem, issued.key_pem),
        owner=snap.cluster_obj,
    )
    message = f"renewed slurmrestd's certificate in Secret {names.restapi_tls}"
    kube.event(snap.cluster_obj, "CertificateRenewed", message)
    return tls_revision(issued.cert_pem)


def apply_plan(kube: Kube, snap: Snapshot, plan: Plan, config: ConfigDelivery) -> list[Condition]:
    """Every step is idempotent: a crash anywhere is finished by the next reconcile.
    The ConfigMap is already written (`deliver_config`)."""
    cluster_obj = snap.cluster_obj
    namespace = cluster_obj["metadata"]["namespace"]
    conditions = list(plan.conditions)
    if plan.generate_keys:
        _generate_keys(kube, snap)
    # The plan was made before a certificate issued now existed: slurmrestd's pods
    # start with it, rather than roll onto it at the next reconcile.
    if plan.issue_restapi_tls and (revision := _issue_restapi_tls(kube, snap)):
        plan = replace(plan, objects=with_tls_revision(plan.objects, revision))
    if plan.rendered is None:
        message = plan.conditions[0].message
        before = (cluster_obj.get("status") or {}).get("conditions") or []
        # Said once per distinct problem, not on every reconcile of a broken spec.
        said = {c.get("message") for c in before if c.get("reason") == "InvalidSpec"}
        if message[:1024] not in said:
            kube.event(cluster_obj, "InvalidSpec", message, warning=True)
        return conditions
    for obj in mounted_first(plan.objects):
        apply_object(kube, obj, cluster_obj)
    for api_version, kind, name in plan.prune:
        kube.delete(api_version, kind, name, namespace)
    created: dict[str, list[str]] = {}
    not_yet = down_lost_nodes(kube, snap, plan)
    for pod in plan.create_pods:
        if pod["metadata"]["labels"][wk.LABEL_NODE] in not_yet:
            continue
        node_set = pod["metadata"]["labels"][wk.LABEL_NODESET]
        kube.apply(pod, owner=snap.node_set_objs[node_set])
        created.setdefault(node_set, []).append(pod["metadata"]["labels"][wk.LABEL_NODE])
        metrics.SLURMD_PODS_CREATED.labels(namespace, cluster_obj["metadata"]["name"]).inc()
        log.info("slurmd pod created pod=%s", pod["metadata"]["name"])
        reached(Step.SLURMD_POD_CREATED)
    for budget in plan.disruption_budgets:
        kube.apply(budget, owner=cluster_obj)
    patch_busy_labels(kube, namespace, plan.busy_labels)
    for node_set, nodes in created.items():
        kube.event(
            snap.node_set_objs[node_set],
            "SlurmdCreated",
            aggregate("created", "slurmd pods on", nodes),
        )
    slurm = snap.slurm
    slurm_ok = snap.observed.slurm_nodes is not None and slurm is not None
    deletes = list(plan.delete_pods)
    if slurm_ok and slurm is not None:
        drained = []
        for node in plan.drain:
            try:
                drain(slurm, node, plan.drain_reasons.get(node, "slurmd pod removal"))
                metrics.DRAINS.labels(namespace, cluster_obj["metadata"]["name"]).inc()
                drained.append(node)
                reached(Step.SLURMD_DRAINED)
            except SlurmError as err:
                log.warning("drain failed node=%s error=%s", node, err)
        if drained:
            message = aggregate("draining", "nodes before their slurmd pods go", drained)
            kube.event(cluster_obj, "Draining", message)
        deletes += drained_idle(slurm, plan.delete_once_drained)
        assert snap.observed.slurm_nodes is not None
        for node in undrain_candidates(plan.desired, snap.observed.slurm_nodes):
            if node in plan.drain or node in plan.rolling:
                continue
            undrain = functools.partial(resume_if_ours, slurm, node)
            if handovers.back(kube, cluster_obj, node, undrain):
                reached(Step.SLURMD_UNDRAINED)
        apply_scaling(kube, snap, plan)
        user = deployment_context(snap.observed.bundle.cluster).slurm_user
        apply_maintenance(kube, cluster_obj, slurm, plan, user)
    for name in deletes:
        kube.delete("v1", "Pod", name, namespace)
        metrics.SLURMD_PODS_DELETED.labels(namespace, cluster_obj["metadata"]["name"]).inc()
        reached(Step.SLURMD_POD_DELETED)
    if deletes:
        message = aggregate("deleted", "slurmd pods (nodes drained, idle)", deletes)
        kube.event(cluster_obj, "SlurmdRemoved", message)
    conditions.append(_apply_kueue(kube, plan))
    config_applied = confirm_config(kube, snap, plan, config)
    conditions += [*config_applied, topology_applied(config_applied[0], plan.topology_summary)]
    conditions.append(
        Condition(
            "SlurmReachable",
            slurm_ok,
            "Reachable" if slurm_ok else "Unreachable",
            "slurmrestd answered" if slurm_ok else snap.slurm_error,
        )
    )
    return conditions


def down_lost_nodes(kube: Kube, snap: Snapshot, plan: Plan) -> set[str]:
    """Set DOWN the nodes whose lost slurmd pod ran a job (plan/lost_pods.py), before
    their pod is made again; returns those whose pod must wait (Slurm refused)."""
    namespace = snap.cluster_obj["metadata"]["namespace"]
    pods = {p["metadata"]["labels"][wk.LABEL_NODE]: p["metadata"]["name"] for p in plan.create_pods}
    downed, waiting = [], set()
    for node in plan.down_lost:
        # Read now, not from the cache: a pod still there may still run the job.
        if kube.get("v1", "Pod", pods[node], namespace) is not None:
            continue
        assert snap.slurm is not None  # down_lost comes from Slurm's answer
        try:
            down(snap.slurm, node, LOST_REASON)
            downed.append(node)
        except SlurmError as err:
            log.warning("set down failed node=%s error=%s", node, err)
            waiting.add(node)
    if downed:
        message = aggregate("set DOWN", "nodes whose slurmd pod was lost under a job", downed)
        kube.event(snap.cluster_obj, "SlurmdLost", message, warning=True)
    return waiting


def drained_idle(slurm: SlurmClient, pods: Mapping[str, str]) -> list[str]:
    """The pods of `pods` (node -> pod) whose node Slurm now shows drained with no job.

    Asked after the drain, not taken from the observation before it: once the
    DRAIN flag is set slurmctld starts nothing there, so "drained and not busy"
    read now means no job can still be there (the same test the plan applies
    at the next reconcile, one reconcile earlier). No answer: nothing goes.
    Over REST the kept list answers when slurmctld changed no node since it was
    read (a 304): while pods wait for their jobs, each reconcile asks that
    instead of reading the whole fleet again.
    """
    if not pods:
        return []
    try:
        listed = slurm.current_nodes().nodes if isinstance(slurm, RestClient) else None
        nodes = {n.name: n for n in (slurm.list_nodes() if listed is None else listed)}
    except SlurmError as err:
        log.warning("drain check failed error=%s", err)
        return []
    return [pod for node, pod in sorted(pods.items()) if node in nodes and nodes[node].drained]


def _apply_kueue(kube: Kube, plan: Plan) -> Condition:
    """The same topology for Kueue's TAS; skipped (and said) where Kueue is not installed."""
    try:
        for obj in plan.kueue_objects:
            kube.apply(obj)
    except ResourceNotFoundError:
        return Condition(
            "KueueTopologyApplied",
            False,
            "KueueNotInstalled",
            "kueue.x-k8s.io/v1beta2 Topology/ResourceFlavor not served",
        )
    flavors = len(plan.kueue_objects) - 1
    return Condition(
        "KueueTopologyApplied",
        True,
        "Applied",
        f"Topology {plan.kueue_objects[0]['metadata']['name']}, {flavors} flavors",
    )


def _annotate_controllers(kube: Kube, snap: Snapshot, annotation: str, wanted: str) -> None:
    """Annotate the slurmctld pods with a hash: the kubelet then syncs their
    volumes now, not at its next periodic sync (build/reloader.py)."""
    cluster = snap.observed.bundle.cluster
    namespace = snap.cluster_obj["metadata"]["namespace"]
    controller = names_of(cluster).controller
    # A pod not made yet mounts the new files when it is.
    kube.annotate_pod(namespace, f"{controller}-0", annotation, wanted)


def patch_busy_labels(kube: Kube, namespace: str, labels: Mapping[str, bool]) -> None:
    """Each named slurmd pod's slurmkube.io/busy label, as Slurm shows its node."""
    for pod_name, busy in sorted(labels.items()):
        kube.merge_patch_pod(namespace, pod_name, busy_label_patch(busy))


def apply_object(kube: Kube, obj: Manifest, owner: Manifest) -> None:
    """Server-side apply; a Service whose clusterIP must change (slurmdbd's became
    headless) is deleted and made again, as the API server keeps clusterIP fixed."""
    try:
        kube.apply(obj, owner=owner)
    except UnprocessibleEntityError as err:
        if obj["kind"] != "Service" or "clusterIP" not in str(err):
            raise
        meta = obj["metadata"]
        log.info("service replaced name=%s/%s (clusterIP changed)", meta["namespace"], meta["name"])
        kube.delete("v1", "Service", meta["name"], meta["namespace"])
        kube.apply(obj, owner=owner)
