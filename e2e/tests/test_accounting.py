"""Accounting: the operator runs slurmdbd against an external MariaDB (mariadbd on
the host, reached over the pod network), slurmctld registers the cluster there,
and `sacct` shows a finished job. The database password lives in the user's
Secret and the operator's slurmdbd Secret, nowhere else.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from functools import partial

import pytest

from slurmkube_e2e.accounting import accounted_cluster, sacct_state
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.operator_cluster import API, in_ctld, wait_job

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def accounted(kube: Kube, operator: None, database: MariaDB) -> Iterator[str]:
    with accounted_cluster(kube, database, "e2e-accounting") as namespace:
        yield namespace


def test_slurmctld_registers_with_slurmdbd_and_sacct_shows_the_finished_job(
    kube: Kube, accounted: str
) -> None:
    clusters = in_ctld(accounted, "sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster")
    assert "local" in clusters.split()
    job = in_ctld(accounted, "sbatch", "--parsable", "-N2", "--wrap", "srun true").strip()
    wait_job(accounted, job, {"COMPLETED"})
    assert sacct_state(partial(in_ctld, accounted), job) == "COMPLETED"


def test_the_database_password_is_only_in_secrets(
    kube: Kube, accounted: str, database: MariaDB
) -> None:
    config_map = kube.get("v1", "ConfigMap", "local-slurm-config", namespace=accounted)
    assert config_map is not None
    assert all(database.password not in text for text in config_map["data"].values())
    secret = kube.get("v1", "Secret", "local-slurmdbd-config", namespace=accounted)
    assert secret is not None
    conf = base64.b64decode(secret["data"]["slurmdbd.conf"]).decode()
    assert f"StoragePass={database.password}\n" in conf
    cluster = kube.get(API, "SlurmCluster", "local", namespace=accounted)
    assert cluster is not None and database.password not in str(cluster.get("status"))
