"""slurmrestd: the REST API's Deployment and Service (pure)."""

from __future__ import annotations

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import RESTD_UID, Manifest, names_of
from slurmkube.build.pod import (
    SLURM_KEY,
    cluster_service,
    daemon_container,
    deployment,
    slurm_etc,
)


def restapi_deployment(cluster: SlurmCluster, image: str | None = None) -> Manifest:
    names = names_of(cluster)
    # Only the openapi plugins whose daemons exist: the default set needs slurmdbd
    # and slurmrestd exits without it. JWT only: pods share no UNIX socket.
    plugins = "openapi/slurmctld" + (",openapi/slurmdbd" if cluster.spec.accounting.enabled else "")
    args = ["slurmrestd", "-a", "rest_auth/jwt", "-s", plugins, f"0.0.0.0:{wk.SLURMRESTD_PORT}"]
    container = daemon_container(
        cluster,
        "slurmrestd",
        args,
        [("slurmrestd", wk.SLURMRESTD_PORT)],
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
    pod = {
        "containers": [container],
        "volumes": [slurm_etc(cluster, keys=keys)],
        "securityContext": {"fsGroup": RESTD_UID},
    }
    return deployment(cluster, names.restapi, "slurmrestd", cluster.spec.rest_api.replicas, pod)


def restapi_service(cluster: SlurmCluster) -> Manifest:
    return cluster_service(
        cluster, names_of(cluster).restapi, "slurmrestd", ("http", wk.SLURMRESTD_PORT)
    )
