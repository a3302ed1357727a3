"""A SlurmCluster on the real kubelets as a user's `kubectl apply` makes it: only
placement (the real nodes are tainted) and the accounting database are set beyond
the defaults. Used by the real-node cluster and upgrade tests."""

from __future__ import annotations

from typing import Any

from slurmkube_e2e.accounting import db_login_secret, external_database
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.realnode_config import REAL_FLEET, REAL_NODE_TAINT

API = "slurmkube.io/v1alpha1"
ON_REAL = {"e2e.slurmkube.io/fleet": REAL_FLEET}
TOLERATE = [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]


def real_cluster_docs(
    namespace: str, cluster: str, image: str, replicas: int, database: MariaDB
) -> list[dict[str, Any]]:
    """The login Secret, the SlurmCluster `cluster` on `image` (blocks of two: one
    per NVLink domain of the real fleet) and its NodeSet `gpu` of `replicas`."""
    return [
        db_login_secret(namespace, database),
        {
            "apiVersion": API,
            "kind": "SlurmCluster",
            "metadata": {"name": cluster, "namespace": namespace},
            "spec": {
                "image": image,
                "controller": {"nodeSelector": ON_REAL, "tolerations": TOLERATE},
                "login": {"replicas": 0},
                "accounting": external_database(database),
                "topology": {"blockSize": 2},
                "deletionPolicy": "Delete",
                "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
            },
        },
        {
            "apiVersion": API,
            "kind": "NodeSet",
            "metadata": {"name": "gpu", "namespace": namespace},
            "spec": {
                "clusterRef": cluster,
                "nodeSelector": {"matchLabels": ON_REAL},
                "tolerations": TOLERATE,
                "replicas": replicas,
            },
        },
    ]
