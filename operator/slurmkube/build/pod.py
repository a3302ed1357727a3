"""Pod parts every Slurm component shares: /etc/slurm, the daemon container,
placement beside the controller, a ClusterIP Service (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from slurmkube.api import well_known as wk
from slurmkube.api.meta import Resources
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import Manifest, labels, meta, names_of

# The shared keys (docs/security.md): slurm.key signs and verifies auth/slurm
# credentials for any uid, jwt.key mints a JWT for any user. Each pod gets only
# the keys its daemon reads.
SLURM_KEY = "slurm.key"
SLURM_JWKS = "slurm.jwks"
JWT_KEY = "jwt.key"
# Readiness probe period. One second was tried (979f453, reverted): pods turned
# Ready before slurmrestd answered, and the operator's first reads timed out.
READY_PERIOD_S = 5


def tcp_readiness(port: int | str) -> Manifest:
    return {"tcpSocket": {"port": port}, "periodSeconds": READY_PERIOD_S}


def exec_readiness(*command: str) -> Manifest:
    return {"exec": {"command": list(command)}, "periodSeconds": READY_PERIOD_S}


# Where daemons that start without slurm.conf's directory (configless slurmd, sackd,
# slurmdbd) find the keys: auth/slurm prefers the key set when the file exists.
SACK_ENV = (
    {"name": "SLURM_SACK_KEY", "value": f"{wk.CONFIG_DIR}/{SLURM_KEY}"},
    {"name": "SLURM_SACK_JWKS", "value": f"{wk.CONFIG_DIR}/{SLURM_JWKS}"},
)


def slurm_etc(
    cluster: SlurmCluster, keys: Sequence[str] = (SLURM_KEY, JWT_KEY), config: bool = True
) -> Manifest:
    """/etc/slurm: the rendered files (`config`) and the named `keys`, in one
    read-only projected volume."""
    names = names_of(cluster)
    secret_of = {
        SLURM_KEY: cluster.spec.auth.slurm_key_secret or names.auth,
        JWT_KEY: cluster.spec.auth.jwt_key_secret or names.auth,
    }
    sources: list[Manifest] = [{"configMap": {"name": names.config}}] if config else []
    sources += [
        {"secret": {"name": secret_of[key], "items": [{"key": key, "path": key}]}} for key in keys
    ]
    if SLURM_KEY in keys:
        # The key set a rotation writes beside slurm.key (plan/key_rotation.py); auth/slurm
        # reads it instead of slurm.key when it exists.
        item = {"key": SLURM_JWKS, "path": SLURM_JWKS}
        sources.append(
            {"secret": {"name": secret_of[SLURM_KEY], "items": [item], "optional": True}}
        )
    return {
        "name": "slurm-etc",
        "projected": {
            # Group-readable for the daemon's group (fsGroup): Kubernetes owns the
            # files as root, and Slurm refuses key files that others can read.
            "defaultMode": 0o440,
            "sources": sources,
        },
    }


def daemon_container(
    cluster: SlurmCluster,
    name: str,
    args: Sequence[str],
    ports: Sequence[tuple[str, int]],
    *,
    resources: Resources | None = None,
    image: str | None = None,
) -> Manifest:
    """`image`: the one a Slurm upgrade's step allows (plan/upgrade.py); spec.image by default."""
    container: Manifest = {
        "name": name,
        "image": image or cluster.spec.image,
        "args": list(args),
        "ports": [{"name": p, "containerPort": n, "protocol": "TCP"} for p, n in ports],
        "volumeMounts": [{"name": "slurm-etc", "mountPath": wk.CONFIG_DIR, "readOnly": True}],
        # Explicit, so a Slurm build with another sysconfdir reads the same file.
        "env": [{"name": "SLURM_CONF", "value": f"{wk.CONFIG_DIR}/slurm.conf"}],
        "readinessProbe": tcp_readiness(ports[0][1]) if ports else None,
    }
    if resources is not None and resources.manifest():
        container["resources"] = resources.manifest()
    return container


def placement(cluster: SlurmCluster) -> Manifest:
    controller = cluster.spec.controller
    return {
        "nodeSelector": dict(controller.node_selector),
        "tolerations": [
            t.model_dump(by_alias=True, exclude_none=True) for t in controller.tolerations
        ],
    }


def cluster_service(
    cluster: SlurmCluster, name: str, component: str, port: tuple[str, int]
) -> Manifest:
    """A ClusterIP Service in front of one component's pods."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(cluster, name, component),
        "spec": {
            "selector": labels(cluster, component),
            "ports": [{"name": port[0], "port": port[1]}],
        },
    }


def deployment(
    cluster: SlurmCluster, name: str, component: str, replicas: int, pod: Manifest
) -> Manifest:
    """A Deployment of one component's pods, placed like the controller's."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(cluster, name, component),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels(cluster, component)},
            "template": {
                "metadata": {"labels": labels(cluster, component)},
                "spec": {**pod, **placement(cluster)},
            },
        },
    }
