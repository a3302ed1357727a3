"""The cluster's keys as a Secret (pure)."""

from __future__ import annotations

from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import Manifest, meta, names_of


def auth_secret(cluster: SlurmCluster, slurm_key_b64: str, jwt_key_b64: str) -> Manifest:
    """Keys are generated once by the controller and then only ever read back."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(cluster, names_of(cluster).auth, "slurm-auth"),
        "type": "Opaque",
        "data": {"slurm.key": slurm_key_b64, "jwt.key": jwt_key_b64},
    }
