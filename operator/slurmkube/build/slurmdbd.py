"""slurmdbd: its config Secret, Deployment and Service (pure)."""

from __future__ import annotations

import base64

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import SLURM_GID, Manifest, labels, meta, names_of
from slurmkube.build.pod import SACK_ENV, cluster_service, daemon_container, placement, slurm_etc

# Where the slurmdbd pod keeps slurmdbd.conf: the Secret's copy is root's (or
# fsGroup's) and slurmdbd wants SlurmUser as owner with mode 0600, so an init
# container running as SlurmUser copies it into an emptyDir.
SLURMDBD_CONF_DIR = "/etc/slurmdbd"
_SLURMDBD_SECRET_DIR = "/etc/slurmdbd-secret"


def slurmdbd_secret(cluster: SlurmCluster, slurmdbd_conf: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(cluster, names_of(cluster).slurmdbd_config, "slurmdbd"),
        "type": "Opaque",
        "data": {"slurmdbd.conf": base64.b64encode(slurmdbd_conf.encode()).decode()},
    }


def slurmdbd_deployment(
    cluster: SlurmCluster, conf_hash: str, image: str | None = None
) -> Manifest:
    """One slurmdbd (Recreate: two would both write to the database)."""
    names = names_of(cluster)
    image = image or cluster.spec.image
    container = daemon_container(
        cluster,
        "slurmdbd",
        ["slurmdbd", "-D"],
        [("slurmdbd", wk.SLURMDBD_PORT)],
        resources=cluster.spec.accounting.resources,
        image=image,
    )
    # slurmdbd.conf is found next to SLURM_CONF (a path that need not exist);
    # the key comes from the shared volume.
    container["env"] = [
        {"name": "SLURM_CONF", "value": f"{SLURMDBD_CONF_DIR}/slurm.conf"},
        *SACK_ENV,
    ]
    container["volumeMounts"] += [
        {"name": "slurmdbd-conf", "mountPath": SLURMDBD_CONF_DIR},
        # slurmdbd, as SlurmUser, wants /run/slurmdbd for its pid file and sack
        # socket and cannot create it in a root-owned /run.
        {"name": "run-slurmdbd", "mountPath": "/run/slurmdbd"},
    ]
    copy = {
        "name": "slurmdbd-conf",
        "image": image,
        "command": [
            "install",
            "-m",
            "0600",
            f"{_SLURMDBD_SECRET_DIR}/slurmdbd.conf",
            f"{SLURMDBD_CONF_DIR}/slurmdbd.conf",
        ],
        "securityContext": {"runAsUser": SLURM_GID, "runAsGroup": SLURM_GID},
        "volumeMounts": [
            {"name": "slurmdbd-secret", "mountPath": _SLURMDBD_SECRET_DIR, "readOnly": True},
            {"name": "slurmdbd-conf", "mountPath": SLURMDBD_CONF_DIR},
        ],
    }
    # Both keys: auth/slurm, and slurmdbd verifies the JWTs slurmrestd forwards.
    etc = slurm_etc(cluster, config=False)
    labels_ = labels(cluster, "slurmdbd")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(cluster, names.slurmdbd, "slurmdbd"),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels_},
            "template": {
                # A changed slurmdbd.conf (a new password) restarts slurmdbd.
                "metadata": {
                    "labels": labels_,
                    "annotations": {"slurmkube.io/slurmdbd-config-hash": conf_hash},
                },
                "spec": {
                    "initContainers": [copy],
                    "containers": [container],
                    "volumes": [
                        etc,
                        {
                            "name": "slurmdbd-secret",
                            "secret": {
                                "secretName": names.slurmdbd_config,
                                "defaultMode": 0o440,
                            },
                        },
                        {"name": "slurmdbd-conf", "emptyDir": {}},
                        {"name": "run-slurmdbd", "emptyDir": {"medium": "Memory"}},
                    ],
                    "securityContext": {"fsGroup": SLURM_GID},
                    **placement(cluster),
                },
            },
        },
    }


def slurmdbd_service(cluster: SlurmCluster) -> Manifest:
    """Headless. slurmdbd records the address slurmctld's connection comes from as
    the cluster's ControlHost and pushes association and QOS changes there. Through
    a ClusterIP, a proxy that masquerades Service traffic makes that the node's
    address, and no change (a GrpTRES the policy lowers) ever reaches slurmctld.
    Straight to the pod, it is slurmctld's own."""
    service = cluster_service(
        cluster, names_of(cluster).slurmdbd, "slurmdbd", ("slurmdbd", wk.SLURMDBD_PORT)
    )
    service["spec"] = {**service["spec"], "clusterIP": "None", "publishNotReadyAddresses": True}
    return service
