"""slurmd: one pod per node of a NodeSet, and how they are selected (pure)."""

from __future__ import annotations

import hashlib
import json

from slurmkube.api import well_known as wk
from slurmkube.api.models import NodeSet, SlurmCluster
from slurmkube.build.names import Manifest, meta, names_of, pod_hostname
from slurmkube.build.pod import SLURM_KEY, daemon_container, slurm_etc


def slurmd_pod(
    cluster: SlurmCluster, node_set: NodeSet, node: str, gpus: int, config_hash: str
) -> Manifest:
    """One slurmd on one Kubernetes node, holding all its GPUs (Slurm owns the node)."""
    names = names_of(cluster)
    container = daemon_container(
        cluster,
        "slurmd",
        [
            "slurmd",
            "-D",
            "-N",
            node,
            "--conf-server",
            f"{names.controller_fqdn}:{wk.SLURMCTLD_PORT}",
            # A resumed node must look booted after slurmctld asked for it, or
            # its registration is ignored ("Still waiting for boot", node_mgr.c
            # waiting_for_node_boot): a pod reports the host's uptime, so slurmd
            # -b reports its own start as the boot time instead.
            *(["-b"] if node_set.spec.autoscaling.enabled else []),
        ],
        [("slurmd", wk.SLURMD_PORT)],
    )
    if gpus:
        container["resources"] = {
            "requests": {wk.RESOURCE_GPU: str(gpus)},
            "limits": {wk.RESOURCE_GPU: str(gpus)},
        }
    # Configless slurmd fetches slurm.conf itself; it needs only the key, and
    # SLURM_SACK_KEY makes it use auth/slurm before it has any config.
    container["env"] = [{"name": "SLURM_SACK_KEY", "value": f"{wk.CONFIG_DIR}/slurm.key"}]
    container["volumeMounts"] = [
        {"name": "slurm-etc", "mountPath": wk.CONFIG_DIR, "readOnly": True}
    ]
    etc = slurm_etc(cluster, keys=[SLURM_KEY], config=False)
    metadata = meta(
        cluster,
        names.slurmd_pod(node_set.metadata.name, node),
        "slurmd",
        **{wk.LABEL_NODESET: node_set.metadata.name, wk.LABEL_NODE: node},
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
        "tolerations": [
            t.model_dump(by_alias=True, exclude_none=True) for t in node_set.spec.tolerations
        ],
        "containers": [container],
        "volumes": [etc],
        "restartPolicy": "Always",
        # slurmd is only ever stopped on an idle, drained node.
        "terminationGracePeriodSeconds": 30,
    }
    # The config hash is not part of the template: configless slurmd takes a new
    # config through `scontrol reconfigure`, never through a pod replacement.
    metadata["annotations"] = {
        wk.ANNOTATION_CONFIG_HASH: config_hash,
        wk.ANNOTATION_POD_TEMPLATE_HASH: pod_template_hash(spec),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def pod_template_hash(spec: Manifest) -> str:
    """A short, stable digest of a pod spec (key order does not matter)."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def slurmd_selector(cluster: SlurmCluster, node_set: str) -> str:
    """The label selector of a NodeSet's slurmd pods (NodeSet status.selector, /scale)."""
    return f"{wk.LABEL_CLUSTER}={cluster.metadata.name},{wk.LABEL_NODESET}={node_set}"
