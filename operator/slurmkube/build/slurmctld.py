"""slurmctld: its config, headless Service, metrics Service and StatefulSet (pure)."""

from __future__ import annotations

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.api.slurm_version import SlurmVersion
from slurmkube.build.names import SLURM_GID, Manifest, labels, meta, names_of
from slurmkube.build.pod import daemon_container, placement, slurm_etc
from slurmkube.build.reloader import reloader_container, reloader_volume
from slurmkube.render.files import RenderedConfig


def config_map(
    cluster: SlurmCluster, rendered: RenderedConfig, slurm_version: SlurmVersion
) -> Manifest:
    """`slurm_version`: the release the files are for (the oldest a slurmd runs)."""
    metadata = meta(cluster, names_of(cluster).config, "slurm-config")
    metadata["annotations"] = {
        wk.ANNOTATION_CONFIG_HASH: rendered.hash,
        wk.ANNOTATION_SLURM_RELEASE: str(slurm_version),
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {**dict(sorted(rendered.files.items())), "config-hash": rendered.hash},
    }


def controller_service(cluster: SlurmCluster) -> Manifest:
    names = names_of(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(cluster, names.controller, "slurmctld"),
        "spec": {
            # Headless: slurmd and clients reach each slurmctld pod by name.
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": labels(cluster, "slurmctld"),
            "ports": [{"name": "slurmctld", "port": wk.SLURMCTLD_PORT}],
        },
    }


def metrics_service(cluster: SlurmCluster) -> Manifest:
    """Slurm 25.11+ with `MetricsType=metrics/openmetrics` answers `GET /metrics/...`
    on slurmctld's own port (slurm.conf(5) MetricsType). A Service of its own,
    labelled `slurmctld-metrics`, so a ServiceMonitor (the chart's
    `slurmMetrics.serviceMonitor`) finds only clusters whose release serves it."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(cluster, names_of(cluster).controller_metrics, METRICS_COMPONENT),
        "spec": {
            "selector": labels(cluster, "slurmctld"),
            "ports": [{"name": "metrics", "port": wk.SLURMCTLD_PORT, "targetPort": "slurmctld"}],
        },
    }


SACK_VOLUME = "sack"
SACK_DIR = "/run/slurmctld"

# app.kubernetes.io/name of the metrics Service, which the chart's ServiceMonitor selects.
METRICS_COMPONENT = "slurmctld-metrics"


def state_owner(cluster: SlurmCluster, image: str) -> Manifest:
    """Hands the state volume to SlurmUser before slurmctld starts.

    fsGroup reaches only volumes whose plugin manages ownership: hostPath and
    local PersistentVolumes (the usual storage of a bare-metal lab) stay
    root's 0750, and slurmctld refuses a StateSaveLocation it cannot write.
    Root with CHOWN (and DAC_READ_SEARCH to walk a tree another owner left)
    and nothing else; a volume that is already slurm's is left untouched."""
    owner = f"{SLURM_GID}:{SLURM_GID}"
    return {
        "name": "state-owner",
        "image": image,
        "command": [
            "/bin/sh",
            "-c",
            f'[ "$(stat -c %u:%g "$0")" = {owner} ] || chown -R {owner} "$0"',
            wk.STATE_DIR,
        ],
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_READ_SEARCH"]},
        },
        "volumeMounts": [{"name": names_of(cluster).state, "mountPath": wk.STATE_DIR}],
    }


def controller_statefulset(cluster: SlurmCluster, image: str | None = None) -> Manifest:
    names = names_of(cluster)
    spec = cluster.spec.controller
    image = image or cluster.spec.image
    # -D: stay in the foreground whether or not the image's entrypoint adds it.
    container = daemon_container(
        cluster,
        "slurmctld",
        ["slurmctld", "-D"],
        [("slurmctld", wk.SLURMCTLD_PORT)],
        resources=spec.resources,
        image=image,
    )
    container["volumeMounts"].append({"name": names.state, "mountPath": wk.STATE_DIR})
    # Clients of auth/slurm (the reloader's scontrol) always ask slurmctld's sack
    # socket for a token, and it lives in its container's /run: shared here.
    sack = {"name": SACK_VOLUME, "mountPath": SACK_DIR}
    container["volumeMounts"].append(sack)
    reloader = reloader_container(image)
    reloader["volumeMounts"].append(sack)
    volumes = [
        slurm_etc(cluster),
        reloader_volume(),
        {"name": SACK_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
    claims: list[Manifest] = []
    if not spec.persistence.enabled:
        volumes.append({"name": names.state, "emptyDir": {}})
    claim: Manifest = {
        "metadata": {"name": names.state},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": spec.persistence.size}},
        },
    }
    if spec.persistence.storage_class_name:
        claim["spec"]["storageClassName"] = spec.persistence.storage_class_name
    init: list[Manifest] = []
    if spec.persistence.enabled:
        claims.append(claim)
        init.append(state_owner(cluster, image))
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(cluster, names.controller, "slurmctld"),
        "spec": {
            "serviceName": names.controller,
            "replicas": 1,
            "selector": {"matchLabels": labels(cluster, "slurmctld")},
            "template": {
                "metadata": {"labels": labels(cluster, "slurmctld")},
                "spec": {
                    **({"initContainers": init} if init else {}),
                    "containers": [container, reloader],
                    "volumes": volumes,
                    "terminationGracePeriodSeconds": 60,
                    **placement(cluster),
                    # slurmctld runs as SlurmUser slurm (uid/gid 401 in the image).
                    "securityContext": {"fsGroup": SLURM_GID},
                },
            },
            "volumeClaimTemplates": claims,
        },
    }
