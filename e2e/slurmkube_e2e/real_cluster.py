"""A SlurmCluster on the real kubelets as a user's `kubectl apply` makes it: only
placement (the real nodes are tainted) and the accounting database are set beyond
the defaults. Used by the real-node cluster and upgrade tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from slurmkube_e2e.accounting import db_login_secret, external_database
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.realnode_config import REAL_FLEET, REAL_NODE_TAINT
from slurmkube_e2e.waiting import has_condition, wait_for, wait_gone

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
        real_node_set(namespace, cluster, replicas),
    ]


def real_node_set(namespace: str, cluster: str, replicas: int) -> dict[str, Any]:
    """The NodeSet `gpu` of `cluster` on the real (tainted) nodes."""
    return {
        "apiVersion": API,
        "kind": "NodeSet",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {
            "clusterRef": cluster,
            "nodeSelector": {"matchLabels": ON_REAL},
            "tolerations": TOLERATE,
            "replicas": replicas,
        },
    }


@contextmanager
def ready_real_cluster(
    kube: Kube, prefix: str, cluster: str, *, image: str, replicas: int, database: MariaDB
) -> Iterator[str]:
    """`real_cluster_docs` applied in a new namespace `<prefix>-<n>`, Ready; its
    namespace. The SlurmCluster and the namespace are deleted afterwards."""
    namespace = f"{prefix}-{int(time.time()) % 100000}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    started = time.monotonic()
    for doc in real_cluster_docs(namespace, cluster, image, replicas, database):
        kube.apply(doc)
    try:
        wait_for(
            kube, API, "SlurmCluster", cluster, lambda o: has_condition(o, "Ready"),
            namespace=namespace, timeout=300,
        )  # fmt: skip
        print(
            f"\nSlurmCluster {cluster} ({image}) on {replicas} real nodes Ready"
            f" in {time.monotonic() - started:.1f}s"
        )
        yield namespace
    finally:
        kube.delete(API, "SlurmCluster", cluster, namespace)
        wait_gone(kube, API, "SlurmCluster", cluster, namespace=namespace, timeout=180)
        kube.delete("v1", "Namespace", namespace)
