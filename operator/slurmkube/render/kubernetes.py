"""Desired Kubernetes objects of a Slurm cluster, as plain manifests (pure).

The controller applies these with server-side apply and adds owner references;
it never edits them. Names are deterministic (controller-runtime FAQ): the
same cluster always yields the same object names, so a crash between two
applies is finished by the next reconcile rather than duplicated.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.api.models import NodeSet, SlurmCluster
from slurmkube.render.context import RenderContext
from slurmkube.render.files import RenderedConfig
from slurmkube.render.reloader import reloader_container, reloader_volume

Manifest = dict[str, Any]

# Users of the slurm image (images/slurm/Dockerfile).
SLURM_GID = 401
RESTD_UID = 402

# Kubernetes object names and hostnames are DNS labels.
_MAX_LABEL = 63


def _short(name: str) -> str:
    """A DNS label from a longer name: a readable prefix plus a hash, deterministic."""
    if len(name) <= _MAX_LABEL:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: _MAX_LABEL - 9].rstrip('-')}-{digest}"


@dataclass(frozen=True, slots=True)
class ClusterNames:
    """Every name derived from a SlurmCluster, in one place."""

    cluster: str
    namespace: str

    @property
    def controller(self) -> str:
        return _short(f"{self.cluster}-slurmctld")

    @property
    def controller_pod(self) -> str:
        return f"{self.controller}-0"

    @property
    def controller_fqdn(self) -> str:
        # The StatefulSet pod's DNS name through its headless Service.
        return f"{self.controller_pod}.{self.controller}.{self.namespace}.svc.cluster.local"

    @property
    def restapi(self) -> str:
        return _short(f"{self.cluster}-slurmrestd")

    @property
    def login(self) -> str:
        return _short(f"{self.cluster}-login")

    @property
    def slurmdbd(self) -> str:
        return _short(f"{self.cluster}-slurmdbd")

    @property
    def slurmdbd_fqdn(self) -> str:
        return f"{self.slurmdbd}.{self.namespace}.svc.cluster.local"

    @property
    def slurmdbd_config(self) -> str:
        return _short(f"{self.cluster}-slurmdbd-config")

    @property
    def config(self) -> str:
        return _short(f"{self.cluster}-slurm-config")

    @property
    def auth(self) -> str:
        return _short(f"{self.cluster}-auth")

    @property
    def state(self) -> str:
        return "state"

    def slurmd_pod(self, node_set: str, node: str) -> str:
        return _short(f"{node_set}-{node}")


def names_of(cluster: SlurmCluster) -> ClusterNames:
    return ClusterNames(cluster.metadata.name, cluster.metadata.namespace or "default")


def deployment_context(cluster: SlurmCluster) -> RenderContext:
    """Paths and hosts of the daemons in slurmkube's pods."""
    names = names_of(cluster)
    slurmd = cluster.spec.slurmd
    return RenderContext(
        cgroups=slurmd.cgroups,
        config_overrides=slurmd.config_overrides,
        controller_host=names.controller_pod,
        controller_addr=names.controller_fqdn,
        config_dir=wk.CONFIG_DIR,
        state_save_location=wk.STATE_DIR,
        slurmd_spool_dir="/var/spool/slurmd",
        log_dir="/var/log/slurm",
        run_dir="/run/slurm",
        slurm_user="slurm",
        gpu_device_dir="/dev",
        accounting_host=names.slurmdbd_fqdn if cluster.spec.accounting.enabled else None,
    )


def labels(cluster: SlurmCluster, component: str, **extra: str) -> dict[str, str]:
    return {
        wk.LABEL_NAME: component,
        wk.LABEL_INSTANCE: cluster.metadata.name,
        wk.LABEL_MANAGED_BY: "slurmkube",
        wk.LABEL_CLUSTER: cluster.metadata.name,
        **extra,
    }


def _meta(cluster: SlurmCluster, name: str, component: str, **extra: str) -> Manifest:
    return {
        "name": name,
        "namespace": cluster.metadata.namespace,
        "labels": labels(cluster, component, **extra),
    }


def config_map(cluster: SlurmCluster, rendered: RenderedConfig) -> Manifest:
    meta = _meta(cluster, names_of(cluster).config, "slurm-config")
    meta["annotations"] = {wk.ANNOTATION_CONFIG_HASH: rendered.hash}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {**dict(sorted(rendered.files.items())), "config-hash": rendered.hash},
    }


def auth_secret(cluster: SlurmCluster, slurm_key_b64: str, jwt_key_b64: str) -> Manifest:
    """Keys are generated once by the controller and then only ever read back."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(cluster, names_of(cluster).auth, "slurm-auth"),
        "type": "Opaque",
        "data": {"slurm.key": slurm_key_b64, "jwt.key": jwt_key_b64},
    }


def _slurm_etc(cluster: SlurmCluster) -> Manifest:
    """/etc/slurm: the rendered files and the keys, in one projected volume."""
    names = names_of(cluster)
    slurm_secret = cluster.spec.auth.slurm_key_secret or names.auth
    jwt_secret = cluster.spec.auth.jwt_key_secret or names.auth
    return {
        "name": "slurm-etc",
        "projected": {
            # Group-readable for the slurm group (fsGroup); Slurm refuses
            # key files that others can read.
            "defaultMode": 0o440,
            "sources": [
                {"configMap": {"name": names.config}},
                {
                    "secret": {
                        "name": slurm_secret,
                        "items": [{"key": "slurm.key", "path": "slurm.key"}],
                    }
                },
                {"secret": {"name": jwt_secret, "items": [{"key": "jwt.key", "path": "jwt.key"}]}},
            ],
        },
    }


def _container(
    cluster: SlurmCluster, name: str, args: Sequence[str], ports: Sequence[tuple[str, int]]
) -> Manifest:
    return {
        "name": name,
        "image": cluster.spec.image,
        "args": list(args),
        "ports": [{"name": p, "containerPort": n, "protocol": "TCP"} for p, n in ports],
        "volumeMounts": [{"name": "slurm-etc", "mountPath": wk.CONFIG_DIR, "readOnly": True}],
        # Explicit, so a Slurm build with another sysconfdir reads the same file.
        "env": [{"name": "SLURM_CONF", "value": f"{wk.CONFIG_DIR}/slurm.conf"}],
        "readinessProbe": {"tcpSocket": {"port": ports[0][1]}, "periodSeconds": 5}
        if ports
        else None,
    }


def _placement(cluster: SlurmCluster) -> Manifest:
    controller = cluster.spec.controller
    return {
        "nodeSelector": dict(controller.node_selector),
        "tolerations": [
            t.model_dump(by_alias=True, exclude_none=True) for t in controller.tolerations
        ],
    }


def controller_service(cluster: SlurmCluster) -> Manifest:
    names = names_of(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cluster, names.controller, "slurmctld"),
        "spec": {
            # Headless: slurmd and clients reach each slurmctld pod by name.
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": labels(cluster, "slurmctld"),
            "ports": [{"name": "slurmctld", "port": wk.SLURMCTLD_PORT}],
        },
    }


def controller_statefulset(cluster: SlurmCluster) -> Manifest:
    names = names_of(cluster)
    spec = cluster.spec.controller
    # -D: stay in the foreground whether or not the image's entrypoint adds it.
    container = _container(
        cluster, "slurmctld", ["slurmctld", "-D"], [("slurmctld", wk.SLURMCTLD_PORT)]
    )
    container["volumeMounts"].append({"name": names.state, "mountPath": wk.STATE_DIR})
    volumes = [_slurm_etc(cluster), reloader_volume()]
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
    if spec.persistence.enabled:
        claims.append(claim)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(cluster, names.controller, "slurmctld"),
        "spec": {
            "serviceName": names.controller,
            "replicas": 2 if spec.backup else 1,
            "selector": {"matchLabels": labels(cluster, "slurmctld")},
            "template": {
                "metadata": {"labels": labels(cluster, "slurmctld")},
                "spec": {
                    "containers": [container, reloader_container(cluster.spec.image)],
                    "volumes": volumes,
                    "terminationGracePeriodSeconds": 60,
                    **_placement(cluster),
                    # slurmctld runs as SlurmUser slurm (uid/gid 401 in the image).
                    "securityContext": {"fsGroup": SLURM_GID},
                },
            },
            "volumeClaimTemplates": claims,
        },
    }


def restapi_deployment(cluster: SlurmCluster) -> Manifest:
    names = names_of(cluster)
    # Only the openapi plugins whose daemons exist: the default set needs slurmdbd
    # and slurmrestd exits without it. JWT only: pods share no UNIX socket.
    plugins = "openapi/slurmctld" + (",openapi/slurmdbd" if cluster.spec.accounting.enabled else "")
    args = ["slurmrestd", "-a", "rest_auth/jwt", "-s", plugins, f"0.0.0.0:{wk.SLURMRESTD_PORT}"]
    container = _container(cluster, "slurmrestd", args, [("slurmrestd", wk.SLURMRESTD_PORT)])
    # slurmrestd refuses to run as root or as SlurmUser: its own user (402).
    container["securityContext"] = {"runAsUser": RESTD_UID, "runAsGroup": RESTD_UID}
    # auth/jwt as its primary plugin, so each client's token is what slurmctld sees.
    container["env"].append({"name": "SLURM_JWT", "value": "daemon"})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cluster, names.restapi, "slurmrestd"),
        "spec": {
            "replicas": cluster.spec.rest_api.replicas,
            "selector": {"matchLabels": labels(cluster, "slurmrestd")},
            "template": {
                "metadata": {"labels": labels(cluster, "slurmrestd")},
                "spec": {
                    "containers": [container],
                    "volumes": [_slurm_etc(cluster)],
                    "securityContext": {"fsGroup": RESTD_UID},
                    **_placement(cluster),
                },
            },
        },
    }


def _service(cluster: SlurmCluster, name: str, component: str, port: tuple[str, int]) -> Manifest:
    """A ClusterIP Service in front of one component's pods."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cluster, name, component),
        "spec": {
            "selector": labels(cluster, component),
            "ports": [{"name": port[0], "port": port[1]}],
        },
    }


def restapi_service(cluster: SlurmCluster) -> Manifest:
    return _service(cluster, names_of(cluster).restapi, "slurmrestd", ("http", wk.SLURMRESTD_PORT))


# Where the slurmdbd pod keeps slurmdbd.conf: the Secret's copy is root's (or
# fsGroup's) and slurmdbd wants SlurmUser as owner with mode 0600, so an init
# container running as SlurmUser copies it into an emptyDir.
SLURMDBD_CONF_DIR = "/etc/slurmdbd"
_SLURMDBD_SECRET_DIR = "/etc/slurmdbd-secret"


def slurmdbd_secret(cluster: SlurmCluster, slurmdbd_conf: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(cluster, names_of(cluster).slurmdbd_config, "slurmdbd"),
        "type": "Opaque",
        "data": {"slurmdbd.conf": base64.b64encode(slurmdbd_conf.encode()).decode()},
    }


def slurmdbd_deployment(cluster: SlurmCluster, conf_hash: str) -> Manifest:
    """One slurmdbd (Recreate: two would both write to the database)."""
    names = names_of(cluster)
    container = _container(
        cluster, "slurmdbd", ["slurmdbd", "-D"], [("slurmdbd", wk.SLURMDBD_PORT)]
    )
    # slurmdbd.conf is found next to SLURM_CONF (a path that need not exist);
    # the key comes from the shared volume.
    container["env"] = [
        {"name": "SLURM_CONF", "value": f"{SLURMDBD_CONF_DIR}/slurm.conf"},
        {"name": "SLURM_SACK_KEY", "value": f"{wk.CONFIG_DIR}/slurm.key"},
    ]
    container["volumeMounts"] += [
        {"name": "slurmdbd-conf", "mountPath": SLURMDBD_CONF_DIR},
        # slurmdbd, as SlurmUser, wants /run/slurmdbd for its pid file and sack
        # socket and cannot create it in a root-owned /run.
        {"name": "run-slurmdbd", "mountPath": "/run/slurmdbd"},
    ]
    copy = {
        "name": "slurmdbd-conf",
        "image": cluster.spec.image,
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
    etc = _slurm_etc(cluster)
    etc["projected"]["sources"] = etc["projected"]["sources"][1:]  # the keys only
    labels_ = labels(cluster, "slurmdbd")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cluster, names.slurmdbd, "slurmdbd"),
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
                    **_placement(cluster),
                },
            },
        },
    }


def slurmdbd_service(cluster: SlurmCluster) -> Manifest:
    return _service(cluster, names_of(cluster).slurmdbd, "slurmdbd", ("slurmdbd", wk.SLURMDBD_PORT))


def login_deployment(cluster: SlurmCluster) -> Manifest:
    """Login pods for users (`kubectl exec`): sackd(8) fetches the config from
    slurmctld (configless) and serves auth/slurm credentials to the client commands
    on its socket, so a login pod holds only slurm.key, never the JWT key.
    """
    names = names_of(cluster)
    container = _container(
        cluster,
        "sackd",
        ["sackd", "-D", "--conf-server", f"{names.controller_fqdn}:{wk.SLURMCTLD_PORT}"],
        [],
    )
    del container["readinessProbe"], container["ports"]
    # Clients find sackd's cached config under /run/slurm/conf themselves; SLURM_CONF
    # would point them at /etc/slurm, which holds only the key here.
    container["env"] = [{"name": "SLURM_SACK_KEY", "value": f"{wk.CONFIG_DIR}/slurm.key"}]
    # sackd caches the fetched config in /run/slurm/conf and serves its socket
    # from /run/slurm, but creates neither parent: without it, it exits at once
    # ("failed to create a clean cache dir").
    container["volumeMounts"].append({"name": "run-slurm", "mountPath": "/run/slurm"})
    etc = _slurm_etc(cluster)
    etc["projected"]["sources"] = etc["projected"]["sources"][1:2]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cluster, names.login, "sackd"),
        "spec": {
            "replicas": cluster.spec.login.replicas,
            "selector": {"matchLabels": labels(cluster, "sackd")},
            "template": {
                "metadata": {"labels": labels(cluster, "sackd")},
                "spec": {
                    "containers": [container],
                    "volumes": [etc, {"name": "run-slurm", "emptyDir": {"medium": "Memory"}}],
                    "securityContext": {"fsGroup": SLURM_GID},
                    **_placement(cluster),
                },
            },
        },
    }


def slurmd_pod(
    cluster: SlurmCluster, node_set: NodeSet, node: str, gpus: int, config_hash: str
) -> Manifest:
    """One slurmd on one Kubernetes node, holding all its GPUs (Slurm owns the node)."""
    names = names_of(cluster)
    container = _container(
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
    etc = _slurm_etc(cluster)
    etc["projected"]["sources"] = etc["projected"]["sources"][1:2]
    meta = _meta(
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
        "hostname": _short(node),
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
    meta["annotations"] = {
        wk.ANNOTATION_CONFIG_HASH: config_hash,
        wk.ANNOTATION_POD_TEMPLATE_HASH: pod_template_hash(spec),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_template_hash(spec: Manifest) -> str:
    """A short, stable digest of a pod spec (key order does not matter)."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def slurmd_selector(cluster: SlurmCluster, node_set: str) -> str:
    """The label selector of a NodeSet's slurmd pods (NodeSet status.selector, /scale)."""
    return f"{wk.LABEL_CLUSTER}={cluster.metadata.name},{wk.LABEL_NODESET}={node_set}"


def desired_slurmd_nodes(
    node_set: NodeSet, members: Sequence[str], unavailable: Mapping[str, str]
) -> list[str]:
    """Which member nodes run slurmd: the first `replicas` available ones, in node order.

    `unavailable` maps a node to why it cannot (cordoned, lent to Kueue); such
    nodes are skipped, not counted.
    """
    eligible = [n for n in members if n not in unavailable]
    replicas = node_set.spec.replicas
    return eligible if replicas is None else eligible[:replicas]
