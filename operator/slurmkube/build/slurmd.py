"""slurmd: one pod per node of a NodeSet, and how they are selected (pure)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from slurmkube.api import well_known as wk
from slurmkube.api.models import NodeSet, SlurmCluster
from slurmkube.build.names import Manifest, meta, names_of, pod_hostname
from slurmkube.build.pod import SACK_ENV, SLURM_KEY, daemon_container, slurm_etc


@dataclass(frozen=True, slots=True)
class SlurmdResources:
    """What slurm.conf gives Slurm on the node (its NodeName line): the pod asks for
    exactly that, so the kubelet never evicts it for pressure Slurm was promised."""

    cpus: int = 0
    memory_mib: int = 0
    gpus: int = 0


def slurmd_pod(
    cluster: SlurmCluster,
    node_set: NodeSet,
    node: str,
    resources: SlurmdResources | int,
    config_hash: str,
    *,
    busy: bool = False,
    image: str | None = None,
) -> Manifest:
    """One slurmd on one Kubernetes node, holding all its GPUs (Slurm owns the node).

    `resources`: the node's line in slurm.conf (an int: GPUs only, no CPU or
    memory asked). Guaranteed QoS: CPU and memory requests equal limits at the
    pod level (PodLevelResources, on by default since Kubernetes 1.34), so the
    container's limits stay the GPUs alone."""
    if isinstance(resources, int):
        resources = SlurmdResources(gpus=resources)
    gpus = resources.gpus
    names = names_of(cluster)
    conf_server = (names.controller_fqdn, wk.SLURMCTLD_PORT)
    container = daemon_container(
        cluster,
        "slurmd",
        [
            "slurmd",
            "-D",
            "-N",
            node,
            "--conf-server",
            f"{conf_server[0]}:{conf_server[1]}",
            # A resumed node must look booted after slurmctld asked for it, or
            # its registration is ignored ("Still waiting for boot", node_mgr.c
            # waiting_for_node_boot): a pod reports the host's uptime, so slurmd
            # -b reports its own start as the boot time instead.
            *(["-b"] if node_set.spec.autoscaling.enabled else []),
        ],
        [("slurmd", wk.SLURMD_PORT)],
        image=image,
    )
    if gpus:
        container["resources"] = {
            "requests": {wk.RESOURCE_GPU: str(gpus)},
            "limits": {wk.RESOURCE_GPU: str(gpus)},
        }
    # Configless slurmd fetches slurm.conf itself; it needs only the key, and
    # SLURM_SACK_KEY makes it use auth/slurm before it has any config.
    container["env"] = list(SACK_ENV)
    container["volumeMounts"] = [
        {"name": "slurm-etc", "mountPath": wk.CONFIG_DIR, "readOnly": True}
    ]
    # Root, not the image's USER (401): slurmd becomes each job's user and its
    # entrypoint refuses any other uid (images/slurm/entrypoint.sh, docs/install.md).
    container["securityContext"] = {"runAsUser": 0, "runAsGroup": 0}
    if cluster.spec.slurmd.cgroups:
        # Confining jobs means creating cgroups (proctrack, task and job
        # containment), and a container's /sys/fs/cgroup is read-only unless it
        # is privileged; Slinky's and soperator's slurmd pods run so too.
        container["securityContext"]["privileged"] = True
    etc = slurm_etc(cluster, keys=[SLURM_KEY], config=False)
    metadata = meta(
        cluster,
        names.slurmd_pod(node_set.metadata.name, node),
        "slurmd",
        **{
            wk.LABEL_NODESET: node_set.metadata.name,
            wk.LABEL_NODE: node,
            wk.LABEL_BUSY: busy_label(busy),
        },
    )
    spec: Manifest = {
        # Pinned the way DaemonSet pods are: by affinity, so the scheduler
        # still checks resources and taints.
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        },
        "hostname": pod_hostname(node),
        # Health's own taint keeps Kueue and kube-scheduler off a sick node, not
        # slurmd: Slurm's drain keeps jobs off, and the active check needs slurmd
        # there (a sick node's slurmd pod comes back once a lease on it ends).
        "tolerations": [
            *(t.model_dump(by_alias=True, exclude_none=True) for t in node_set.spec.tolerations),
            {"key": wk.TAINT_UNHEALTHY, "operator": "Exists", "effect": "NoSchedule"},
        ],
        "initContainers": [conf_server_wait(*conf_server, image=image or cluster.spec.image)],
        "containers": [container],
        "volumes": [etc],
        "restartPolicy": "Always",
        "priorityClassName": wk.SLURMD_PRIORITY_CLASS,
    }
    if resources.cpus and resources.memory_mib:
        guaranteed = {"cpu": str(resources.cpus), "memory": f"{resources.memory_mib}Mi"}
        spec["resources"] = {"requests": guaranteed, "limits": dict(guaranteed)}
    # The config hash is not part of the template: configless slurmd takes a new
    # config through `scontrol reconfigure`, never through a pod replacement.
    metadata["annotations"] = {
        wk.ANNOTATION_CONFIG_HASH: config_hash,
        wk.ANNOTATION_POD_TEMPLATE_HASH: pod_template_hash(spec),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


# How long a slurmd pod waits for slurmctld before starting slurmd anyway (which
# then retries its config fetch by itself, every 10 s).
CONF_SERVER_WAIT_SECONDS = 120

# $1 host, $2 port: until a TCP connect succeeds (the name resolves and slurmctld
# listens), each try bounded, since a SYN to an address not yet up is not refused.
_WAIT_SCRIPT = (
    'until timeout 2 bash -c \'exec 3<>"/dev/tcp/$0/$1"\' "$1" "$2" 2>/dev/null; do'
    f" ((SECONDS < {CONF_SERVER_WAIT_SECONDS})) || exit 0; sleep 0.2; done"
)


def conf_server_wait(host: str, port: int, *, image: str) -> Manifest:
    """An init container that returns once slurmctld answers on `host:port`.

    Configless slurmd that cannot fetch its config (slurmctld's name not yet in
    DNS, or nothing listening yet) retries only after 10 s
    (`_establish_configuration`), so pods made with the cluster would start ten
    seconds late. The headless Service publishes slurmctld's address before it
    is ready (build/slurmctld.py), so the wait ends when slurmctld listens.
    `command`, not the image's entrypoint: it only dials, as the image's user."""
    return {
        "name": "wait-for-slurmctld",
        "image": image,
        "command": ["bash", "-c", _WAIT_SCRIPT, "wait-for-slurmctld", host, str(port)],
    }


def busy_label(busy: bool) -> str:
    return "true" if busy else "false"


# The chart's default (values.yaml slurmdPriorityClass.value).
SLURMD_PRIORITY = 1_000_000_000


def slurmd_priority_class() -> Manifest:
    """The PriorityClass slurmd pods name, as the chart ships it by default
    (templates/priorityclass.yaml): for clusters the chart did not install
    (the e2e suite's host-run operator)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": wk.SLURMD_PRIORITY_CLASS},
        "value": SLURMD_PRIORITY,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "slurmd pods of slurmkube: a running Slurm job lives in them.",
    }


def busy_label_patch(busy: bool) -> Manifest:
    """A merge patch of a slurmd pod's busy label (`Plan.busy_labels`). Not a
    server-side apply: the pod was applied whole by the same field manager, and a
    labels-only apply would give up (and so remove) the rest."""
    return {"metadata": {"labels": {wk.LABEL_BUSY: busy_label(busy)}}}


def slurmd_disruption_budget(cluster: SlurmCluster, node_set: NodeSet) -> Manifest:
    """Evictions of a NodeSet's busy slurmd pods are refused (`kubectl drain`,
    cluster-autoscaler and Karpenter consolidation use the eviction API).

    It selects only pods labelled busy (the plan sets `slurmkube.io/busy` from
    Slurm's state, `Plan.busy_labels`), with maxUnavailable 0: an idle pod is
    selected by no budget, so draining an idle node is not blocked, and a busy
    pod is never evicted whatever the other pods do (minAvailable over all pods
    would instead let the eviction of a busy pod through while others are up)."""
    name = names_of(cluster).slurmd_busy_budget(node_set.metadata.name)
    selector = {
        wk.LABEL_CLUSTER: cluster.metadata.name,
        wk.LABEL_NODESET: node_set.metadata.name,
        wk.LABEL_BUSY: busy_label(True),
    }
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta(cluster, name, "slurmd", **{wk.LABEL_NODESET: node_set.metadata.name}),
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": selector},
            # Unhealthy busy pods are guarded too: slurmd may be restarting under a job.
            "unhealthyPodEvictionPolicy": "IfHealthyBudget",
        },
    }


def pod_template_hash(spec: Manifest) -> str:
    """A short, stable digest of a pod spec (key order does not matter)."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def slurmd_selector(cluster: SlurmCluster, node_set: str) -> str:
    """The label selector of a NodeSet's slurmd pods (NodeSet status.selector, /scale)."""
    return f"{wk.LABEL_CLUSTER}={cluster.metadata.name},{wk.LABEL_NODESET}={node_set}"
