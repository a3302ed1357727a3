"""Login pods: sackd and the client commands (pure)."""

from __future__ import annotations

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import SLURM_GID, Manifest, names_of
from slurmkube.build.pod import SACK_ENV, SLURM_KEY, daemon_container, deployment, slurm_etc


def login_deployment(cluster: SlurmCluster, image: str | None = None) -> Manifest:
    """Login pods for users (`kubectl exec`): sackd(8) fetches the config from
    slurmctld (configless) and serves auth/slurm credentials to the client commands
    on its socket, so a login pod holds only slurm.key, never the JWT key.
    """
    names = names_of(cluster)
    container = daemon_container(
        cluster,
        "sackd",
        ["sackd", "-D", "--conf-server", f"{names.controller_fqdn}:{wk.SLURMCTLD_PORT}"],
        [],
        resources=cluster.spec.login.resources,
        image=image,
    )
    del container["readinessProbe"], container["ports"]
    # Clients find sackd's cached config under /run/slurm/conf themselves; SLURM_CONF
    # would point them at /etc/slurm, which holds only the key here.
    container["env"] = list(SACK_ENV)
    # sackd caches the fetched config in /run/slurm/conf and serves its socket
    # from /run/slurm, but creates neither parent: without it, it exits at once
    # ("failed to create a clean cache dir").
    container["volumeMounts"].append({"name": "run-slurm", "mountPath": "/run/slurm"})
    pod = {
        "containers": [container],
        "volumes": [
            slurm_etc(cluster, keys=[SLURM_KEY], config=False),
            {"name": "run-slurm", "emptyDir": {"medium": "Memory"}},
        ],
        "securityContext": {"fsGroup": SLURM_GID},
    }
    return deployment(cluster, names.login, "sackd", cluster.spec.login.replicas, pod)
