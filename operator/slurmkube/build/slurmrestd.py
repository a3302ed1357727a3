"""slurmrestd: the REST API's Deployment and Service, TLS in front of it (pure).

slurmrestd itself speaks plain HTTP (Debian's Slurm has no tls/s2n plugin), and
every request carries a JWT that acts as its user. With `spec.restApi.tls` (the
default) slurmrestd listens on a UNIX socket in an emptyDir of its pod and
stunnel(8), in a second container of the same image and uid, serves that socket
as TLS on the port: tokens and replies leave the pod encrypted only.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from typing import Final

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import RESTD_UID, Manifest, meta, names_of
from slurmkube.build.pod import (
    SLURM_KEY,
    cluster_service,
    daemon_container,
    deployment,
    exec_readiness,
    slurm_etc,
)
from slurmkube.build.slurmd import conf_server_wait

SOCKET_DIR: Final = "/run/slurmrestd"
SOCKET: Final = f"{SOCKET_DIR}/slurmrestd.socket"
TLS_DIR: Final = "/etc/slurmkube/restapi-tls"
PROXY_DIR: Final = "/etc/slurmkube/restapi-proxy"
PROXY_CONF: Final = "stunnel.conf"
TLS_CERT: Final = "tls.crt"
TLS_KEY: Final = "tls.key"
CA_CERT: Final = "ca.crt"


def tls_secret_name(cluster: SlurmCluster) -> str | None:
    """The Secret slurmrestd's certificate is read from; None without TLS."""
    tls = cluster.spec.rest_api.tls
    if not tls.enabled:
        return None
    return tls.secret_name or names_of(cluster).restapi_tls


def restapi_scheme(cluster: SlurmCluster) -> str:
    return "https" if cluster.spec.rest_api.tls.enabled else "http"


def stunnel_conf(
    accept: str = f"0.0.0.0:{wk.SLURMRESTD_PORT}", socket: str = SOCKET, tls_dir: str = TLS_DIR
) -> str:
    """stunnel's whole configuration; nothing in it comes from the spec (the
    arguments are for tests that run it outside a pod)."""
    lines = [
        "# Rendered by slurmkube: TLS in front of slurmrestd's UNIX socket. stunnel(8).",
        "foreground = yes",
        "syslog = no",
        # Warnings and errors only: the operator's poll connects every few seconds.
        "debug = warning",
        "pid =",
        "[slurmrestd]",
        f"accept = {accept}",
        f"connect = {socket}",
        f"cert = {tls_dir}/{TLS_CERT}",
        f"key = {tls_dir}/{TLS_KEY}",
        "sslVersionMin = TLSv1.2",
    ]
    return "\n".join(lines) + "\n"


def restapi_proxy_config_map(cluster: SlurmCluster) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(cluster, names_of(cluster).restapi_proxy, "slurmrestd"),
        "data": {PROXY_CONF: stunnel_conf()},
    }


def _tls_proxy(cluster: SlurmCluster, image: str | None) -> Manifest:
    # The image's entrypoint role `stunnel` (images/slurm/entrypoint.sh): the
    # slurmrestd user, which owns the socket it connects to.
    container = daemon_container(
        cluster,
        "tls",
        ["stunnel", f"{PROXY_DIR}/{PROXY_CONF}"],
        [("https", wk.SLURMRESTD_PORT)],
        image=image,
    )
    del container["env"]
    container["volumeMounts"] = [
        {"name": "restapi-proxy", "mountPath": PROXY_DIR, "readOnly": True},
        {"name": "restapi-tls", "mountPath": TLS_DIR, "readOnly": True},
        {"name": "restapi-socket", "mountPath": SOCKET_DIR},
    ]
    container["securityContext"] = _unprivileged()
    return container


def _unprivileged() -> Manifest:
    """slurmrestd's user, with nothing to escalate to."""
    return {
        "runAsUser": RESTD_UID,
        "runAsGroup": RESTD_UID,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def _slurmctld_wait(host: str, image: str) -> Manifest:
    """slurmd's wait for slurmctld, as slurmrestd's unprivileged user: it only dials."""
    wait = conf_server_wait(host, wk.SLURMCTLD_PORT, image=image)
    wait["securityContext"] = _unprivileged()
    return wait


def _tls_volumes(cluster: SlurmCluster, secret: str) -> list[Manifest]:
    items = [{"key": TLS_CERT, "path": TLS_CERT}, {"key": TLS_KEY, "path": TLS_KEY}]
    return [
        {"name": "restapi-socket", "emptyDir": {"medium": "Memory"}},
        {
            "name": "restapi-proxy",
            "configMap": {"name": names_of(cluster).restapi_proxy, "defaultMode": 0o444},
        },
        # Group-readable for the slurmrestd user's group (fsGroup); root owns it.
        {
            "name": "restapi-tls",
            "secret": {"secretName": secret, "items": items, "defaultMode": 0o440},
        },
    ]


def tls_revision(cert_pem: bytes) -> str:
    """The pod template's `slurmkube.io/restapi-tls`: a digest of the certificate."""
    return hashlib.sha256(cert_pem).hexdigest()[:16]


def with_tls_revision(objects: Sequence[Manifest], revision: str) -> tuple[Manifest, ...]:
    """`objects` with slurmrestd's Deployment annotated for the certificate `revision`."""
    out = []
    for obj in objects:
        labels = obj["metadata"]["labels"]
        if obj["kind"] != "Deployment" or labels.get(wk.LABEL_NAME) != "slurmrestd":
            out.append(obj)
            continue
        annotated = copy.deepcopy(obj)
        _annotate(annotated, revision)
        out.append(annotated)
    return tuple(out)


def _annotate(deployment: Manifest, revision: str) -> None:
    template = deployment["spec"]["template"]["metadata"]
    template.setdefault("annotations", {})[wk.ANNOTATION_RESTAPI_TLS] = revision


def restapi_deployment(
    cluster: SlurmCluster, image: str | None = None, tls_revision: str | None = None
) -> Manifest:
    """`tls_revision`: a digest of the certificate in use; a new one rolls the pods,
    since stunnel reads its certificate once, at start."""
    names = names_of(cluster)
    secret = tls_secret_name(cluster)
    # Only the openapi plugins whose daemons exist: the default set needs slurmdbd
    # and slurmrestd exits without it. JWT only: pods share no UNIX socket.
    plugins = "openapi/slurmctld" + (",openapi/slurmdbd" if cluster.spec.accounting.enabled else "")
    listen = f"unix:{SOCKET}" if secret else f"0.0.0.0:{wk.SLURMRESTD_PORT}"
    args = ["slurmrestd", "-a", "rest_auth/jwt", "-s", plugins, listen]
    container = daemon_container(
        cluster,
        "slurmrestd",
        args,
        [] if secret else [("slurmrestd", wk.SLURMRESTD_PORT)],
        resources=cluster.spec.rest_api.resources,
        image=image,
    )
    # slurmrestd refuses to run as root or as SlurmUser: its own user (402).
    container["securityContext"] = {"runAsUser": RESTD_UID, "runAsGroup": RESTD_UID}
    # auth/jwt as its primary plugin, so each client's token is what slurmctld sees.
    container["env"].append({"name": "SLURM_JWT", "value": "daemon"})
    # No jwt.key: slurmrestd passes each client's token through and slurmctld
    # verifies it; no slurm.key: with auth/jwt primary nothing it sends is an
    # auth/slurm credential (tests/integration/test_slurmrestd_keys.py runs it
    # with neither key). Its talk to slurmdbd is not tested without slurm.key
    # yet, so with accounting on it keeps that key.
    keys = [SLURM_KEY] if cluster.spec.accounting.enabled else []
    containers = [container]
    volumes = [slurm_etc(cluster, keys=keys)]
    if secret:
        del container["ports"]
        container["volumeMounts"].append({"name": "restapi-socket", "mountPath": SOCKET_DIR})
        container["readinessProbe"] = exec_readiness("test", "-S", SOCKET)
        containers.append(_tls_proxy(cluster, image))
        volumes += _tls_volumes(cluster, secret)
    pod = {
        # A request that reaches slurmrestd before slurmctld's name resolves waits
        # half a minute for its answer (slurmrestd retries the controller it could
        # not resolve), and holds up the reconcile that asked: start once slurmctld
        # listens, as slurmd does.
        "initContainers": [_slurmctld_wait(names.controller_fqdn, container["image"])],
        "containers": containers,
        "volumes": volumes,
        "securityContext": {"fsGroup": RESTD_UID},
    }
    manifest = deployment(cluster, names.restapi, "slurmrestd", cluster.spec.rest_api.replicas, pod)
    if secret and tls_revision:
        _annotate(manifest, tls_revision)
    return manifest


def restapi_service(cluster: SlurmCluster) -> Manifest:
    port = "https" if tls_secret_name(cluster) else "http"
    return cluster_service(
        cluster, names_of(cluster).restapi, "slurmrestd", (port, wk.SLURMRESTD_PORT)
    )
